"""`wap maintain` on real Spark, Iceberg and the SQLite catalog: after many small batches the rows read back
by PyIceberg are the same, with fewer files and fewer snapshots; what wapflow still needs survives (a kept
branch, a run within the revert window, idempotent re-runs); a dry run changes nothing."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from support.data import trips_file
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.maintain import maintain
from wapflow.maintain.run import ACTIONS
from wapflow.outer.revert import revert
from wapflow.pipeline import run_wap
from wapflow.runs.maintenance import MaintenanceLog
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
T = TableName.parse("nyc.trips")
CHECKS = [{"check": "not_null", "column": "passenger_count"}]
# Everything older than "now" may go, unless wapflow needs it: what the tests pass as `now` decides.
EAGER = {
    "expire_older_than": "0s",
    "revert_window": "0s",
    "keep_last": 1,
    "orphan_older_than": "1d",
    "min_input_files": 2,
    "every": "never",
}


def _lake(lakehouse_factory: Any, **maintenance: Any) -> Lakehouse:
    lh: Lakehouse = lakehouse_factory({"nyc.trips": {"checks": CHECKS}})
    lh.config.maintenance = lh.config.maintenance.model_copy(update={**EAGER, **maintenance})
    return lh


def _batches(lh: Lakehouse, landing: Path, n: int, rows: int = 20, start: int = 0) -> list[str]:
    ids = []
    for i in range(start, start + n):
        f = trips_file(landing, f"b{i:04d}.parquet", rows, start_id=1 + i * rows, seed=i)
        res = run_wap(lh, "nyc.trips", [str(f)])
        assert res.status == "published", res.message
        ids.append(res.run_id)
    return ids


def _pyiceberg(lh: Lakehouse) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    wh = Path(lh.config.warehouse_location())
    return SqlCatalog(lh.catalog, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}").load_table(T.dotted)


def _rows(lh: Lakehouse) -> list[tuple[Any, ...]]:
    arrow = _pyiceberg(lh).scan().to_arrow().sort_by("trip_id")
    return list(zip(*(arrow.column(c).to_pylist() for c in arrow.column_names), strict=True))


def _data_files(lh: Lakehouse) -> int:
    return len(list(_pyiceberg(lh).scan().plan_files()))


def _later(seconds: float = 60.0) -> datetime:
    """A clock ahead of the pass's own commits (compaction, manifest rewrite), so expiry may take them too: a
    pass on a busy machine takes longer than a few seconds."""
    return datetime.now(UTC) + timedelta(seconds=seconds)


def test_many_small_batches_compacted_and_expired_rows_identical(lakehouse_factory, landing):
    lh = _lake(lakehouse_factory)
    # 30 batches (the 1,000 of issue 22's scale are `make bench-maintain`'s): a file and a snapshot each.
    _batches(lh, landing, 30)
    before = _rows(lh)
    files_before = _data_files(lh)
    snaps_before = len(lh.tables.snapshots(T))
    assert files_before >= 30

    res = maintain(lh, "nyc.trips", now=_later())

    assert res.exit_code == 0, res.to_dict()
    out = res.tables[0]
    assert out.status == "done", out.to_dict()
    assert _rows(lh) == before  # an independent reader sees exactly the same rows
    assert _data_files(lh) < files_before / 10
    assert out.after["data_files"] == _data_files(lh)
    assert out.figures("compact")["rewritten_data_files"] >= 30
    expired = out.figures("expire_snapshots")["expired"]
    assert expired >= 29
    assert expired >= snaps_before - 1
    assert list(lh.tables.snapshots(T)) == [lh.tables.head(T)]  # keep_last = 1: only main's head is left
    assert lh.tables.row_count(T) == len(before)
    # metadata.json files no longer pile up: the table property is set and old versions go.
    props = _pyiceberg(lh).properties
    assert props["write.metadata.delete-after-commit.enabled"] == "true"
    # Every action is in the run store.
    recs = MaintenanceLog(lh.store.engine).list(T.dotted, pass_id=res.pass_id)
    assert {r.action for r in recs} == set(ACTIONS)
    assert {r.status for r in recs} <= {"done", "skipped"}
    assert next(r for r in recs if r.action == "expire_snapshots").figures["expired"] == expired
    # A second pass finds nothing left to do, and rows are still the same.
    again = maintain(lh, "nyc.trips", now=_later())
    assert again.tables[0].figures("compact").get("rewritten_data_files", 0) == 0
    assert _rows(lh) == before


def test_dry_run_changes_nothing(lakehouse_factory, landing):
    lh = _lake(lakehouse_factory, metadata_versions_max=20)
    _batches(lh, landing, 12)
    snaps = lh.tables.snapshots(T)
    refs = lh.tables.refs(T)
    files = _data_files(lh)
    rows = _rows(lh)

    res = maintain(lh, "nyc.trips", dry_run=True, now=_later())

    out = res.tables[0]
    assert out.status == "dry_run", out.to_dict()
    assert out.figures("compact")["planned_files"] == 12
    assert out.figures("expire_snapshots")["expire"] > 0
    assert out.figures("properties")["set"] == {"write.metadata.previous-versions-max": "20"}
    lh.tables.refresh(T)
    assert lh.tables.snapshots(T) == snaps
    assert lh.tables.refs(T) == refs
    assert _data_files(lh) == files
    assert _rows(lh) == rows
    props = _pyiceberg(lh).properties
    assert props["write.metadata.delete-after-commit.enabled"] == "true"  # set when the table was created
    assert props["write.metadata.previous-versions-max"] == "100"  # not the 20 the dry run would set
    assert MaintenanceLog(lh.store.engine).list(T.dotted) == []


def test_kept_branch_survives_until_keep_blocked_for_then_dropped_and_recorded(lakehouse_factory, landing):
    lh = _lake(lakehouse_factory, keep_blocked_for="1d")
    _batches(lh, landing, 5)
    bad = run_wap(lh, "nyc.trips", [str(trips_file(landing, "bad.parquet", 30, null_rate=0.2, start_id=9000))])
    assert bad.status == "blocked" and bad.branch_kept
    _batches(lh, landing, 5, start=5)
    branch_rows = lh.tables.row_count(T, bad.branch)

    first = maintain(lh, "nyc.trips", now=_later())  # the branch is a day younger than keep_blocked_for

    assert first.tables[0].status == "done", first.to_dict()
    assert first.tables[0].figures("expire_snapshots")["expired"] > 0
    assert bad.branch in lh.tables.refs(T)
    assert lh.tables.row_count(T, bad.branch) == branch_rows  # its rows and its base are all still there
    assert lh.tables.read(T, bad.branch).filter("passenger_count IS NULL").count() == 6

    later = maintain(lh, "nyc.trips", now=datetime.now(UTC) + timedelta(days=2))

    dropped = later.tables[0].figures("drop_branches")["dropped"]
    assert dropped == [{"branch": bad.branch, "run_id": bad.run_id, "status": "blocked"}]
    assert bad.branch not in lh.tables.refs(T)
    rec = lh.store.get(bad.run_id)
    assert rec is not None and rec.status == "discarded" and not rec.branch_kept
    assert lh.tables.row_count(T) == 200


def test_run_within_revert_window_stays_revertable_and_rerun_is_idempotent(lakehouse_factory, landing):
    lh = _lake(lakehouse_factory, revert_window="1h")
    old = _batches(lh, landing, 15)
    time.sleep(1.2)
    edge = datetime.now(UTC)
    time.sleep(1.2)
    recent = _batches(lh, landing, 6, start=15)
    rows = lh.tables.row_count(T)
    # One hour later (by the clock maintenance is given), the recent runs are exactly within the window.
    res = maintain(lh, "nyc.trips", now=edge + timedelta(hours=1))

    out = res.tables[0]
    assert out.status == "done", out.to_dict()
    compact = out.figures("compact")
    assert compact["rewritten_data_files"] == 15  # the old runs' files; the recent runs' are left alone
    assert out.figures("expire_snapshots")["expired"] > 0
    assert lh.tables.row_count(T) == rows
    # A recent run is still revertable: exactly its rows leave main.
    rev = revert(lh, recent[2])
    assert rev["rows_removed"][T.dotted] == 20
    assert lh.tables.row_count(T) == rows - 20
    # An old run's history is expired and its files compacted: reverting it is refused, main unchanged.
    from wapflow.errors import UsageError

    with pytest.raises(UsageError, match="revert_window"):
        revert(lh, old[3])
    assert lh.tables.row_count(T) == rows - 20
    # An old run's snapshots are expired: re-running it with its run id publishes nothing twice.
    old_rec = lh.store.get(old[0])
    assert old_rec is not None and old_rec.snapshot_id not in lh.tables.snapshots(T)
    again = run_wap(lh, "nyc.trips", [old_rec.files[0]], run_id=old[0])
    assert again.status == "published"
    assert lh.tables.row_count(T) == rows - 20


def test_maintenance_while_a_run_publishes_loses_nothing(lakehouse_factory, landing):
    """A run writes its branch, maintenance compacts and expires main, then the run publishes."""
    from wapflow.pipeline import WapRun

    lh = _lake(lakehouse_factory)
    _batches(lh, landing, 8)
    run = WapRun(lh, "nyc.trips", [str(trips_file(landing, "late.parquet", 50, start_id=50_000))])
    run.prepare()
    run.write()
    res = maintain(lh, "nyc.trips", now=_later())
    assert res.tables[0].status == "done", res.to_dict()
    assert run.branch in lh.tables.refs(T)  # the running run's branch and its base survive
    run.audit()
    run.publish()
    assert run.rec.status == "published"
    assert lh.tables.row_count(T) == 8 * 20 + 50
    assert len(_rows(lh)) == 210


def test_orphan_files_older_than_the_limit_are_removed_younger_ones_kept(lakehouse_factory, landing):
    import os

    lh = _lake(lakehouse_factory, orphan_older_than="2d")
    _batches(lh, landing, 3)
    data = Path(lh.config.warehouse_location()) / "nyc" / "trips" / "data"
    assert data.is_dir()
    old, young = data / "left-by-a-crash.parquet", data / "being-written.parquet"
    for f in (old, young):
        f.write_bytes(b"PAR1 not referenced by any snapshot")
    three_days_ago = time.time() - 3 * 86400
    os.utime(old, (three_days_ago, three_days_ago))
    rows = _rows(lh)

    dry = maintain(lh, "nyc.trips", dry_run=True)
    assert dry.tables[0].figures("remove_orphans")["orphans"] == 1
    assert old.exists()

    res = maintain(lh, "nyc.trips")
    orphans = res.tables[0].figures("remove_orphans")
    assert orphans["removed"] == 1 and orphans["sample"][0].endswith("left-by-a-crash.parquet")
    assert not old.exists() and young.exists()
    assert _rows(lh) == rows


def test_wap_maintain_cli_dry_run_json_then_real_and_unknown_table(spark, tmp_path, landing):
    from support.typer_cli import as_json, wap, write_config

    extra = (
        '[maintenance]\nexpire_older_than = "0s"\nrevert_window = "0s"\nkeep_last = 1\nmin_input_files = 2\n'
        'every = "never"\n'
    )
    cfg = str(write_config(tmp_path, "cli_maint", checks=CHECKS, extra=extra))
    for i in range(4):
        f = trips_file(landing, f"c{i}.parquet", 10, start_id=1 + 10 * i)
        assert wap("run", "nyc.trips", str(f), "--config", cfg).exit_code == 0
    time.sleep(0.05)

    r = wap("maintain", "nyc.trips", "--dry-run", "--json", "--config", cfg)
    assert r.exit_code == 0, r.output
    doc = as_json(r)
    assert doc["dry_run"] is True
    (t,) = doc["tables"]
    assert t["table"] == "nyc.trips" and t["status"] == "dry_run"
    assert t["summary"]["files_compacted"] == 4 and t["summary"]["snapshots_expired"] >= 3

    r = wap("maintain", "--config", cfg, "--json")  # every table of the catalog
    assert r.exit_code == 0, r.output
    (t,) = as_json(r)["tables"]
    assert (t["summary"]["data_files_before"], t["summary"]["data_files_after"]) == (4, 1)
    r = wap("maintain", "nyc.trips", "--config", cfg)
    assert r.exit_code == 0, r.output
    assert "nyc.trips" in r.output and "maintenance" in r.output

    r = wap("maintain", "nyc.tripz", "--config", cfg, "--json")
    assert r.exit_code == 2
    err = json.loads(r.stdout)["error"]
    assert "no table nyc.tripz" in err["message"] and "nyc.trips" in err["message"]


def test_a_failed_action_is_recorded_alerted_and_the_others_still_run(
    lakehouse_factory, landing, receiver, monkeypatch
):
    from wapflow.config import AlertSinkConfig

    lh = _lake(lakehouse_factory)
    lh.config.alerts.sinks = {"ops": AlertSinkConfig(type="webhook", url_env="WAP_T_MAINT_HOOK")}
    monkeypatch.setenv("WAP_T_MAINT_HOOK", receiver.url)
    _batches(lh, landing, 4)
    rows = _rows(lh)
    monkeypatch.setenv("WAP_RAISE_AT", "maintain:compact")

    res = maintain(lh, "nyc.trips", now=_later())

    out = res.tables[0]
    assert out.status == "failed" and res.exit_code == 3
    assert out.action("compact")["status"] == "failed"
    assert out.action("expire_snapshots")["status"] == "done"
    recs = {r.action: r for r in MaintenanceLog(lh.store.engine).list(T.dotted)}
    assert recs["compact"].status == "failed" and "injected fault" in recs["compact"].error["message"]
    (body,) = receiver.bodies
    assert body["event"] == "maintenance_failed" and body["table"] == "nyc.trips"
    assert "compact" in body["message"]
    assert _rows(lh) == rows


def test_a_run_compacted_before_the_window_is_not_silently_half_reverted(lakehouse_factory, landing):
    from wapflow.errors import UsageError

    lh = _lake(lakehouse_factory, revert_window="1h", expire_older_than="1000d", keep_last=100)
    old = _batches(lh, landing, 5)
    time.sleep(1.2)
    edge = datetime.now(UTC)
    time.sleep(1.2)
    _batches(lh, landing, 2, start=5)
    res = maintain(lh, "nyc.trips", now=edge + timedelta(hours=1))
    assert res.tables[0].figures("compact")["rewritten_data_files"] == 5
    assert res.tables[0].figures("expire_snapshots")["expire"] == 0
    head = lh.tables.head(T)
    with pytest.raises(UsageError, match="compacted"):
        revert(lh, old[1])
    assert lh.tables.head(T) == head and lh.tables.row_count(T) == 140
