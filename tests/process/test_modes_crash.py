"""SIGKILL a real `wap run` of a merge at each step where a merge's code differs from an append's, then the
same command again: the change lands exactly once.

A merge is one commit on the run's branch; a resumed write must find it (not merge again: an update applied
twice looks the same, but a delete-then-insert would not, and the run's history must show one commit). Its
publish is a fast-forward, never a cherry-pick, after a look at whether main moved under the change. The
points whose code a merge shares with an append (audit stored, publish lock held) are killed in
test_crash_resume.py; the process resumed after the write is killed here passes them with a merge's state."""

from __future__ import annotations

import os
import shlex
import signal

import pyarrow as pa
import pytest

from support.cli_harness import Reader, setup_run, unique_catalog, wap, write_config
from support.data import write_parquet

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TABLE = "crm.customers"
SECTION = f'[tables."{TABLE}"]\nmode = "merge"\nkey = ["id"]\ndelete_when = "op = \'D\'"\nchecks = []\n'
# After the merge's commit on the run's branch (its own write code), and after main moved to it (a fast-forward).
CHAIN = ["write:appended", "publish:moved"]


def _file(path, rows):
    t = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "name": pa.array([r[1] for r in rows], pa.string()),
            "op": pa.array([r[2] for r in rows], pa.string()),
        }
    )
    return write_parquet(path, t)


def test_a_merge_killed_at_each_step_then_resumed_changes_main_once(tmp_path, spark):
    catalog = unique_catalog("mcrash")
    cfg = write_config(tmp_path, SECTION, catalog=catalog)
    seed = _file(tmp_path / "landing" / "seed.parquet", [(i, f"n{i}", "I") for i in range(1, 6)])
    assert setup_run(spark, cfg, TABLE, seed).status == "published"  # the scene, in this process
    reader = Reader(tmp_path, catalog)
    before = reader.main(TABLE)
    f = _file(tmp_path / "landing" / "cdc.parquet", [(1, "one", "U"), (2, None, "D"), (7, "seven", "I")])
    run_id = "crash_merge"
    command = ["run", TABLE, str(f), "--run-id", run_id]
    for point in CHAIN:
        killed = wap(*command, "--config", str(cfg), WAP_CRASH_AT=point)
        assert killed.code == -signal.SIGKILL, (point, killed.text)
        runs = wap("runs", "--config", str(cfg), "--json")
        rec = {r["run_id"]: r for r in runs.doc["runs"]}[run_id]
        assert rec["status"] == "interrupted", (point, rec)
        command = shlex.split(rec["resume"])[1:]
        if point != "publish:moved":
            assert reader.main(TABLE) == before, point
    done = wap(*command, "--config", str(cfg), "--json")
    assert done.code == 0, done.text
    assert done.doc["status"] == "published"
    rows = sorted(reader.rows(TABLE), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "name": "one", "op": "U"},
        {"id": 3, "name": "n3", "op": "I"},
        {"id": 4, "name": "n4", "op": "I"},
        {"id": 5, "name": "n5", "op": "I"},
        {"id": 7, "name": "seven", "op": "I"},
    ]
    assert reader.branches(TABLE) == []
    assert sum(1 for s in reader.summaries(TABLE) if s.get("wapflow.run-id") == run_id) == 1
    # The same run again finds it on main (prepare's check, the same in any process: made in this one, its
    # cached metadata of the table refreshed first, as a new process would read it).
    head = reader.main(TABLE)
    spark.catalog.refreshTable(f"{catalog}.{TABLE}")
    again = setup_run(spark, cfg, TABLE, f, run_id=run_id)
    assert again.status == "published" and "already published" in again.message, again.message
    assert reader.main(TABLE) == head


def test_a_merge_on_nessie_killed_at_each_step_then_resumed_changes_main_once(tmp_path, spark, nessie_server):
    """The same on a Nessie catalog: the run's branch is a Nessie branch and publish is Nessie's merge, so a
    resumed run must find its own commit on the branch and main moved once (one merge commit of the run)."""
    from wapflow.config import load_config
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.pipeline import run_wap
    from wapflow.sql.identifiers import TableName

    table = f"crm_n{os.getpid()}.customers"
    section = SECTION.replace(TABLE, table)
    cfg = write_config(
        tmp_path, section, f'catalog = "nessie"\nnessie_uri = "{nessie_server.url}"\n', f"mn{os.getpid()}"
    )
    lh = Lakehouse(load_config(cfg), spark=spark)
    name = TableName.parse(table)

    def on_main() -> list[dict[str, object]]:
        lh.tables.refresh(name)
        rows = lh.tables.read(name).select("id", "name", "op").collect()
        return sorted((r.asDict() for r in rows), key=lambda r: r["id"])

    seed = _file(tmp_path / "landing" / "seed.parquet", [(i, f"n{i}", "I") for i in range(1, 6)])
    assert run_wap(lh, table, [str(seed)]).status == "published"
    before = on_main()
    f = _file(tmp_path / "landing" / "cdc.parquet", [(1, "one", "U"), (2, None, "D"), (7, "seven", "I")])
    run_id = "crash_merge_nessie"
    command = ["run", table, str(f), "--run-id", run_id]
    # The same points, where Nessie's code differs: after the merge committed on the run's Nessie branch, and
    # after Nessie's merge moved main (audit and the publish lock are the same code on every catalog).
    for point in CHAIN:
        killed = wap(*command, "--config", str(cfg), WAP_CRASH_AT=point)
        assert killed.code == -signal.SIGKILL, (point, killed.text)
        rec = {r["run_id"]: r for r in wap("runs", "--config", str(cfg), "--json").doc["runs"]}[run_id]
        assert rec["status"] == "interrupted", (point, rec)
        command = shlex.split(rec["resume"])[1:]
        if point != "publish:moved":
            assert on_main() == before, point
    done = wap(*command, "--config", str(cfg), "--json")
    assert done.code == 0 and done.doc["status"] == "published", done.text
    assert on_main() == [
        {"id": 1, "name": "one", "op": "U"},
        {"id": 3, "name": "n3", "op": "I"},
        {"id": 4, "name": "n4", "op": "I"},
        {"id": 5, "name": "n5", "op": "I"},
        {"id": 7, "name": "seven", "op": "I"},
    ]
    assert lh.nessie.get_reference(done.doc["branch"]) is None  # the run's Nessie branch is gone
    history = wap("history", table, "--config", str(cfg), "--json")
    assert sum(1 for s in history.doc["snapshots"] if s.get("run_id") == run_id) == 1, history.text
    # The same run again finds it on main (in this process, on_main() above refreshed the table's metadata).
    head = lh.nessie.get_reference("main")
    again = run_wap(lh, table, [str(f)], run_id=run_id)
    assert again.status == "published" and "already published" in again.message, again.message
    after = lh.nessie.get_reference("main")
    assert head is not None and after is not None and after.hash == head.hash  # no commit on Nessie's main
