"""Iceberg format v3 tables (issue 48, point 1) on real Spark 4.1 / Iceberg 1.11 and the SQLite catalog: a table
created as wap.toml's `format_version` says, the whole WAP cycle on it (append, quarantine, merge, replace,
`wap diff`, `wap revert`, `wap maintain`, `wap metrics --backfill`, `wap run-tables` with PyIceberg's group
commit, main moved or not), and `wap maintain TABLE --upgrade-format 3` of a v2 table (a downgrade refused).
Rows on main are read back by PyIceberg, an independent reader, and by Spark."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from support.data import changes_file, trips_file, write_parquet
from wapflow import api
from wapflow.cli import app
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.maintain import maintain
from wapflow.outer.revert import revert
from wapflow.pipeline import group_result, run_group, run_wap, tables_group
from wapflow.pipeline.group import apply
from wapflow.runs.maintenance import MaintenanceLog
from wapflow.runs.metrics import metrics_table
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
TRIPS = TableName.parse("nyc.trips")
EAGER = {"expire_older_than": "0s", "revert_window": "0s", "keep_last": 1, "min_input_files": 2, "every": "never"}


def _catalog(lh: Lakehouse) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    wh = Path(lh.config.warehouse_location())
    return SqlCatalog(lh.catalog, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}")


def _table(lh: Lakehouse, name: str) -> Any:
    return _catalog(lh).load_table(name)


def _version(lh: Lakehouse, name: str) -> int:
    return int(_table(lh, name).metadata.format_version)


def _ids(lh: Lakehouse, name: str, column: str = "trip_id") -> list[Any]:
    """main's rows of `name` as PyIceberg reads them (its own scan: manifests, delete files, data files)."""
    return sorted(_table(lh, name).scan().to_arrow().column(column).to_pylist())


def _spark_ids(lh: Lakehouse, name: str, column: str = "trip_id") -> list[Any]:
    lh.tables.refresh(TableName.parse(name))
    return sorted(r[0] for r in lh.spark.sql(f"SELECT {column} FROM {lh.catalog}.{name}").collect())


def _cli(lh: Lakehouse, folder: Path, *args: str) -> Any:
    """`wap ARGS` in this process on the lakehouse of `lh` (its warehouse, catalog and run store)."""
    cfg = folder / "wap.toml"
    lake = lh.config.lakehouse
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{lake.warehouse}"\ncatalog_name = "{lh.catalog}"\nmaster = "local[2]"\n'
        f'run_store = "{lh.config.run_store_url()}"\n'
    )
    return CliRunner().invoke(app, [*args, "--config", str(cfg)])


def _shown_rows(lh: Lakehouse, folder: Path, name: str) -> int:
    """Rows on main as `wap history --json`, the dashboard's table page and its overview show them: one figure,
    or the test fails naming each."""
    from wapflow.service import dashboard as svc

    got = _cli(lh, folder, "history", name, "--json")
    assert got.exit_code == 0, got.output
    history = json.loads(got.output)
    src = svc.open_sources(folder / "wap.toml")
    try:
        page = svc.table_detail(src, name)
        (listed,) = [t for t in svc.overview(src)["tables"] if t["table"] == name]
    finally:
        src.close()
    shown = {
        "history": history["snapshots"][0]["total_rows"],
        "table page": page["rows_on_main"],
        "table page history": page["history"][0]["total_rows"],
        "overview": listed["rows_on_main"],
    }
    assert len(set(shown.values())) == 1, shown
    return int(shown["history"])


def _published(res: Any) -> Any:
    assert res.status == "published", res.message
    return res


def test_a_v3_table_through_append_quarantine_diff_revert_maintain_and_backfill(lakehouse_factory, landing):
    lh = lakehouse_factory(
        {
            "nyc.trips": {
                "checks": [{"check": "not_null", "column": "passenger_count"}],
                "on_row_failure": "quarantine",
                "max_quarantine_rate": 0.5,
                "maintenance": EAGER,
            }
        },
        format_version=3,
    )
    first = _published(run_wap(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 30))]))
    assert _version(lh, "nyc.trips") == 3  # created so, from [lakehouse] format_version
    second = _published(run_wap(lh, "nyc.trips", [str(trips_file(landing, "b.parquet", 30, start_id=31, seed=1))]))
    assert _ids(lh, "nyc.trips") == list(range(1, 61)) == _spark_ids(lh, "nyc.trips")
    con = _table(lh, "nyc.trips").scan().to_duckdb("trips")  # DuckDB over main, as the Python API guide shows
    assert con.sql("SELECT count(*), max(trip_id) FROM trips").fetchall() == [(60, 60)]

    # Rows failing a check go to the quarantine table, itself created in the table's format version.
    dirty = trips_file(landing, "c.parquet", 40, start_id=61, seed=2, null_rate=0.25)
    third = _published(run_wap(lh, "nyc.trips", [str(dirty)]))
    quarantined = _ids(lh, "nyc.trips__quarantine")
    assert quarantined and _version(lh, "nyc.trips__quarantine") == 3
    assert len(_ids(lh, "nyc.trips")) == 100 - len(quarantined)

    # A run blocked (too many rows failing): `wap diff` of it reads the v3 metadata without a JVM.
    worse = trips_file(landing, "d.parquet", 20, start_id=101, seed=3, null_rate=0.9)
    blocked = run_wap(lh, "nyc.trips", [str(worse)])
    assert blocked.status == "blocked", blocked.message
    doc = api.diff(lh, blocked.run_id)
    assert doc["rows"] is not None and doc["rows"]["main_rows"] == 100 - len(quarantined), doc

    # The latest run reverted: its rows leave main, the others stay (PyIceberg and Spark agree).
    out = revert(lh, third.run_id)
    assert out["rows_removed"]["nyc.trips"] == 40 - len(quarantined), out
    assert _ids(lh, "nyc.trips") == list(range(1, 61)) == _spark_ids(lh, "nyc.trips")

    # The metric history backfilled from main's v3 snapshots (the runs' own records taken away first).
    with lh.store.engine.begin() as conn:
        conn.execute(metrics_table.delete().where(metrics_table.c.table_name == "nyc.trips"))
    got = _cli(lh, landing, "metrics", "nyc.trips", "--backfill", "--metric", "row_count", "--json")
    assert got.exit_code == 0, got.output
    doc = json.loads(got.stdout)
    assert doc["backfill"]["recorded"] >= 2, doc["backfill"]
    assert {first.run_id, second.run_id} <= {r["run_id"] for r in doc["metrics"]}, doc["metrics"]

    # Compaction of the v3 table: fewer files, the same rows, still v3.
    for i in range(3):
        _published(run_wap(lh, "nyc.trips", [str(trips_file(landing, f"s{i}.parquet", 5, start_id=200 + 5 * i))]))
    before = _ids(lh, "nyc.trips")
    files = len(list(_table(lh, "nyc.trips").scan().plan_files()))
    res = maintain(lh, "nyc.trips", now=datetime.now(UTC) + timedelta(seconds=60))
    assert res.exit_code == 0 and res.tables[0].status == "done", res.to_dict()
    assert res.tables[0].figures("compact")["rewritten_data_files"] >= 2
    assert len(list(_table(lh, "nyc.trips").scan().plan_files())) < files
    assert _ids(lh, "nyc.trips") == before == _spark_ids(lh, "nyc.trips")
    assert _version(lh, "nyc.trips") == 3


def test_merge_and_replace_on_v3_tables(lakehouse_factory, landing):
    lh = lakehouse_factory(
        {
            "crm.customers": {"mode": "merge", "key": ["id"], "delete_when": "op = 'D'", "format_version": 3},
            "crm.daily": {"mode": "replace", "partition_by": ["day"], "checks": [], "format_version": 3},
        }
    )
    seed = [(i, f"n{i}", "I") for i in range(1, 6)]
    _published(run_wap(lh, "crm.customers", [changes_file(landing, "seed.parquet", seed)], no_checks=True))
    assert _version(lh, "crm.customers") == 3
    batch = [(1, None, "D"), (3, "u", "U"), (9, "new", "I")]
    _published(run_wap(lh, "crm.customers", [changes_file(landing, "b.parquet", batch)], no_checks=True))
    rows = _table(lh, "crm.customers").scan().to_arrow().sort_by("id")
    assert rows.column("id").to_pylist() == [2, 3, 4, 5, 9] == _spark_ids(lh, "crm.customers", "id")
    assert rows.column("name").to_pylist() == ["n2", "u", "n4", "n5", "new"]

    def day(name: str, d: str, ids: list[int]) -> str:
        t = pa.table({"day": pa.array([d] * len(ids)), "id": pa.array(ids, pa.int64())})
        return str(write_parquet(landing / name, t))

    _published(
        run_wap(lh, "crm.daily", [day("d1.parquet", "2026-01-01", [1, 2]), day("d2.parquet", "2026-01-02", [3])])
    )
    assert _version(lh, "crm.daily") == 3
    _published(run_wap(lh, "crm.daily", [day("d1b.parquet", "2026-01-01", [7])]))
    assert _ids(lh, "crm.daily", "id") == [3, 7] == _spark_ids(lh, "crm.daily", "id")


SHOP = {
    "shop.orders": {"checks": [{"check": "not_null", "column": "order_id"}], "format_version": 3},
    "shop.lines": {
        "checks": [{"check": "foreign_key", "column": "order_id", "table": "shop.orders"}],
        "format_version": 3,
    },
}


def _orders(landing: Path, name: str, ids: list[int]) -> str:
    return str(write_parquet(landing / name, pa.table({"order_id": pa.array(ids, pa.int64())})))


def _lines(landing: Path, name: str, ids: list[int]) -> str:
    t = pa.table({"order_id": pa.array(ids, pa.int64()), "line": pa.array(range(len(ids)), pa.int64())})
    return str(write_parquet(landing / name, t))


def test_run_tables_group_commit_on_v3_tables_fast_forward_and_on_a_moved_main(lakehouse_factory, landing):
    """The group commit of a JDBC catalog writes each table's new metadata itself (PyIceberg 0.12 refuses to
    write v3 metadata): main fast-forwarded on v3 tables; main moved by another run between audit and publish
    (on v2 the group's files are added again on top, a new snapshot that PyIceberg cannot write for v3, so the
    group is applied again on fresh branches). Spark and PyIceberg both read every row afterwards."""
    lh = lakehouse_factory(SHOP)
    res = run_group(
        lh,
        [("shop.orders", [_orders(landing, "o.parquet", [1, 2])]), ("shop.lines", [_lines(landing, "l.parquet", [1])])],
    )
    assert res.status == "published", res.message
    assert _version(lh, "shop.orders") == 3 and _version(lh, "shop.lines") == 3
    assert _ids(lh, "shop.orders", "order_id") == [1, 2] == _spark_ids(lh, "shop.orders", "order_id")

    state = tables_group(
        lh,
        [
            ("shop.orders", [_orders(landing, "o2.parquet", [3, 4])]),
            ("shop.lines", [_lines(landing, "l2.parquet", [3])]),
        ],
    )
    for step in ("prepare", "write", "audit"):
        state = apply(lh, state, step)
        assert state.status == "running", state.message
    _published(run_wap(lh, "shop.orders", [_orders(landing, "alone.parquet", [7])]))
    state = apply(lh, state, "publish")
    # Not added again on top (a new v3 snapshot PyIceberg 0.12 cannot write): applied again on fresh branches.
    assert state.status == "running" and state.done == ["prepare"] and state.reapplied == 1
    for step in ("write", "audit", "publish"):
        state = apply(lh, state, step)
    outcome = group_result(lh, state)
    assert outcome.status == "published", outcome
    assert {r.published_via for r in outcome.tables} == {"fast_forward"}
    assert _ids(lh, "shop.orders", "order_id") == [1, 2, 3, 4, 7] == _spark_ids(lh, "shop.orders", "order_id")
    assert _ids(lh, "shop.lines", "order_id") == [1, 3] == _spark_ids(lh, "shop.lines", "order_id")
    # A Spark write after PyIceberg's commit: the table's row lineage still adds up.
    _published(run_wap(lh, "shop.orders", [_orders(landing, "after.parquet", [8])]))
    assert _spark_ids(lh, "shop.orders", "order_id") == [1, 2, 3, 4, 7, 8] == _ids(lh, "shop.orders", "order_id")


def test_upgrade_a_v2_table_to_v3_once_recorded_and_no_way_back(lakehouse_factory, landing):
    lh = lakehouse_factory(
        {
            "nyc.trips": {
                "checks": [{"check": "not_null", "column": "passenger_count"}],
                "maintenance": {**EAGER, "revert_window": "7d"},
            }
        }
    )
    _published(run_wap(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 20))]))
    assert _version(lh, "nyc.trips") == 2  # the default for new tables

    got = _cli(lh, landing, "maintain", "nyc.trips", "--upgrade-format", "3", "--dry-run")
    assert got.exit_code == 0 and "would upgrade nyc.trips from format version 2 to 3" in got.output, got.output
    assert _version(lh, "nyc.trips") == 2
    head = _table(lh, "nyc.trips").metadata.current_snapshot_id

    got = _cli(lh, landing, "maintain", "nyc.trips", "--upgrade-format", "3")
    assert got.exit_code == 0 and "upgraded nyc.trips from format version 2 to 3" in got.output, got.output
    assert _version(lh, "nyc.trips") == 3
    assert _table(lh, "nyc.trips").metadata.current_snapshot_id == head  # metadata only: main's rows as they were
    assert _ids(lh, "nyc.trips") == list(range(1, 21))
    recs = MaintenanceLog(lh.store.engine).list("nyc.trips")
    assert [(r.action, r.status, r.figures.get("from"), r.figures.get("to")) for r in recs] == [
        ("upgrade_format", "done", 2, 3)
    ]

    again = _cli(lh, landing, "maintain", "nyc.trips", "--upgrade-format", "3")
    assert again.exit_code == 0 and "already at format version 3" in again.output, again.output

    down = _cli(lh, landing, "maintain", "nyc.trips", "--upgrade-format", "2")
    assert down.exit_code == 2, down.output
    assert "format version can only go up" in down.output and "Traceback" not in down.output
    assert _version(lh, "nyc.trips") == 3

    props = _table(lh, "nyc.trips").properties  # made merge-on-read with the upgrade
    assert {props.get(f"write.{m}.mode") for m in ("merge", "update", "delete")} == {"merge-on-read"}, props

    # The upgraded table keeps taking runs; both readers see every row.
    _published(run_wap(lh, "nyc.trips", [str(trips_file(landing, "b.parquet", 20, start_id=21, seed=1))]))
    assert _ids(lh, "nyc.trips") == list(range(1, 41)) == _spark_ids(lh, "nyc.trips")

    # Compacted at once (v3), then the run written before the upgrade reverted by row lineage.
    done = maintain(lh, "nyc.trips", now=datetime.now(UTC))
    assert done.tables[0].figures("compact")["rewritten_data_files"] >= 2, done.to_dict()
    first = [r for r in lh.store.list(table="nyc.trips") if r.status == "published"][-1]
    out = revert(lh, first.run_id)
    assert out["rows_removed"]["nyc.trips"] == 20, out
    assert _ids(lh, "nyc.trips") == list(range(21, 41)) == _spark_ids(lh, "nyc.trips")


def test_pyiceberg_reads_deletion_vectors_and_its_commits_to_v3_are_refused_clearly(lakehouse_factory, landing):
    """PyIceberg 0.12 reads a v3 table's deletion vectors (a merge-on-read DELETE and UPDATE by Spark); what a
    Spark Connect client commits through PyIceberg (a revert's file removal, parquet adoption) is refused with
    one clear error, main unchanged, where PyIceberg would fail writing a v3 manifest."""
    from wapflow.errors import UsageError
    from wapflow.lakehouse import pyiceberg_client

    lh = lakehouse_factory({"nyc.trips": {"checks": [{"check": "not_null", "column": "passenger_count"}]}})
    lh.config.lakehouse.format_version = 3
    run = _published(run_wap(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 30))]))
    ident = lh.tables.ident(TRIPS)
    mor = ", ".join(f"'write.{m}.mode' = 'merge-on-read'" for m in ("delete", "update", "merge"))
    lh.spark.sql(f"ALTER TABLE {ident} SET TBLPROPERTIES ({mor})")
    lh.spark.sql(f"DELETE FROM {ident} WHERE trip_id <= 5")
    lh.spark.sql(f"UPDATE {ident} SET passenger_count = 9 WHERE trip_id = 10")
    formats = {r[0] for r in lh.spark.sql(f"SELECT file_format FROM {ident}.delete_files").collect()}
    assert formats == {"PUFFIN"}  # deletion vectors, not v2's position delete files
    rows = _table(lh, "nyc.trips").scan().to_arrow()
    assert sorted(rows.column("trip_id").to_pylist()) == list(range(6, 31)) == _spark_ids(lh, "nyc.trips")
    assert [r["passenger_count"] for r in rows.to_pylist() if r["trip_id"] == 10] == [9]

    head = _table(lh, "nyc.trips").metadata.current_snapshot_id
    snap = lh.tables.snapshots(TRIPS)
    added = [s.snapshot_id for s in snap.values() if s.run_id == run.run_id]
    with pytest.raises(UsageError, match=r"format v3 table, and PyIceberg .* cannot write to v3 tables"):
        pyiceberg_client.remove_added_files(_catalog(lh), TRIPS, added, {"x": "y"})
    parquet = str(write_parquet(landing / "adopt.parquet", rows.slice(0, 2)))
    with pytest.raises(UsageError, match="cannot write to v3 tables"):
        pyiceberg_client.add_files(_catalog(lh), TRIPS, "main", [parquet], {})
    assert _table(lh, "nyc.trips").metadata.current_snapshot_id == head


# --- merge-on-read and row lineage (issue 48, points 2 and 3) --------------------------------------------------

CDC_V3 = {
    "mode": "merge",
    "key": ["id"],
    "delete_when": "op = 'D'",
    "format_version": 3,
    "checks": [{"check": "unique", "columns": ["id"]}, {"check": "not_null", "column": "name"}],
    "on_row_failure": "quarantine",
    "max_quarantine_rate": 0.5,
    "maintenance": {**EAGER, "revert_window": "7d"},
}


def _change(res: Any) -> dict[str, int]:
    (row,) = [c for c in res.checks if c["check"] == "changes"]
    return {k: v for k, v in row["observed"].items() if k != "rows_replaced"}


def _live_files(lh: Lakehouse, name: str) -> set[str]:
    return {t.file.file_path for t in _table(lh, name).scan().plan_files()}


def _dvs(lh: Lakehouse, name: str) -> int:
    """Delete files on main as PyIceberg plans the scan (deletion vectors: puffin)."""
    return sum(len(t.delete_files) for t in _table(lh, name).scan().plan_files())


def test_a_merge_on_v3_writes_deletion_vectors_audits_exactly_and_compaction_takes_them_away(
    lakehouse_factory, landing
):
    """A v3 table is made merge-on-read: a WAP merge leaves the files it touched in place (deletion vectors mark
    the updated and deleted rows), its change metrics and row checks stay exact (a NULL name quarantined, not
    merged), a merge whose main moved is applied again, and `wap maintain` rewrites the files with deletes at
    once, revert_window or not."""
    lh = lakehouse_factory({"crm.customers": CDC_V3})
    seed = [(i, f"n{i}", "I") for i in range(1, 101)]
    _published(run_wap(lh, "crm.customers", [changes_file(landing, "seed.parquet", seed)]))
    props = _table(lh, "crm.customers").properties
    assert {props.get(f"write.{m}.mode") for m in ("merge", "update", "delete")} == {"merge-on-read"}, props
    seed_files = _live_files(lh, "crm.customers")

    batch = [(1, None, "D"), (2, None, "D"), (3, "u3", "U"), (4, None, "U"), (200, "new", "I")]
    res = _published(run_wap(lh, "crm.customers", [changes_file(landing, "b.parquet", batch)]))
    assert _change(res) == {"rows_inserted": 1, "rows_updated": 1, "rows_deleted": 2, "main_rows": 100}
    assert seed_files <= _live_files(lh, "crm.customers")  # not rewritten: merge-on-read
    assert _dvs(lh, "crm.customers") >= 1
    rows = {r["id"]: r["name"] for r in _table(lh, "crm.customers").scan().to_arrow().to_pylist()}
    assert sorted(rows) == [3, 4, *range(5, 101), 200] and rows[3] == "u3" and rows[4] == "n4", rows
    assert sorted(rows) == _spark_ids(lh, "crm.customers", "id")
    assert _ids(lh, "crm.customers__quarantine", "id") == [4]

    # A merge waiting to publish while another merge moves main: applied again on the new main, once.
    from wapflow.pipeline import WapRun

    m = WapRun(lh, "crm.customers", [changes_file(landing, "m.parquet", [(5, "from m", "U"), (50, "m50", "U")])])
    m.prepare()
    m.write()
    m.audit()
    _published(run_wap(lh, "crm.customers", [changes_file(landing, "o.parquet", [(50, "other", "U"), (7, None, "D")])]))
    moved = m.run()
    assert moved.status == "published" and "applied again 1 time(s)" in moved.message, moved.message
    rows = {r["id"]: r["name"] for r in _table(lh, "crm.customers").scan().to_arrow().to_pylist()}
    assert rows[5] == "from m" and rows[50] == "m50" and 7 not in rows and len(rows) == 98
    # The rows on main wapflow prints and draws are those a reader gets, not the data files' records with the
    # rows deletion vectors removed counted again (total-records says 105 here).
    assert _shown_rows(lh, landing, "crm.customers") == len(rows) == 98

    # Compaction takes the deletes away now (v3: no wait for revert_window), rows unchanged for both readers.
    res_m = maintain(lh, "crm.customers", now=datetime.now(UTC))
    compact = res_m.tables[0].figures("compact")
    assert res_m.exit_code == 0 and compact.get("rewritten_data_files", 0) >= 1, res_m.to_dict()
    assert "left_for_revert_window" not in compact
    assert _dvs(lh, "crm.customers") == 0
    after = {r["id"]: r["name"] for r in _table(lh, "crm.customers").scan().to_arrow().to_pylist()}
    assert after == rows and sorted(after) == _spark_ids(lh, "crm.customers", "id")


def test_revert_on_v3_finds_a_runs_rows_by_lineage_after_compaction(lakehouse_factory, landing):
    """Three appends, compacted into one file at once (revert_window 7 days: v3 needs no wait); reverting the
    middle run takes exactly its rows off main by row lineage; a row of the first run a later merge updated
    stays when the first run is reverted (it is the merge's now), and the result says so."""
    lh = lakehouse_factory(
        {"nyc.trips": {"checks": [], "maintenance": {**EAGER, "revert_window": "7d"}, "format_version": 3}}
    )
    runs = [
        _published(
            run_wap(lh, "nyc.trips", [str(trips_file(landing, f"{i}.parquet", 10, start_id=1 + 10 * i, seed=i))])
        )
        for i in range(3)
    ]
    files = _live_files(lh, "nyc.trips")
    res = maintain(lh, "nyc.trips", now=datetime.now(UTC))
    assert res.tables[0].figures("compact")["rewritten_data_files"] >= 3, res.to_dict()
    assert not files & _live_files(lh, "nyc.trips")  # every run's files rewritten
    # ... and their snapshots expired although revert_window is 7 days: on v3 the run's record keeps its lineage.
    kept = {s.snapshot_id for s in _table(lh, "nyc.trips").snapshots()}
    assert not kept & {r.snapshot_id for r in runs}, (kept, res.tables[0].figures("expire_snapshots"))
    assert [lh.store.get(r.run_id).lineage["nyc.trips"]["rows"] for r in runs] == [10, 10, 10]

    out = revert(lh, runs[1].run_id)
    assert out["rows_removed"]["nyc.trips"] == 10 and not out["rows_changed_since"], out
    assert _ids(lh, "nyc.trips") == [*range(1, 11), *range(21, 31)] == _spark_ids(lh, "nyc.trips")
    assert lh.store.get(runs[1].run_id).status == "reverted"

    # A later change to one row of the first run (Spark's UPDATE, merge-on-read): that row is not the run's.
    ident = lh.tables.ident(TRIPS)
    lh.spark.sql(f"UPDATE {ident} SET passenger_count = 7 WHERE trip_id = 4")
    out = revert(lh, runs[0].run_id)
    assert out["rows_removed"]["nyc.trips"] == 9 and out["rows_changed_since"] == {"nyc.trips": 1}, out
    assert _shown_rows(lh, landing, "nyc.trips") == len(_ids(lh, "nyc.trips")) == 11
    assert "1 row(s) it wrote were since updated or deleted by later runs" in out["message"]
    assert _ids(lh, "nyc.trips") == [4, *range(21, 31)] == _spark_ids(lh, "nyc.trips")

    # A revert that died after its commit finishes the record on the next call (found on main), once.
    rec = lh.store.get(runs[2].run_id)
    head = _table(lh, "nyc.trips").metadata.current_snapshot_id
    out = revert(lh, runs[2].run_id)
    rec.status = "published"
    lh.store.save(rec)  # as if killed before the record was saved
    again = revert(lh, runs[2].run_id)
    assert again["snapshot_id"] == out["snapshot_id"] != head and _ids(lh, "nyc.trips") == [4]
    assert lh.store.get(runs[2].run_id).status == "reverted"


def test_a_merge_on_v3_reverts_after_a_compaction_but_not_after_another_change(lakehouse_factory, landing):
    cfg = {k: v for k, v in CDC_V3.items() if k not in ("on_row_failure", "max_quarantine_rate")}
    lh = lakehouse_factory({"crm.customers": {**cfg, "checks": []}})
    _published(
        run_wap(lh, "crm.customers", [changes_file(landing, "s.parquet", [(i, f"n{i}", "I") for i in range(1, 9)])])
    )
    merge = _published(
        run_wap(lh, "crm.customers", [changes_file(landing, "m.parquet", [(1, "u", "U"), (2, None, "D")])])
    )
    res = maintain(lh, "crm.customers", now=datetime.now(UTC))
    assert res.tables[0].figures("compact")["rewritten_data_files"] >= 1, res.to_dict()
    out = revert(lh, merge.run_id)  # only a compaction after it: the same rows, so rolling back is exact
    assert _ids(lh, "crm.customers", "id") == list(range(1, 9)) == _spark_ids(lh, "crm.customers", "id")
    assert out["rows_removed"]["crm.customers"] == -1  # the deleted row is back

    again = _published(run_wap(lh, "crm.customers", [changes_file(landing, "m2.parquet", [(3, "u", "U")])]))
    _published(run_wap(lh, "crm.customers", [changes_file(landing, "m3.parquet", [(9, "x", "I")])]))
    from wapflow.errors import UsageError

    with pytest.raises(UsageError, match="main has moved on since"):
        revert(lh, again.run_id)


def test_a_merge_on_read_merge_is_audited_from_its_added_files_metrics(lakehouse_factory, landing):
    """A merge-on-read merge adds files holding exactly the inserted and updated rows (the rows it replaces or
    deletes are marked in deletion vectors), so Iceberg's metrics of those files settle `not_null` and
    `between` as an append's do, without reading the batch again; a copy-on-write merge's files copy unchanged
    rows too, so its audit scans the batch as applied. Either way the verdict and its count are exact."""
    checks = [{"check": "not_null", "column": "name"}, {"check": "between", "column": "id", "min": 0, "max": 10_000}]
    cfg = {"mode": "merge", "key": ["id"], "delete_when": "op = 'D'", "checks": checks}
    lh = lakehouse_factory({"crm.v3": {**cfg, "format_version": 3}, "crm.v2": cfg})
    seed = [(i, f"n{i}", "I") for i in range(1, 51)]
    for t in ("crm.v3", "crm.v2"):
        _published(run_wap(lh, t, [changes_file(landing, f"{t}-seed.parquet", seed)]))

    bad = [(1, None, "U"), (2, None, "D"), (3, "u3", "U"), (60, "new", "I"), (61, None, "D")]
    for t, source in (("crm.v3", "metadata"), ("crm.v2", "scan")):
        main = _table(lh, t).metadata.current_snapshot_id
        res = run_wap(lh, t, [changes_file(landing, f"{t}-bad.parquet", bad)])
        assert res.status == "blocked", res.message
        by = {c["check"]: c for c in res.checks}
        assert by["not_null"]["status"] == "failed" and by["not_null"]["failing_rows"] == 1, by["not_null"]
        assert by["not_null"]["source"] == source and by["between"]["source"] == source, (t, by)
        assert by["between"]["status"] == "passed"
        assert _table(lh, t).metadata.current_snapshot_id == main  # main unchanged

    good = [(1, "u1", "U"), (2, None, "D"), (60, "new", "I")]
    res = _published(run_wap(lh, "crm.v3", [changes_file(landing, "good.parquet", good)]))
    by = {c["check"]: c for c in res.checks}
    assert by["not_null"]["source"] == "metadata" and by["not_null"]["status"] == "passed", by
    assert _change(res) == {"rows_inserted": 1, "rows_updated": 1, "rows_deleted": 1, "main_rows": 50}
    assert sorted(_ids(lh, "crm.v3", "id")) == [1, *range(3, 51), 60]


def _merge_plans(lh: Lakehouse, table: str) -> list[str]:
    """The physical plans of the MERGE writes Spark ran into `table` (its SQL status store, as the UI shows)."""
    executions = lh.spark._jsparkSession.sharedState().statusStore().executionsList()
    plans = [executions.apply(i).physicalPlanDescription() for i in range(executions.size())]
    return [p for p in plans if p.startswith("== Physical Plan ==\nWriteDelta") and f".{table} " in p]


def test_a_merge_into_a_table_bucketed_by_its_key_joins_its_files_where_they_lie(lakehouse_factory, landing):
    """A table partitioned by a bucket of the merge key: the MERGE reads it grouped by bucket, shuffling only the
    batch (Spark's storage-partitioned join, set for that statement alone); the rows are exact, and the
    session's settings are as they were after it."""
    spark_key = "spark.sql.iceberg.planning.preserve-data-grouping"
    cfg = {"mode": "merge", "key": ["id"], "delete_when": "op = 'D'", "checks": [], "format_version": 3}
    lh = lakehouse_factory({"crm.bucketed": {**cfg, "partition_by": ["bucket(4, id)"]}, "crm.flat": cfg})
    before = lh.spark.conf.get(spark_key, None)
    seed = [(i, f"n{i}", "I") for i in range(1, 201)]
    batch = [(1, "x", "U"), (2, None, "D"), (150, "y", "U"), (300, "z", "I")]
    for t in ("crm.bucketed", "crm.flat"):
        _published(run_wap(lh, t, [changes_file(landing, f"{t}-s.parquet", seed)], no_checks=True))
        res = _published(run_wap(lh, t, [changes_file(landing, f"{t}-b.parquet", batch)], no_checks=True))
        assert _change(res) == {"rows_inserted": 1, "rows_updated": 2, "rows_deleted": 1, "main_rows": 200}
        rows = {r["id"]: r["name"] for r in _table(lh, t).scan().to_arrow().to_pylist()}
        assert sorted(rows) == [1, *range(3, 201), 300] and rows[1] == "x" and rows[150] == "y", t
    (bucketed,) = _merge_plans(lh, "bucketed")[-1:]
    assert "groupedBy=id_bucket" in bucketed, bucketed  # the table's side read as it lies: no exchange for it
    (flat,) = _merge_plans(lh, "flat")[-1:]
    assert "groupedBy=)" in flat, flat  # unpartitioned: read and shuffled as a MERGE does by default
    assert lh.spark.conf.get(spark_key, None) == before
