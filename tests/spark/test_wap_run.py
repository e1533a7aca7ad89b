"""The WAP run end to end on real Spark, real Iceberg tables and the real SQLite JDBC catalog."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from support.data import trips_file, write_parquet
from wapflow.pipeline import WapRun, run_wap
from wapflow.pipeline.state import snapshot_from_data
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
T = TableName.parse("nyc.trips")


def test_clean_file_is_published_and_branch_dropped(trips_lakehouse, landing):
    lh = trips_lakehouse
    f = trips_file(landing, "clean.parquet", 300)
    res = run_wap(lh, "nyc.trips", [str(f)])
    assert res.status == "published", res.message
    assert res.exit_code == 0
    assert res.rows_written == 300
    assert lh.tables.row_count(T) == 300
    assert lh.tables.head(T) == res.snapshot_id
    assert [b.name for b in lh.iceberg.list(T)] == []
    assert {c["status"] for c in res.checks} == {"passed"}
    assert len(res.checks) == 6
    # The published snapshot carries the run id and the source file.
    snap = lh.tables.snapshots(T)[res.snapshot_id]
    assert snap.run_id == res.run_id
    assert str(f) in snap.summary["wapflow.sources"]
    assert f.exists()


def test_main_moves_and_the_branch_goes_in_one_commit_without_checksum_sidecars(trips_lakehouse, landing):
    """A fast-forward publish is one metadata commit: the version before it has the branch at the run's
    rows and main at its base; the next has main there and no branch. No Hadoop .crc sidecar is written."""
    lh = trips_lakehouse
    run_wap(lh, "nyc.trips", [str(trips_file(landing, "seed.parquet", 20))])
    base = lh.tables.head(T)
    res = run_wap(lh, "nyc.trips", [str(trips_file(landing, "one.parquet", 50, start_id=100))])
    assert res.status == "published" and res.published_via == "fast_forward", res.message
    current = lh.tables.metadata(T)
    assert current is not None
    assert set(current["refs"]) == {"main"}
    assert current["refs"]["main"]["snapshot-id"] == res.snapshot_id
    before = current["metadata-log"][-1]["metadata-file"]
    previous = json.loads(Path(before.removeprefix("file:")).read_text())
    assert previous["refs"]["main"]["snapshot-id"] == base
    assert previous["refs"][res.branch]["snapshot-id"] == res.snapshot_id
    warehouse = lh.config.local_warehouse_path()
    assert warehouse is not None
    assert list(warehouse.rglob("*.crc")) == []
    assert any(warehouse.rglob("*.parquet"))


def test_dirty_file_is_blocked_main_untouched_branch_kept(trips_lakehouse, landing):
    lh = trips_lakehouse
    first = run_wap(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 200))])
    assert first.status == "published"
    main_before = lh.tables.head(T)
    dirty = trips_file(landing, "dirty.parquet", 200, null_rate=0.05, start_id=1000, seed=3)
    res = run_wap(lh, "nyc.trips", [str(dirty)])
    assert res.status == "blocked"
    assert res.exit_code == 1
    failed = [c for c in res.checks if c["status"] == "failed"]
    assert [c["check"] for c in failed] == ["not_null"]
    assert failed[0]["failing_rows"] == 10
    assert lh.tables.head(T) == main_before
    assert lh.tables.row_count(T) == 200
    assert res.branch in [b.name for b in lh.iceberg.list(T)]
    assert res.branch_kept
    # The failing rows are readable on the kept branch.
    branch_df = lh.tables.read(T, res.branch)
    assert branch_df.filter("passenger_count IS NULL").count() == 10
    assert branch_df.count() == 400
    assert dirty.exists()


def test_on_failure_drop_removes_the_branch(lakehouse_factory, landing):
    lh = lakehouse_factory(
        {"nyc.trips": {"on_failure": "drop", "checks": [{"check": "not_null", "column": "passenger_count"}]}}
    )
    ok = run_wap(lh, "nyc.trips", [str(trips_file(landing, "ok.parquet", 50))])
    main_before = lh.tables.head(T)
    res = run_wap(lh, "nyc.trips", [str(trips_file(landing, "bad.parquet", 50, null_rate=0.1, start_id=99))])
    assert ok.status == "published" and res.status == "blocked"
    assert lh.tables.head(T) == main_before
    assert lh.iceberg.list(T) == []
    assert not res.branch_kept


def test_blocked_first_run_leaves_main_empty(lakehouse_factory, landing):
    lh = lakehouse_factory({"nyc.trips": {"checks": [{"check": "not_null", "column": "passenger_count"}]}})
    res = run_wap(lh, "nyc.trips", [str(trips_file(landing, "bad.parquet", 40, null_rate=0.1))])
    assert res.status == "blocked"
    assert lh.tables.row_count(T) == 0
    assert lh.tables.row_count(T, res.branch) == 40


def test_warn_severity_publishes_and_reports(lakehouse_factory, landing):
    lh = lakehouse_factory(
        {
            "nyc.trips": {
                "checks": [{"check": "between", "column": "fare_amount", "min": 0, "max": 5, "severity": "warn"}]
            }
        }
    )
    res = run_wap(lh, "nyc.trips", [str(trips_file(landing, "f.parquet", 100))])
    assert res.status == "published"
    assert res.checks[0]["status"] == "warned"
    assert res.checks[0]["failing_rows"] > 0
    assert "warning" in res.message


def test_two_runs_interleaved_both_land_on_main(trips_lakehouse, landing):
    """B's branch is created before A publishes: B is re-applied on top of A, nothing is lost."""
    lh = trips_lakehouse
    seed = run_wap(lh, "nyc.trips", [str(trips_file(landing, "seed.parquet", 10))])
    assert seed.status == "published"
    a = WapRun(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 100, start_id=100))])
    b = WapRun(lh, "nyc.trips", [str(trips_file(landing, "b.parquet", 70, start_id=1000))])
    a.prepare()
    a.write()
    b.prepare()
    b.write()
    assert a.state.base == b.state.base  # both branched from the same main snapshot
    files_before = _data_files(lh, a.branch) | _data_files(lh, b.branch)
    a.audit()
    a.publish()
    b.audit()
    b.publish()
    assert a.rec.status == "published" and b.rec.status == "published"
    assert a.state.published_via == "fast_forward"
    assert b.state.published_via == "cherry_pick"
    assert lh.tables.row_count(T) == 180
    ids = {r[0] for r in lh.tables.read(T).select("trip_id").collect()}
    assert {100, 199, 1000, 1069} <= ids
    assert lh.iceberg.list(T) == []
    # Publishing rewrote no data files: main holds exactly the files the branches held.
    assert _data_files(lh, "main") == files_before


def _data_files(lh, ref: str) -> set[str]:
    df = lh.spark.sql(f"SELECT file_path FROM {T.metadata_sql(lh.catalog, 'files')} VERSION AS OF '{ref}'")
    return {r[0] for r in df.collect()}


def test_rerun_of_a_published_run_publishes_nothing(trips_lakehouse, landing):
    lh = trips_lakehouse
    f = trips_file(landing, "f.parquet", 120)
    first = run_wap(lh, "nyc.trips", [str(f)])
    head = lh.tables.head(T)
    again = run_wap(lh, "nyc.trips", [str(f)], run_id=first.run_id)
    assert again.status == "published"
    assert again.published_via == "already"
    assert again.snapshot_id == first.snapshot_id
    assert lh.tables.head(T) == head
    assert lh.tables.row_count(T) == 120


def test_crash_after_write_resumes_and_publishes_once(trips_lakehouse, landing):
    lh = trips_lakehouse
    f = trips_file(landing, "f.parquet", 90)
    crashed = WapRun(lh, "nyc.trips", [str(f)])
    crashed.prepare()
    crashed.write()  # the process dies here: rows are on the branch, not on main
    assert lh.tables.row_count(T) == 0
    res = run_wap(lh, "nyc.trips", [str(f)], run_id=crashed.run_id)
    assert res.status == "published"
    assert lh.tables.row_count(T) == 90
    snaps = [s for s in lh.tables.snapshots(T).values() if s.run_id == crashed.run_id]
    assert len(snaps) == 1  # the resumed run did not write the file again


def test_crash_between_publish_and_branch_drop_only_cleans_up(trips_lakehouse, landing):
    lh = trips_lakehouse
    run_wap(lh, "nyc.trips", [str(trips_file(landing, "seed.parquet", 10))])
    f = trips_file(landing, "f.parquet", 60, start_id=500)
    other = WapRun(lh, "nyc.trips", [str(trips_file(landing, "o.parquet", 5, start_id=900))])
    crashed = WapRun(lh, "nyc.trips", [str(f)])
    crashed.prepare()
    crashed.write()
    other.prepare()
    other.write()
    other.audit()
    other.publish()
    crashed.audit()
    lh.iceberg.move_main(
        T, crashed.branch, [snapshot_from_data(d) for d in crashed.state.run_snapshots]
    )  # published, then the crash
    assert lh.iceberg.exists(T, crashed.branch)
    rows = lh.tables.row_count(T)
    res = run_wap(lh, "nyc.trips", [str(f)], run_id=crashed.run_id)
    assert res.status == "published" and res.published_via == "already"
    assert lh.tables.row_count(T) == rows == 75
    assert not lh.iceberg.exists(T, crashed.branch)


def test_csv_and_json_sources_and_globs(lakehouse_factory, landing):
    lh = lakehouse_factory({"raw.people": {"checks": [{"check": "not_null", "column": "name"}]}})
    (landing / "p1.csv").write_text("id,name,score\n1,ann,3.5\n2,bob,4.0\n")
    (landing / "p2.csv").write_text("id,name,score\n3,cy,1.5\n")
    res = run_wap(lh, "raw.people", [str(landing / "p*.csv")])
    assert res.status == "published", res.message
    assert res.rows_written == 3
    assert len(res.files) == 2
    lh2 = lakehouse_factory({})
    (landing / "e.jsonl").write_text('{"id": 1, "tag": "x"}\n{"id": 2, "tag": "y"}\n')
    res2 = run_wap(lh2, "raw.events", [str(landing / "e.jsonl")], not_null=["tag"])
    assert res2.status == "published", res2.message
    assert [c["name"] for c in res2.checks] == ["not_null(tag)"]
    assert lh2.tables.row_count(TableName.parse("raw.events")) == 2


def test_not_null_option_blocks_a_file_the_config_would_pass(lakehouse_factory, landing):
    lh = lakehouse_factory({})
    res = run_wap(
        lh, "nyc.trips", [str(trips_file(landing, "n.parquet", 50, null_rate=0.1))], not_null=["passenger_count"]
    )
    assert res.status == "blocked"
    assert lh.tables.row_count(T) == 0


def test_safe_widening_int_to_long_is_accepted(lakehouse_factory, landing):
    lh = lakehouse_factory({"w.nums": {"checks": []}})  # about the schema contract, not checks
    t = TableName.parse("w.nums")
    write_parquet(landing / "a.parquet", pa.table({"k": pa.array([1, 2], pa.int64()), "v": pa.array([1.0, 2.0])}))
    write_parquet(landing / "b.parquet", pa.table({"k": pa.array([3], pa.int32()), "v": pa.array([3.0], pa.float32())}))
    assert run_wap(lh, "w.nums", [str(landing / "a.parquet")]).status == "published"
    res = run_wap(lh, "w.nums", [str(landing / "b.parquet")])
    assert res.status == "published", res.message
    assert lh.tables.row_count(t) == 3
    assert lh.tables.schema(t)["k"].dataType.simpleString() == "bigint"


def test_audit_reads_only_the_rows_the_run_added(lakehouse_factory, landing):
    """Old rows on main that would fail a check do not block a clean new batch."""
    lh = lakehouse_factory({})
    dirty = trips_file(landing, "old.parquet", 30, null_rate=0.2)
    assert run_wap(lh, "nyc.trips", [str(dirty)], no_checks=True).status == "published"  # no checks then
    res = run_wap(
        lh, "nyc.trips", [str(trips_file(landing, "new.parquet", 30, start_id=100))], not_null=["passenger_count"]
    )
    assert res.status == "published"
    assert res.checks[0]["observed"] == 0


def test_readers_without_spark_see_only_audited_rows(trips_lakehouse, landing):
    """PyIceberg's SqlCatalog reads the same SQLite catalog; DuckDB queries through it."""
    from pyiceberg.catalog.sql import SqlCatalog

    lh = trips_lakehouse
    ok = run_wap(lh, "nyc.trips", [str(trips_file(landing, "ok.parquet", 80))])
    bad = run_wap(lh, "nyc.trips", [str(trips_file(landing, "bad.parquet", 80, null_rate=0.1, start_id=500))])
    assert ok.status == "published" and bad.status == "blocked"
    wh = Path(lh.config.warehouse_location())
    cat = SqlCatalog(lh.catalog, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}")
    table = cat.load_table("nyc.trips")
    arrow = table.scan().to_arrow()
    assert arrow.num_rows == 80
    assert arrow.column("passenger_count").null_count == 0
    assert set(table.refs()) == {"main", bad.branch}
    con = table.scan().to_duckdb("trips")
    assert con.sql("SELECT count(*), min(trip_id), max(trip_id) FROM trips").fetchall() == [(80, 1, 80)]


def test_unresolvable_publish_conflict_exits_4_and_keeps_everything(trips_lakehouse, landing):
    """main moved and the run's branch holds a non-append snapshot: it cannot be re-applied safely."""
    lh = trips_lakehouse
    run_wap(lh, "nyc.trips", [str(trips_file(landing, "seed.parquet", 10))])
    a = WapRun(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 20, start_id=100))])
    b = WapRun(lh, "nyc.trips", [str(trips_file(landing, "b.parquet", 30, start_id=200))])
    a.prepare()
    a.write()
    b.prepare()
    b.write()
    # Someone rewrites B's branch (an overwrite, tagged with B's run id), then A publishes.
    lh.tables.read(T, b.branch).where("trip_id >= 210").writeTo(lh.iceberg.write_target(T, b.branch)).option(
        "snapshot-property.wapflow.run-id", b.run_id
    ).overwritePartitions()
    a.audit()
    a.publish()
    main_after_a = lh.tables.head(T)
    res = run_wap(lh, "nyc.trips", [str(landing / "b.parquet")], run_id=b.run_id)
    assert res.status == "failed" and res.exit_code == 4, res.message
    assert "not appends" in res.message and b.branch in res.message
    assert lh.tables.head(T) == main_after_a
    assert lh.tables.row_count(T) == 30
    assert lh.iceberg.exists(T, b.branch) and res.branch_kept


def test_table_metadata_through_the_gateway_equals_the_metadata_tables(trips_lakehouse, landing):
    """Snapshots and refs are read as Iceberg's metadata JSON in one gateway call (no Spark job); where
    there is no gateway (Spark Connect) the metadata tables answer. Both must say the same, here after a
    fast-forward, a cherry-pick and a blocked run whose branch is kept."""
    lh = trips_lakehouse
    run_wap(lh, "nyc.trips", [str(trips_file(landing, "seed.parquet", 10))])
    a = WapRun(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 30, start_id=100))])
    b = WapRun(lh, "nyc.trips", [str(trips_file(landing, "b.parquet", 30, start_id=1000))])
    a.prepare(), a.write(), b.prepare(), b.write()
    a.audit(), a.publish(), b.audit(), b.publish()
    blocked = run_wap(lh, "nyc.trips", [str(trips_file(landing, "dirty.parquet", 30, null_rate=0.5, start_id=5000))])
    assert blocked.status == "blocked" and b.state.published_via == "cherry_pick"

    tables = lh.tables
    assert tables._metadata(T) is not None  # the gateway path is the one taken here
    fast = (tables.snapshots(T), tables.refs(T))
    tables._metadata = lambda table: None  # type: ignore[method-assign] - as on Spark Connect
    slow = (tables.snapshots(T), tables.refs(T))
    assert fast == slow
    snaps, refs = fast
    assert set(refs) == {"main", blocked.branch} and refs["main"].type == "BRANCH"
    assert {s.run_id for s in snaps.values()} >= {a.run_id, b.run_id, blocked.run_id}
    assert any(s.summary.get("source-snapshot-id") for s in snaps.values())  # the cherry-pick's


# --- tables without checks publish only on the user's word -----------------------------------------------------


def _orders(landing: Path) -> Path:
    """Orders with a NULL customer_id: what a not_null check on it blocks."""
    return write_parquet(landing / "o.parquet", pa.table({"id": [1, 2, 3], "customer_id": [10, None, 30]}))


def test_a_misspelt_table_section_fails_before_anything_is_written(lakehouse_factory, landing):
    """[tables."shop.ordrs"] in wap.toml: a run of shop.orders used to publish the NULL customer_id unaudited."""
    lh = lakehouse_factory({"shop.ordrs": {"checks": [{"check": "not_null", "column": "customer_id"}]}})
    f = _orders(landing)
    for kw in ({}, {"no_checks": True}):
        res = run_wap(lh, "shop.orders", [str(f)], **kw)
        assert res.status == "failed" and res.exit_code == 2, res.message
        assert 'no [tables."shop.orders"] section' in res.message
        assert 'did you mean [tables."shop.ordrs"]?' in res.message
        assert res.error is not None and res.error["kind"] == "config" and res.error["step"] == "prepare"
        rec = lh.store.get(res.run_id)  # recorded, as every failed run is
        assert rec is not None and rec.status == "failed" and rec.rows_written is None
    assert not lh.tables.exists(TableName.parse("shop.orders"))  # main unchanged: nothing was ever written
    assert f.exists()


def test_a_table_without_checks_publishes_only_when_the_user_said_so(lakehouse_factory, landing):
    from wapflow.service.runs import run_report

    t = TableName.parse("shop.orders")
    f = _orders(landing)
    lh = lakehouse_factory({"shop.orders": {"schema": "ignore_extra"}})  # a section, but no checks in it
    res = run_wap(lh, "shop.orders", [str(f)])
    assert res.status == "failed" and res.exit_code == 2, res.message
    assert "shop.orders has no checks" in res.message and "checks = []" in res.message
    assert "--no-checks" in res.message
    assert not lh.tables.exists(t) and f.exists()

    res = run_wap(lh, "shop.orders", [str(f)], no_checks=True)
    assert res.status == "published" and res.exit_code == 0, res.message
    assert res.message.endswith("without checks (--no-checks)")
    assert [(c["check"], c["status"], c["threshold"]) for c in res.checks] == [
        ("no_checks", "passed", "published without checks: --no-checks")
    ]
    assert lh.tables.row_count(t) == 3
    report = run_report(lh.store, res.run_id)  # `wap report`: the record says it too
    assert [c["threshold"] for c in report["checks"]] == ["published without checks: --no-checks"]

    declared = lakehouse_factory({"raw.events": {"checks": []}})
    res = run_wap(declared, "raw.events", [str(f)])
    assert res.status == "published", res.message
    assert res.message.endswith("without checks (checks = [] in wap.toml)")
    # Checks given by the caller are checks: no consent needed, and no such line.
    res = run_wap(lakehouse_factory({}), "raw.other", [str(f)], not_null=["id"])
    assert res.status == "published" and [c["check"] for c in res.checks] == ["not_null"], res.message
