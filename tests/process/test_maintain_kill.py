"""SIGKILL of a real `wap maintain` process mid-way, then `wap maintain` again: main is readable throughout with
exactly the same rows (PyIceberg, count and checksum), the killed actions read `interrupted` in the run store,
and the second process finishes the work (files compacted, snapshots expired)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from support.cli_harness import WAP, Reader, checksum, env, wap, write_config
from support.data import write_parquet
from wapflow.demo.generate import generate_trips

pytestmark = [pytest.mark.spark, pytest.mark.slow]

MAINTENANCE = """
[maintenance]
expire_older_than = "0s"
revert_window = "0s"
keep_last = 1
min_input_files = 2
every = "never"
"""


def _lake(folder: Path, spark, catalog: str, batches: int = 8) -> Path:
    from wapflow.config import load_config
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.pipeline import run_wap

    cfg = write_config(folder, MAINTENANCE + '\n[tables."m.t"]\nchecks = []\n', catalog=catalog)  # about maintenance
    lh = Lakehouse(load_config(cfg), spark=spark)
    for i in range(batches):
        f = write_parquet(folder / "landing" / f"b{i}.parquet", generate_trips(30, start_id=1 + 30 * i, seed=i))
        assert run_wap(lh, "m.t", [str(f)]).status == "published"
    return cfg


def _log(cfg: Path) -> dict[str, str]:
    """action -> shown status of the newest record of each action."""
    from wapflow.config import load_config
    from wapflow.runs.maintenance import MaintenanceLog
    from wapflow.runs.store import RunStore

    store = RunStore(load_config(cfg).run_store_url())
    try:
        out: dict[str, str] = {}
        for r in MaintenanceLog(store.engine).list("m.t", limit=1000):
            out.setdefault(r.action, r.shown_status)
        return out
    finally:
        store.close()


def test_killed_after_compaction_then_rerun_finishes(tmp_path: Path, spark):
    catalog = f"mk{os.getpid()}"
    cfg = _lake(tmp_path, spark, catalog)
    reader = Reader(tmp_path, catalog)
    before = checksum(reader.rows("m.t"), "trip_id")

    killed = wap("maintain", "m.t", "--config", str(cfg), "--json", WAP_CRASH_AT="maintain:compact")

    assert killed.code == -signal.SIGKILL, killed.text
    assert checksum(reader.rows("m.t"), "trip_id") == before  # main readable, same rows
    assert _log(cfg)["compact"] == "interrupted"
    assert "expire_snapshots" not in _log(cfg)
    assert len(reader.summaries("m.t")) > 8  # nothing expired yet

    again = wap("maintain", "m.t", "--config", str(cfg), "--json")

    assert again.code == 0, again.text
    (t,) = again.doc["tables"]
    assert t["status"] == "done"
    assert t["summary"]["data_files_after"] == 1
    assert t["summary"]["snapshots_expired"] >= 8
    assert checksum(reader.rows("m.t"), "trip_id") == before
    assert len(reader.summaries("m.t")) == 1
    assert _log(cfg)["expire_snapshots"] == "done"


def test_killed_from_outside_while_maintaining_then_rerun(tmp_path: Path, spark):
    catalog = f"mo{os.getpid()}"
    cfg = _lake(tmp_path, spark, catalog, batches=12)
    reader = Reader(tmp_path, catalog)
    before = checksum(reader.rows("m.t"), "trip_id")
    proc = subprocess.Popen(
        [WAP, "maintain", "m.t", "--config", str(cfg), "--json"],
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            if "compact" in _log(cfg):  # the compaction has started (its rewrite may be running)
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert checksum(reader.rows("m.t"), "trip_id") == before

    again = wap("maintain", "m.t", "--config", str(cfg), "--json")

    assert again.code == 0, again.text
    assert checksum(reader.rows("m.t"), "trip_id") == before
    assert again.doc["tables"][0]["summary"]["data_files_after"] == 1
    assert len(reader.summaries("m.t")) == 1
