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
