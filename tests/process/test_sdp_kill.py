"""`wap pipelines run` SIGKILLed at each of its steps and at random moments, then run again with the same
command, proven from outside: a reader reads both datasets' pointers in ONE query of the catalog database
(`iceberg_tables`) in a loop the whole time, and every state it sees is a whole pipeline run (the orders view and
the view derived from it from the same run), never an empty view or a half-published pipeline. At the end each
run's rows are on main exactly once and no branch is left. WAP_SDP_KILL_SEED replays the random kills;
WAP_SDP_KILLS sets how many (default 1)."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from support.cli_harness import WAP, Reader, env, wap, write_config
from support.sdp_project import project

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SEED = int(os.environ.get("WAP_SDP_KILL_SEED", "5801"))
RANDOM_KILLS = int(os.environ.get("WAP_SDP_KILLS", "1"))  # at random moments, after the one at each step
CATALOG = "sk"
TABLES = """[tables."sales.orders"]
checks = [{ check = "not_null", column = "id" }]

[tables."sales.big_orders"]
checks = [{ check = "row_count", min = 1 }]
"""


class Watcher(threading.Thread):
    """Both pointers in one query, again and again; each new pair's row counts read by PyIceberg."""

    def __init__(self, folder: Path) -> None:
        super().__init__(daemon=True)
        self.db = folder / "lakehouse" / "catalog.db"
        self.seen: set[tuple[int, int]] = set()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from pyiceberg.table import StaticTable

        counted: dict[str, int] = {}

        def rows(loc: str | None) -> int:
            if loc is None:
                return 0
            if loc not in counted:
                tbl = StaticTable.from_metadata(loc)
                counted[loc] = 0 if tbl.current_snapshot() is None else tbl.scan().to_arrow().num_rows
            return counted[loc]

        try:
            while not self.stop.is_set():
                with sqlite3.connect(self.db) as con:
                    found = dict(
                        con.execute(
                            "SELECT table_name, metadata_location FROM iceberg_tables WHERE table_namespace = 'sales'"
                        ).fetchall()
                    )
                self.seen.add((rows(found.get("orders")), rows(found.get("big_orders"))))
                time.sleep(0.05)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e


def _kill_after(cmd: list[str], seconds: float) -> int:
    p = subprocess.Popen(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        return p.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return -9


def test_a_pipeline_killed_at_each_step_and_at_random_publishes_whole_runs_exactly_once(tmp_path: Path) -> None:
    folder = tmp_path / "lake"
    cfg = write_config(folder, TABLES, catalog=CATALOG)
    spec = project(tmp_path / "shop", rows=20)
    first = wap("pipelines", "run", "--spec", str(spec), "--config", str(cfg))
    assert first.code == 0, first.text
    watcher = Watcher(folder)
    watcher.start()
    rng = random.Random(SEED)
    print(f"WAP_SDP_KILL_SEED={SEED}")
    try:
        project(tmp_path / "shop", rows=30)  # a refresh: each view a delete, then an append, on the branch
        for point in ("pipeline:ran", "publish:group-staged", "publish:moved"):
            killed = wap("pipelines", "run", "--spec", str(spec), "--config", str(cfg), WAP_CRASH_AT=point)
            assert killed.code == -signal.SIGKILL, (point, killed.text)
        done = wap("pipelines", "run", "--spec", str(spec), "--config", str(cfg))
        assert done.code == 0, done.text
        cmd = [WAP, "pipelines", "run", "--spec", str(spec), "--config", str(cfg)]
        for rows in range(40, 40 + 10 * RANDOM_KILLS, 10):
            project(tmp_path / "shop", rows=rows)
            _kill_after(cmd, rng.uniform(3.0, 12.0))
            again = wap("pipelines", "run", "--spec", str(spec), "--config", str(cfg))
            assert again.code == 0, again.text
    finally:
        watcher.stop.set()
        watcher.join(timeout=30)
    assert watcher.error is None, watcher.error
    last = 30 + 10 * RANDOM_KILLS
    whole = {(n, max(n - 10, 0)) for n in range(20, last + 1, 10)}
    assert watcher.seen <= whole, sorted(watcher.seen - whole)  # never an empty view, never half a pipeline
    assert (last, last - 10) in watcher.seen
    reader = Reader(folder, CATALOG)
    assert sorted(r["id"] for r in reader.rows("sales.orders")) == list(range(last))  # once, not twice
    assert reader.branches("sales.orders") == [] and reader.branches("sales.big_orders") == []
