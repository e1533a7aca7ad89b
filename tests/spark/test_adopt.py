"""Landed parquet files adopted as they are (wapflow.pipeline.steps.adopt): copied byte for byte into the table and
committed to the run's branch when their columns are the table's, rewritten otherwise. What a reader of main
gets is checked by PyIceberg on the same catalog, which finds the adopted files' columns by the name mapping."""

from __future__ import annotations

import hashlib
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from support.data import TRIPS_CHECKS, trips_file, write_parquet
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.model import NAME_MAPPING_PROP
from wapflow.pipeline import run_wap
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
T = TableName.parse("nyc.trips")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _main(lh: Lakehouse) -> Any:
    """main of nyc.trips through PyIceberg on the lakehouse's SQLite catalog (no Spark, no wapflow code)."""
    from pyiceberg.catalog.sql import SqlCatalog

    wh = Path(lh.config.lakehouse.warehouse)
    cat = SqlCatalog(lh.config.lakehouse.catalog_name, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}")
    return cat.load_table("nyc.trips")


def _files_on_main(lh: Lakehouse) -> list[Path]:
    return [Path(t.file.file_path.removeprefix("file:")) for t in _main(lh).scan().plan_files()]


def test_a_matching_file_is_copied_as_it_is_and_read_back_by_name(trips_lakehouse, landing):
    lh = trips_lakehouse
    first = trips_file(landing, "first.parquet", 300)
    assert run_wap(lh, "nyc.trips", [str(first)]).status == "published"  # creates the table like the file
    second = trips_file(landing, "second.parquet", 500, start_id=1000, seed=5)
    res = run_wap(lh, "nyc.trips", [str(second)])
    assert res.status == "published", res.message
    assert res.rows_written == 500
    assert {c["status"] for c in res.checks} == {"passed"}
    table = _main(lh)
    assert table.metadata.snapshot_by_id(res.snapshot_id).summary["wapflow.run-id"] == res.run_id
    assert NAME_MAPPING_PROP in table.properties
    adopted = [p for p in _files_on_main(lh) if "adopted" in p.name]
    assert sorted(map(_sha, adopted)) == sorted([_sha(first), _sha(second)])  # the landed bytes, not a rewrite
    assert second.exists()
    rows = table.scan().to_arrow().sort_by("trip_id")
    expected = pa.concat_tables([pq.read_table(first), pq.read_table(second)]).sort_by("trip_id")
    assert rows.num_rows == 800
    assert rows.column("trip_id").to_pylist() == expected.column("trip_id").to_pylist()
    assert rows.column("fare_amount").to_pylist() == expected.column("fare_amount").to_pylist()


def test_failing_rows_of_an_adopted_file_block_the_run_from_the_scan(trips_lakehouse, landing):
    lh = trips_lakehouse
    assert run_wap(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 100))]).status == "published"
    main_before = lh.tables.head(T)
    dirty = trips_file(landing, "dirty.parquet", 200, null_rate=0.05, start_id=1000, seed=3)
    res = run_wap(lh, "nyc.trips", [str(dirty)])
    assert res.status == "blocked" and res.exit_code == 1
    failed = [c for c in res.checks if c["status"] == "failed"]
    assert [(c["check"], c["failing_rows"]) for c in failed] == [("not_null", 10)]
    assert lh.tables.head(T) == main_before
    assert lh.tables.read(T, res.branch).filter("passenger_count IS NULL").count() == 10


@pytest.mark.parametrize("decoder", ["arrow", "spark"])
def test_a_file_that_cannot_be_decoded_fails_before_anything_is_copied(lakehouse_factory, landing, decoder):
    """A small local batch whose checks Iceberg's counts answer (not_null) is decoded by Arrow in the driver; one
    with checks to observe (the README's six) by the Spark scan: either way every page is decoded before
    anything is copied."""
    checks = [{"check": "not_null", "column": "passenger_count"}] if decoder == "arrow" else TRIPS_CHECKS
    lh = lakehouse_factory({"nyc.trips": {"checks": checks}})
    assert run_wap(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 100))]).status == "published"
    main_before = lh.tables.head(T)
    files_before = sorted(p.name for p in (Path(lh.config.lakehouse.warehouse)).rglob("*.parquet"))
    bad = trips_file(landing, "corrupt.parquet", 2000, start_id=5000, seed=9)
    # Garble the data pages, keep the footer: the magic bytes and the schema check still pass.
    data = bytearray(bad.read_bytes())
    footer_len = int.from_bytes(data[-8:-4], "little")
    for i in range(64, len(data) - footer_len - 8, 7):
        data[i] ^= 0x5A
    bad.write_bytes(bytes(data))
    res = run_wap(lh, "nyc.trips", [str(bad)])
    assert res.status == "failed" and res.exit_code == 3, res.message  # an input error (docs: exit codes)
    assert res.error is not None and res.error["kind"] == "input", res.error
    assert "corrupt.parquet" in res.message
    assert ("cannot decode its data" in res.message) == (decoder == "arrow"), res.message
    assert lh.tables.head(T) == main_before
    files_after = sorted(p.name for p in (Path(lh.config.lakehouse.warehouse)).rglob("*.parquet"))
    assert files_after == files_before
    assert bad.exists()


@pytest.mark.parametrize(
    ("why", "tables", "second", "said"),
    [
        ("adopt_parquet = false", {"adopt_parquet": False}, None, None),
        ("a file with Iceberg field ids of its own", {}, "field_ids", "ids.parquet carries Iceberg field ids"),
        ("a file of several partitions", {"partition_by": ["payment_type"]}, None, "its rows are in several"),
        ("a sorted table", {"sort_by": ["trip_id"]}, None, "the table is sorted"),
        ("two small files", {}, "two", "several files, some small"),
    ],
)
def test_a_file_not_exactly_the_tables_is_rewritten(lakehouse_factory, landing, why, tables, second, said):
    """Rewritten by Spark, and the run says why its files were not adopted (nothing when adoption is off)."""
    lh = lakehouse_factory({"nyc.trips": {"checks": TRIPS_CHECKS, **tables}})
    assert run_wap(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 100))]).status == "published"
    f = trips_file(landing, "b.parquet", 150, start_id=1000, seed=2)
    if second == "field_ids":
        t = pq.read_table(f)
        ids = pa.schema([x.with_metadata({b"PARQUET:field_id": str(100 + n).encode()}) for n, x in enumerate(t.schema)])
        f = write_parquet(landing / "ids.parquet", t.cast(ids))
        assert pq.read_schema(f).field("trip_id").metadata == {b"PARQUET:field_id": b"100"}, why
    files = [str(f)]
    if second == "two":
        files = [
            str(trips_file(landing, "b1.parquet", 75, start_id=1000)),
            str(trips_file(landing, "b2.parquet", 75, start_id=2000)),
        ]
    lines: list[str] = []
    lh.progress = lines.append
    res = run_wap(lh, "nyc.trips", files)
    assert res.status == "published", (why, res.message)
    reasons = [line for line in lines if line.startswith("rewriting the rows (the files are not adopted")]
    assert (said is None and not reasons) or (len(reasons) == 1 and said in reasons[0]), (why, lines)
    assert not [p for p in _files_on_main(lh) if p.name.startswith(f"{res.run_id}-adopted")], why
    assert _main(lh).scan().to_arrow().num_rows == 250


def test_narrower_columns_iceberg_widens_on_read_are_adopted_and_read_as_the_tables(lakehouse_factory, landing):
    """A file whose trip_id is int32 and fare_amount float32, into a table of long and double (Iceberg's type
    promotions, which every reader resolves): adopted as it is. Spark and PyIceberg read the table's types and
    the file's values; a `between` check whose bounds the file's metrics cannot settle scans and fails."""
    checks = [{"check": "between", "column": "trip_id", "min": 0, "max": 1100}, {"check": "row_count", "min": 1}]
    lh = lakehouse_factory({"nyc.trips": {"checks": checks}})
    assert run_wap(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 100))]).status == "published"
    wide = pq.read_table(trips_file(landing, "b.parquet", 150, start_id=1000, seed=2))
    i, j = wide.schema.get_field_index("trip_id"), wide.schema.get_field_index("fare_amount")
    narrow = wide.set_column(i, "trip_id", wide[i].cast(pa.int32()))
    narrow = narrow.set_column(j, "fare_amount", wide[j].cast(pa.float32()))
    f = write_parquet(landing / "narrow.parquet", narrow)
    res = run_wap(lh, "nyc.trips", [str(f)])
    assert res.status == "blocked", res.message  # ids up to 1149
    assert [(c["check"], c["status"]) for c in res.checks] == [("between", "failed"), ("row_count", "passed")]
    on_branch = lh.tables.read(T, res.branch)
    assert on_branch.schema["trip_id"].dataType.simpleString() == "bigint"
    assert on_branch.filter("trip_id > 1100").count() == 49
    table = _main(lh)
    on_branch_files = table.scan(snapshot_id=table.metadata.refs[res.branch].snapshot_id).plan_files()
    assert [t for t in on_branch_files if f"{res.run_id}-adopted" in t.file.file_path], res.branch
    assert len(_files_on_main(lh)) == 1  # blocked: main has the first run's file only
    wide_run = lakehouse_factory({"nyc.trips": {"checks": [{"check": "row_count", "min": 1}]}})  # its own catalog
    assert run_wap(wide_run, "nyc.trips", [str(landing / "a.parquet")]).status == "published"  # long, double
    ok = run_wap(wide_run, "nyc.trips", [str(f)])
    assert ok.status == "published", ok.message
    table = _main(wide_run)
    [data] = [p for p in _files_on_main(wide_run) if p.name.startswith(f"{ok.run_id}-adopted")]
    assert _sha(data) == _sha(f)
    rows = table.scan(row_filter="trip_id >= 1000").to_arrow().sort_by("trip_id")
    assert rows.schema.field("trip_id").type == pa.int64() and rows.schema.field("fare_amount").type == pa.float64()
    assert rows.column("trip_id").to_pylist() == list(range(1000, 1150))
    assert rows.column("fare_amount").to_pylist() == narrow.column("fare_amount").cast(pa.float64()).to_pylist()


def test_a_file_of_one_partition_is_adopted_into_it_and_pruned_like_a_written_one(lakehouse_factory, landing):
    """Into a table partitioned by month(pickup_at) and vendor_id: a file of both vendors (the first run, which
    creates the table) is rewritten by Spark into one file per partition; a file of one vendor's trips (all in
    one month) is adopted into its partition, which its footer's statistics give. PyIceberg finds the same
    partition on an adopted file and a written one, and a filter on vendor_id prunes the other vendor's files."""
    lh = lakehouse_factory({"nyc.trips": {"checks": TRIPS_CHECKS, "partition_by": ["month(pickup_at)", "vendor_id"]}})
    both = trips_file(landing, "both.parquet", 300, start_id=5000, seed=6)
    trips = pq.read_table(trips_file(landing, "all.parquet", 600, seed=4))
    one = write_parquet(landing / "v1.parquet", trips.filter(pc.field("vendor_id") == 1))
    two = write_parquet(landing / "v2.parquet", trips.filter(pc.field("vendor_id") == 2))
    runs = [run_wap(lh, "nyc.trips", [str(f)]) for f in (both, one, two)]
    assert [r.status for r in runs] == ["published"] * 3, [r.message for r in runs]
    files = {t.file.file_path.rsplit("/", 1)[-1]: t.file for t in _main(lh).scan().plan_files()}
    written = [f for n, f in files.items() if n.startswith(runs[0].run_id) or "adopted" not in n]
    assert len(files) == 4 and len(written) == 2, sorted(files)
    by_vendor = {f.partition[1]: f.partition for f in written}
    month = (2026 - 1970) * 12 + 10  # November 2026 in months since the epoch: Iceberg's month transform
    assert sorted(by_vendor) == [1, 2] and {p[0] for p in by_vendor.values()} == {month}
    for run, vendor, landed in ((runs[1], 1, one), (runs[2], 2, two)):
        [adopted] = [f for n, f in files.items() if n.startswith(f"{run.run_id}-adopted")]
        assert adopted.partition == by_vendor[vendor], (adopted.partition, by_vendor[vendor])
        assert _sha(Path(adopted.file_path.removeprefix("file:"))) == _sha(landed)
    pruned = [t.file.file_path.rsplit("/", 1)[-1] for t in _main(lh).scan(row_filter="vendor_id == 1").plan_files()]
    assert sorted(pruned) == sorted(n for n, f in files.items() if f.partition[1] == 1)
    expected = pq.read_table(one).num_rows + pq.read_table(both).filter(pc.field("vendor_id") == 1).num_rows
    assert _main(lh).scan(row_filter="vendor_id == 1").to_arrow().num_rows == expected
    assert lh.tables.read(T).filter("vendor_id = 1").count() == expected


def test_a_days_file_is_adopted_into_its_day_and_a_file_of_nulls_into_the_null_partition(lakehouse_factory, landing):
    """Partitioned by day(pickup_at) (a date partition value) and vendor_id: one day's trips of vendor 1 are
    adopted into the partition Spark writes that day's vendor-1 rows to; the same day's trips without a vendor
    (vendor_id all null) into that day's null partition, which a filter on `vendor_id IS NULL` finds."""
    lh = lakehouse_factory({"nyc.trips": {"checks": TRIPS_CHECKS, "partition_by": ["day(pickup_at)", "vendor_id"]}})
    both = trips_file(landing, "both.parquet", 1200, start_id=5000, seed=6)
    trips = pq.read_table(trips_file(landing, "all.parquet", 1200, seed=4))
    nov3 = pa.scalar(datetime(2026, 11, 3), pa.timestamp("us"))
    day = pc.equal(pc.floor_temporal(trips.column("pickup_at"), unit="day"), nov3)
    one = write_parquet(landing / "d1.parquet", trips.filter(pc.and_(day, pc.equal(trips.column("vendor_id"), 1))))
    nulls = trips.filter(pc.and_(day, pc.equal(trips.column("vendor_id"), 2)))
    i = nulls.schema.get_field_index("vendor_id")
    nulls = write_parquet(
        landing / "d0.parquet", nulls.set_column(i, "vendor_id", pa.nulls(nulls.num_rows, pa.int32()))
    )
    runs = [run_wap(lh, "nyc.trips", [str(f)]) for f in (both, one, nulls)]
    assert [r.status for r in runs] == ["published"] * 3, [r.message for r in runs]
    files = {t.file.file_path.rsplit("/", 1)[-1]: t.file for t in _main(lh).scan().plan_files()}
    [adopted_one] = [f for n, f in files.items() if n.startswith(f"{runs[1].run_id}-adopted")]
    [adopted_nulls] = [f for n, f in files.items() if n.startswith(f"{runs[2].run_id}-adopted")]
    written = [f for n, f in files.items() if "adopted" not in n]
    same = [f for f in written if f.partition == adopted_one.partition]
    assert len(same) == 1 and adopted_one.partition[1] == 1, (adopted_one.partition, [f.partition for f in written])
    assert adopted_nulls.partition[0] == adopted_one.partition[0] and adopted_nulls.partition[1] is None
    null_files = [t.file.file_path for t in _main(lh).scan(row_filter="vendor_id IS NULL").plan_files()]
    assert [p.rsplit("/", 1)[-1] for p in null_files] == [adopted_nulls.file_path.rsplit("/", 1)[-1]]
    assert _main(lh).scan(row_filter="vendor_id IS NULL").to_arrow().num_rows == pq.read_table(nulls).num_rows > 0
    assert lh.tables.read(T).filter("vendor_id IS NULL").count() == pq.read_table(nulls).num_rows


def test_a_file_changed_after_it_was_listed_is_rewritten_not_adopted(trips_lakehouse, landing):
    """The ledger's identity of a local file is its mtime and size: a file touched between the run's listing
    (prepare) and its write is not the file listed, so its rows are read and rewritten by Spark instead."""
    import os

    from wapflow.pipeline import audit, new_state, prepare, publish_step, write

    lh = trips_lakehouse
    assert run_wap(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 100))]).status == "published"
    f = trips_file(landing, "b.parquet", 150, start_id=1000, seed=2)
    state = prepare(lh, new_state("nyc.trips", [str(f)]))
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    for step in (write, audit, publish_step):
        state = step(lh, state)
    assert state.status == "published", state.record["error"]
    assert not [p for p in _files_on_main(lh) if p.name.startswith(f"{state.run_id}-adopted")]
    assert _main(lh).scan().to_arrow().num_rows == 250
