"""The warm engine's reach and bounds with real `wap` processes, a real engine and its JVM (two JVM starts).

`wap diff` reads the catalog and main's manifests itself (no JVM, nothing written in the folder) and `wap approve`
is served by the running engine; a second folder's engine under WAP_ENGINE_MAX=1 retires the first (its JVM
with it); deleting the folder an engine serves stops it. Without a JVM: a wap.toml that does not load is
reported before any engine starts, and an engine that the free memory cannot hold is not started (one line,
the command runs in its own process). Rows on main are read by PyIceberg (no wapflow code).
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from support.cli_harness import WAP, Proc, Reader, env
from support.data import trips_file
from support.engines import engine_runtime
from wapflow.lakehouse.processes import alive, children

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TABLE = "b.trips"
STARTING = "starting the wapflow engine"


def project(folder: Path, extra: str = "") -> Path:
    """A folder with its wap.toml (engine on) and its own lakehouse."""
    folder.mkdir(parents=True)
    (folder / "wap.toml").write_text(
        f'[lakehouse]\nwarehouse = "{folder / "lakehouse"}"\nmaster = "local[1]"\ndriver_memory = "1g"\n'
        'engine = "auto"\nengine_idle = "10m"\n\n'
        f'[tables."{TABLE}"]\nchecks = [{{ check = "not_null", column = "passenger_count" }}]\n{extra}'
    )
    return folder


def _is_java(pid: int) -> bool:
    try:
        return b"java" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def wap(runtime: Path, *args: str, cwd: Path, **extra: str) -> tuple[Proc, bool]:
    """A `wap` process in `cwd`, and whether a java process was ever its child while it ran."""
    p = subprocess.Popen(
        [WAP, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=cwd,
        env=env(XDG_RUNTIME_DIR=str(runtime), WAP_ENGINE="", **extra),
    )
    box: dict[str, str] = {}
    reader = threading.Thread(target=lambda: box.update(zip(("out", "err"), p.communicate(timeout=400), strict=True)))
    reader.start()
    saw_java = False
    while reader.is_alive():
        saw_java = saw_java or any(_is_java(k) for k in children(p.pid))
        time.sleep(0.05)
    reader.join()
    return Proc(p.returncode, box["out"], box["err"]), saw_java


def engines(runtime: Path, cwd: Path) -> list[dict[str, Any]]:
    p, _ = wap(runtime, "engine", "status", "--all", "--json", cwd=cwd)
    assert p.code == 0, p.text
    return list(p.doc["engines"])


def gone(pids: list[int], within: float) -> bool:
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not any(alive(p) for p in pids)


def test_diff_needs_no_jvm_approve_is_served_and_engines_are_bounded(tmp_path: Path) -> None:
    with engine_runtime() as runtime:
        a = project(tmp_path / "a", 'review = "always"\n')
        held, _ = wap(runtime, "run", TABLE, str(trips_file(a / "in", "x.parquet", 100)), "--run-id", "held", cwd=a)
        assert held.code == 6 and STARTING in held.stderr, held.text
        [first] = engines(runtime, a)

        # What publishing would change: the run store and main's manifests, read here, no JVM, no engine.
        diff, saw_java = wap(runtime, "diff", "held", "--json", cwd=a)
        assert diff.code == 0 and not saw_java and "engine" not in diff.stderr, diff.text
        assert diff.doc["rows"]["added"] == 100 and diff.doc["columns"], diff.text

        approved, saw_java = wap(runtime, "approve", "held", "--reason", "looked at it", cwd=a)
        assert approved.code == 0 and not saw_java and STARTING not in approved.stderr, approved.text
        assert "PUBLISHED" in approved.stdout, approved.text
        [same] = engines(runtime, a)
        assert same["pid"] == first["pid"] and same["commands"] == 2
        table = Reader(a, catalog="lakehouse").cat.load_table(TABLE)
        assert sorted(table.scan(selected_fields=("trip_id",)).to_arrow().column("trip_id").to_pylist()) == list(
            range(1, 101)
        )
        assert sorted(p.name for p in a.iterdir()) == ["in", "lakehouse", "wap.toml"]  # no spark-warehouse/, derby

        # Another folder's engine under WAP_ENGINE_MAX=1: the first engine retires, its JVM with it.
        b = project(tmp_path / "b")
        q, _ = wap(runtime, "query", "SELECT 1 AS one", "--json", cwd=b, WAP_ENGINE_MAX="1")
        assert q.code == 0 and q.doc["rows"] == [[1]] and STARTING in q.stderr, q.text
        assert gone([first["pid"], *first["jvm_pids"]], within=60), first
        [second] = engines(runtime, b)
        assert second["config"] == str(b / "wap.toml") and second["jvm_pids"]

        # Its folder deleted: the engine stops on its next idle tick, not after its 10 minutes.
        shutil.rmtree(b)
        assert gone([second["pid"], *second["jvm_pids"]], within=30), second
        assert engines(runtime, a) == []
        log = Path(second["log"]).read_text()
        assert "is gone" in log and "retired" in log, log


def test_a_config_error_is_reported_before_any_engine_and_no_engine_starts_without_memory(tmp_path: Path) -> None:
    """No JVM: the command fails before Spark in its own process either way."""
    with engine_runtime() as runtime:
        folder = project(tmp_path / "c", 'mode = "upsert"\n')
        landed = str(trips_file(folder / "in", "x.parquet", 10))
        bad, _ = wap(runtime, "run", TABLE, landed, cwd=folder)
        assert bad.code == 2 and "mode" in bad.stderr and "upsert" in bad.stderr, bad.text
        assert "engine" not in bad.stderr, bad.text  # no "starting the wapflow engine" before the error
        started = [p for p in (runtime / "wapflow").glob("engine-*") if p.suffix != ".lock"]  # no record, no log
        assert not started, started

        (folder / "wap.toml").write_text((folder / "wap.toml").read_text().replace('mode = "upsert"\n', ""))
        short, _ = wap(runtime, "run", "no namespace", landed, cwd=folder, WAP_ENGINE_MIN_FREE="1000t")
        assert short.code == 2 and "needs a namespace" in short.stderr, short.text
        line = "· the wapflow engine is not used: "
        assert short.stderr.count(line) == 1 and "WAP_ENGINE_MIN_FREE" in short.stderr, short.stderr
        assert STARTING not in short.stderr
        assert not list((runtime / "wapflow").glob("engine-*.json"))
        # The setting's own mistakes are named too.
        wrong, _ = wap(runtime, "run", "no namespace", landed, cwd=folder, WAP_ENGINE_MAX="none")
        assert wrong.code == 2 and "WAP_ENGINE_MAX='none' is not a number" in wrong.stderr, wrong.text
