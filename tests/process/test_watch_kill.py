"""SIGKILL a real `wap watch` worker inside each step of a batch's durable workflow, restart it, and let it
finish: DBOS resumes the interrupted workflow at the step it was in, and every file's rows are on main
exactly once (read back with PyIceberg), no branch is left, the ledger agrees with main's history, no run is
left `running`, and every workflow ended SUCCESS. Each resumed run records one `recovered` alert, however
often it was killed and resumed, sent to a local receiver unless the worker was killed while sending it.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from support.cli_harness import Reader, checksum, wap, write_config
from support.data import write_parquet
from support.receiver import Receiver
from wapflow.demo.generate import generate_trips

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# Each process is killed at the next point; the next one resumes what it left (DBOS resumes the workflow, and
# the orphaned claim is taken over and enqueued again: the same workflow). In order: a batch's rows on the
# branch (killed inside the write step: it runs again and finds them), its audit stored (inside the audit
# step), main moved (inside the publish step, the branch not dropped), the run over but the ledger not
# updated (inside the settle step). A batch claimed and no workflow yet (ingest:claimed) is the ingest loop's
# own point, the same code in `wap ingest`: killed in test_ingest_kill.py.
CHAIN = ["write:appended", "audit", "publish:moved", "ingest:ran"]


def test_sigkill_watch_inside_each_step_then_finish_exactly_once(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    files = [
        write_parquet(landing / f"f{i}.parquet", generate_trips(40, start_id=1 + 1000 * i, seed=i)) for i in range(5)
    ]
    cfg = write_config(
        tmp_path,
        '[tables."k.trips"]\nchecks = [{ check = "not_null", column = "passenger_count" }]\n\n'
        f'[sources.trips]\ntable = "k.trips"\nlocation = "{landing}"\nsettle_seconds = 0\nmax_files_per_run = 2\n\n'
        '[watch]\nworker = "w1"\n\n'
        '[alerts.sinks.ops]\ntype = "webhook"\nurl_env = "WAP_T_HOOK"\nevents = ["recovered"]\n',
        catalog="wkill",
    )
    receiver = Receiver()
    for point in CHAIN:
        killed = wap("watch", "--once", "--config", str(cfg), WAP_CRASH_AT=point, WAP_T_HOOK=receiver.url)
        assert killed.code == -signal.SIGKILL, (point, killed.text)
        assert "Traceback" not in killed.stderr
        states = [r["state"] for r in wap("files", "trips", "--config", str(cfg), "--json").doc["files"]]
        assert "claimed (orphaned)" in states, (point, states)

    done = wap("watch", "--once", "--config", str(cfg), "--json", WAP_T_HOOK=receiver.url)
    assert done.code == 0, done.text
    assert "resum" in done.stderr or done.doc["runs"], done.text

    reader = Reader(tmp_path, "wkill")
    expected = [r for f in files for r in pq.read_table(f).to_pylist()]
    assert checksum(reader.rows("k.trips"), "trip_id") == checksum(expected, "trip_id")  # each row once
    assert reader.branches("k.trips") == []

    rows = wap("files", "trips", "--config", str(cfg), "--json").doc["files"]
    assert sorted(Path(r["uri"]).name for r in rows) == [f.name for f in files]
    assert {r["state"] for r in rows} == {"published"}
    # The ledger agrees with main: every file's snapshot is in main's history and carries its run id, itself
    # or, when another batch published first and the run was re-applied on top (a cherry-pick), through the
    # snapshot it was copied from (Iceberg's source-snapshot-id).
    table = reader.cat.load_table("k.trips")

    def props(snapshot_id: int) -> dict[str, str]:
        s = table.snapshot_by_id(snapshot_id)
        return dict(s.summary.additional_properties) if s is not None and s.summary else {}

    on_main = {}
    snap = table.current_snapshot()
    while snap is not None:
        p = props(snap.snapshot_id)
        src = p.get("source-snapshot-id")
        on_main[snap.snapshot_id] = p.get("wapflow.run-id") or (props(int(src)).get("wapflow.run-id") if src else None)
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    assert {r["snapshot_id"] for r in rows} <= set(on_main)
    mismatched = [
        (Path(r["uri"]).name, r["run_id"], r["snapshot_id"], on_main[r["snapshot_id"]])
        for r in rows
        if on_main[r["snapshot_id"]] != r["run_id"]
    ]
    assert mismatched == [], (mismatched, on_main)
    assert len({r["run_id"] for r in rows}) == 3  # batches of 2, 2, 1: no run twice, none split

    runs = wap("runs", "--config", str(cfg), "--json").doc["runs"]
    assert runs and {r["status"] for r in runs} == {"published"}, runs
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'lakehouse' / 'dbos.sqlite'}")
    with engine.connect() as conn:
        wfs = dict(conn.execute(sa.text("SELECT workflow_uuid, status FROM workflow_status")).all())
    engine.dispose()
    assert set(wfs.values()) == {"SUCCESS"} and len(wfs) == 3, wfs

    # Every run that was left by a killed worker and resumed alerted once (claim and workflow id agree).
    receiver.close()
    recovered = [(b["event"], b["run_id"]) for b in receiver.bodies]
    assert recovered and len(recovered) == len(set(recovered)), recovered
    assert {run for _, run in recovered} <= {r["run_id"] for r in rows}
    alerts = wap("alerts", "list", "--config", str(cfg), "--json").doc["alerts"]
    assert len(alerts) == len({a["run_id"] for a in alerts}), alerts  # one row per resumed run
    # A worker killed between claiming an alert and sending it (the resumed workflow reached its kill point
    # while the alert was on its way) leaves the row 'pending': never sent again, since it may have arrived
    # (at most once). Every other row was sent, and the receiver holds exactly those.
    assert {a["status"] for a in alerts} <= {"sent", "pending"}, alerts
    assert sorted(a["run_id"] for a in alerts if a["status"] == "sent") == sorted(run for _, run in recovered)
