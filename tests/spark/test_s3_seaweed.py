"""The S3 path against a real S3 server, SeaweedFS on 127.0.0.1 (not a mock): landed objects read from a landing
bucket, a warehouse on S3 written by Spark (Hadoop S3A, Iceberg's S3FileIO), a blocked batch kept on its branch,
and PyIceberg reading the same catalog and objects with read-only keys, without Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.s3_lake import lakehouse, upload_trips
from support.s3_server import REGION
from support.seaweed import WeedEnv
from wapflow.pipeline import run_wap
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
TABLE = TableName.parse("nyc.trips")


def test_a_real_s3_server_publishes_blocks_and_reads_back(spark, weed_s3: WeedEnv, tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    landing, lake = weed_s3.buckets()
    clean = upload_trips(weed_s3, landing, "2026/12/clean/part-1.parquet", 300)
    dirty = upload_trips(weed_s3, landing, "2026/12/dirty.parquet", 200, null_rate=0.05, start_id=5000)
    lh = lakehouse(spark, tmp_path, weed_s3, lake=lake, catalog="weed_e2e", keys=weed_s3.admin)

    ok = run_wap(lh, "nyc.trips", [clean])
    assert ok.status == "published", ok.message
    written = weed_s3.keys_in(lake)
    assert any(k.startswith("warehouse/nyc/trips/data/") and k.endswith(".parquet") for k in written)
    bad = run_wap(lh, "nyc.trips", [dirty])
    assert bad.status == "blocked" and lh.tables.head(TABLE) == ok.snapshot_id
    assert lh.tables.row_count(TABLE, bad.branch) == 500  # kept on its branch, on S3

    catalog = SqlCatalog(
        "weed_e2e",
        uri=f"sqlite:///{tmp_path / '.wap' / 'catalog.db'}",
        warehouse=f"s3://{lake}/warehouse",
        **{
            "s3.endpoint": weed_s3.endpoint,
            "s3.region": REGION,
            "s3.access-key-id": weed_s3.reader.access_key_id,
            "s3.secret-access-key": weed_s3.reader.secret_access_key,
        },
    )
    table = catalog.load_table("nyc.trips")
    assert table.current_snapshot().snapshot_id == ok.snapshot_id
    arrow = table.scan().to_arrow()
    assert arrow.num_rows == 300 and arrow.column("passenger_count").null_count == 0
    assert set(table.refs()) == {"main", bad.branch}


def test_control_totals_read_the_producers_manifest_on_a_real_s3_server(spark, weed_s3: WeedEnv, tmp_path: Path):
    """The manifest beside the objects (control_totals): read from the bucket, its sha256 against the object's
    own bytes streamed back, skipped by the prefix's listing; a delivery one object short blocks, main unchanged."""
    import hashlib
    import io
    import json

    import pyarrow.parquet as pq

    from wapflow import checks as C
    from wapflow.demo.generate import generate_trips

    landing, lake = weed_s3.buckets()
    s3 = weed_s3.client()

    def deliver(prefix: str, parts: dict[str, int], *, declared: dict[str, int] | None = None) -> None:
        files = {}
        for name, rows in parts.items():
            buf = io.BytesIO()
            start = 1000 * (ord(name[0]) - ord("a") + 1)  # trip ids of their own: a.parquet from 1000, b from 2000
            pq.write_table(generate_trips(rows, start_id=start, seed=rows), buf)
            s3.put_object(Bucket=landing, Key=f"{prefix}/{name}", Body=buf.getvalue())
            files[name] = {"rows": rows, "sha256": hashlib.sha256(buf.getvalue()).hexdigest()}
        for name, rows in (declared or {}).items():
            files[name] = {"rows": rows}
        s3.put_object(Bucket=landing, Key=f"{prefix}/_manifest.json", Body=json.dumps({"files": files}).encode())

    deliver("ctl/day1", {"a.parquet": 120, "b.parquet": 80})
    deliver("ctl/day2", {"c.parquet": 50}, declared={"d.parquet": 70})  # d never landed
    lh = lakehouse(spark, tmp_path, weed_s3, lake=lake, catalog="weed_ctl", keys=weed_s3.admin)
    check = [C.control_totals()]

    ok = run_wap(lh, "nyc.trips", [f"s3://{landing}/ctl/day1/"], extra_checks=check)
    assert ok.status == "published", ok.message
    assert ok.rows_written == 200 and len(ok.files) == 2  # the manifest is not read as rows
    [line] = [c for c in ok.checks if c["check"] == "control_totals"]
    assert line["status"] == "passed" and line["observed"] == "rows 200 = declared"

    short = run_wap(lh, "nyc.trips", [f"s3://{landing}/ctl/day2/"], extra_checks=check)
    assert short.status == "blocked" and lh.tables.head(TABLE) == ok.snapshot_id
    [line] = [c for c in short.checks if c["check"] == "control_totals"]
    assert line["status"] == "failed"
    assert line["observed"].startswith(f"1 file(s) named in s3://{landing}/ctl/day2/_manifest.json not in this batch")
    assert "rows 50, declared 120 (difference 70, 58.33%)" in line["observed"]
