"""The warm engine (wapflow.engine) with real `wap` processes, a real engine process and its JVM.

One lakehouse with `engine = "auto"` for the whole module, its tests in order (the engine they share is part
of the story): the first `wap run` starts the engine, later ones are served by it without a JVM of their own
(`wap ingest` too, DBOS launched anew in each command's process); what a user sees (stdout, stderr, exit codes,
--json) is what `--no-engine` shows; Ctrl-C of a client mid-write and SIGKILL of the engine mid-run end like
the same stops of a `wap` process and the run resumes once; two clients racing to start it start one; a stale
socket is replaced; an edit of wap.toml keeps the engine (read again), one of its Spark settings replaces it;
idle expiry and `wap engine stop` leave no JVM. Rows
on main are read by PyIceberg (no wapflow code).
The rest of the suite runs with WAP_ENGINE=off (tests/conftest.py); here it is unset, so wap.toml decides.

The side without the engine: one real `wap --no-engine` process with its own JVM (a published run), and `wap`
commands that exit before Spark starts as processes too; the others (a blocked run, query, revert, discard,
maintain) run their same command lines through the CLI in this test process on the shared SparkSession, which
a `--no-engine` process would do on a JVM of its own (10-15 s of CPU each): the same code, parsing and rendering.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import chdir
from pathlib import Path
from typing import Any

import pytest

from support import typer_cli
from support.cli_harness import WAP, Proc, Reader, env, setup_run, unique_catalog
from support.data import trips_file
from support.engines import engine_runtime
from wapflow.demo.generate import generate_trips
from wapflow.lakehouse.processes import alive, children

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TABLE = "e.trips"
STARTING = "starting the wapflow engine"
# The lakehouse's catalog name: its own in this test process too, whose shared SparkSession caches catalogs by
# name (the in-process side below registers it there).
CATALOG = unique_catalog("eng")


@pytest.fixture(scope="module")
def runtime() -> Iterator[Path]:
    """XDG_RUNTIME_DIR of this module's processes: its own, every engine under it stopped at the end."""
    with engine_runtime() as folder:
        yield folder


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Path:
    """The module's lakehouse. The shared session (`spark`, for the commands run in this process) starts first:
    it sets SPARK_LOCAL_IP in this process's environment, which the `wap` processes inherit and which is part of
    an engine's key, so every process of the module asks for the same engine."""
    folder = tmp_path_factory.mktemp("engine")
    (folder / "wap.toml").write_text(
        f'[lakehouse]\nwarehouse = "{folder / "lakehouse"}"\ncatalog_name = "{CATALOG}"\nmaster = "local[2]"\n'
        'driver_memory = "1g"\nengine = "auto"\nengine_idle = "10m"\n'
        '[lakehouse.spark_conf]\n"spark.sql.shuffle.partitions" = "2"\n\n'
        f'[tables."{TABLE}"]\nchecks = [{{ check = "not_null", column = "passenger_count" }}]\n\n'
        f'[sources.trips]\ntable = "{TABLE}"\nlocation = "{folder / "incoming"}"\nsettle_seconds = 0\n'
    )
    (folder / "incoming").mkdir()
    return folder


def engine_env(runtime: Path, **extra: str) -> dict[str, str]:
    return env(XDG_RUNTIME_DIR=str(runtime), WAP_ENGINE="", **extra)


def _is_java(pid: int) -> bool:
    try:
        return b"java" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def served(runtime: Path, *args: str, cwd: Path | None = None, **extra: str) -> tuple[Proc, bool]:
    """A `wap` process, and whether a java process was ever its child while it ran."""
    p = subprocess.Popen(
        [WAP, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=cwd,
        env=engine_env(runtime, **extra),
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


def here(*args: str, cwd: Path) -> Proc:
    """What `wap ARGS --no-engine` in `cwd` runs, through the CLI in this test process on the shared SparkSession
    instead of a JVM of its own (the CLI here never hands a command to an engine: that is the console script's
    first step, and tests/conftest.py sets WAP_ENGINE=off)."""
    with chdir(cwd):
        res = typer_cli.wap(*args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return Proc(res.exit_code, res.stdout, res.stderr)


def status(runtime: Path, lake: Path) -> dict[str, Any]:
    p, _ = served(runtime, "engine", "status", "--all", "-c", str(lake / "wap.toml"), "--json")
    assert p.code == 0, p.text
    return p.doc


def this_engine(runtime: Path, lake: Path) -> dict[str, Any]:
    mine = [e for e in status(runtime, lake)["engines"] if e["this_config"]]
    assert len(mine) == 1, mine
    return mine[0]


def main_rows(lake: Path) -> list[int]:
    """The trip ids on main, sorted (PyIceberg, the id column only)."""
    cat = Reader(lake, catalog=CATALOG).cat
    ids = cat.load_table(TABLE).scan(selected_fields=("trip_id",)).to_arrow().column("trip_id").to_pylist()
    return sorted(ids)


def gone(pids: list[int], within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not any(alive(p) for p in pids)


def test_the_first_run_starts_the_engine_and_the_next_is_served_without_a_jvm(runtime: Path, lake: Path) -> None:
    cfg = str(lake / "wap.toml")
    landing = lake / "landing"
    first, _ = served(runtime, "run", TABLE, str(trips_file(landing, "a.parquet", 200)), "-c", cfg)
    assert first.code == 0, first.text
    assert STARTING in first.stderr and "PUBLISHED" in first.stdout
    assert main_rows(lake) == list(range(1, 201))
    engine = this_engine(runtime, lake)
    assert engine["config"] == str(Path(cfg).resolve()) and engine["commands"] == 1 and engine["jvm_pids"]

    second, saw_java = served(
        runtime, "run", TABLE, str(trips_file(landing, "b.parquet", 200, start_id=201)), "-c", cfg
    )
    assert second.code == 0, second.text
    assert STARTING not in second.stderr and not saw_java, second.text
    again = this_engine(runtime, lake)
    assert again["pid"] == engine["pid"] and again["commands"] == 2
    assert main_rows(lake) == list(range(1, 401))
    # Iceberg's procedures get the table catalog-qualified: no "Failed to load catalog" WARN (a 90-line stack
    # trace in Spark's log) for every publish.
    logs = list((lake / "lakehouse" / "logs").glob("wap-*.log"))
    assert logs and not any("Failed to load catalog" in p.read_text(errors="replace") for p in logs)

    # Another writer's commit (PyIceberg, not wapflow) is what the engine's next command reads: its catalog keeps
    # no table cached between commands (Iceberg's cache would show it main as the last command saw it for 30 s).
    count = ("query", f"SELECT count(*) AS n FROM {TABLE}", "-c", cfg, "--json")
    seen, _ = served(runtime, *count)
    assert seen.code == 0 and seen.doc["rows"] == [[400]], seen.text
    Reader(lake, catalog=CATALOG).cat.load_table(TABLE).append(generate_trips(5, start_id=900_001))
    seen, _ = served(runtime, *count)
    assert seen.code == 0 and seen.doc["rows"] == [[405]], seen.text
    assert this_engine(runtime, lake)["pid"] == engine["pid"]

    folder = runtime / "wapflow"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    sock = folder / f"engine-{engine['key']}.sock"
    assert stat.S_ISSOCK(sock.stat().st_mode) and stat.S_IMODE(sock.stat().st_mode) == 0o600


def test_ingest_is_served_by_the_engine_command_after_command(runtime: Path, lake: Path) -> None:
    """`wap ingest` launches DBOS in its command's process (a child of the engine) for its batch: a second and a
    third ingest in the same engine launch it again, and each landed file is published exactly once."""
    cfg = str(lake / "wap.toml")
    incoming = lake / "incoming"
    before = main_rows(lake)
    pid = this_engine(runtime, lake)["pid"]
    trips_file(incoming, "i1.parquet", 30, start_id=500_001)
    trips_file(incoming, "i2.parquet", 30, start_id=500_101)
    first, saw_java = served(runtime, "ingest", "trips", "-c", cfg, "--json")
    assert first.code == 0 and not saw_java, first.text
    assert sorted(Path(f["uri"]).name for f in first.doc["files"]) == ["i1.parquet", "i2.parquet"], first.text

    again, _ = served(runtime, "ingest", "trips", "-c", cfg, "--json")
    assert again.code == 0 and again.doc["files"] == [] and "nothing new" in again.doc["message"], again.text

    trips_file(incoming, "i3.parquet", 30, start_id=500_201)
    third, _ = served(runtime, "ingest", "trips", "-c", cfg, "--json")
    assert third.code == 0 and [Path(f["uri"]).name for f in third.doc["files"]] == ["i3.parquet"], third.text

    ledger, _ = served(runtime, "files", "trips", "-c", cfg, "--json")
    assert {Path(r["uri"]).name: r["state"] for r in ledger.doc["files"]} == dict.fromkeys(
        ["i1.parquet", "i2.parquet", "i3.parquet"], "published"
    ), ledger.text
    added = [*range(500_001, 500_031), *range(500_101, 500_131), *range(500_201, 500_231)]
    assert main_rows(lake) == sorted([*before, *added])
    assert this_engine(runtime, lake)["pid"] == pid


def test_commands_at_once_run_together_each_its_own_run(runtime: Path, lake: Path) -> None:
    """Three clients at once: the engine runs their commands side by side (each in its own child of the engine,
    on the warm session), and each run publishes its own rows under its own run id."""
    cfg = str(lake / "wap.toml")
    engine = this_engine(runtime, lake)
    log_file = Path(engine["log"])
    log_before = log_file.read_text()
    before = main_rows(lake)
    starts = [600_001, 600_101, 600_201]
    files = [str(trips_file(lake / "landing", f"at-once-{i}.parquet", 50, start_id=n)) for i, n in enumerate(starts)]
    procs = [
        subprocess.Popen(
            [WAP, "run", TABLE, file, "-c", cfg, "--run-id", f"at-once-{i}", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=engine_env(runtime),
        )
        for i, file in enumerate(files)
    ]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    assert [code for code, _, _ in results] == [0, 0, 0], results
    assert [json.loads(out)["status"] for _, out, _ in results] == ["published"] * 3, results
    assert all(STARTING not in err for _, _, err in results), results

    # Side by side: the three commands had all begun before the first of them ended (the engine's log).
    lines = log_file.read_text()[len(log_before) :].splitlines()
    began = [i for i, line in enumerate(lines) if re.search(r"\] command \d+ for pid ", line)]
    ended = [i for i, line in enumerate(lines) if re.search(r"\] command \d+ ended with 0", line)]
    assert len(began) == 3 and len(ended) == 3, lines
    assert max(began) < min(ended), lines
    assert this_engine(runtime, lake)["pid"] == engine["pid"]

    added = [n for first in starts for n in range(first, first + 50)]
    assert main_rows(lake) == sorted([*before, *added])
    # Each commit on main carries the run id of the command that made it (nothing of one leaked into another).
    table = Reader(lake, catalog=CATALOG).cat.load_table(TABLE)
    by_run = {
        s.summary.additional_properties.get("wapflow.run-id"): int(s.summary.additional_properties["added-records"])
        for s in table.snapshots()
        if s.summary is not None and "added-records" in s.summary.additional_properties
    }
    assert {f"at-once-{i}": 50 for i in range(3)}.items() <= by_run.items(), by_run


def _normal(text: str, snapshot: str = "SNAP") -> str:
    """Run ids, snapshot ids and the lines only one side prints (Spark's start, the engine's, Spark's log)."""
    text = re.sub(r"\d{8}t\d{6}_[0-9a-f]{6}", "RUN", text)
    text = re.sub(r"-?\b\d{12,}\b", snapshot, text)
    skip = ("· starting Spark", f"· {STARTING}", "  Spark's log:")
    return "\n".join(line for line in text.splitlines() if not line.startswith(skip))


def _normal_doc(text: str) -> dict[str, Any]:
    doc = json.loads(_normal(text, snapshot="0"))
    for key in ("timings", "files"):
        doc.pop(key, None)
    if isinstance(doc.get("error"), dict):
        doc["error"].pop("log", None)
    for c in doc.get("checks") or []:  # the two sides' files hold other rows: a sample's columns, not its values
        c["samples"] = [sorted(s) for s in c.get("samples") or []]
    return doc


def test_output_and_exit_codes_are_those_of_a_run_without_the_engine(runtime: Path, lake: Path, spark: Any) -> None:
    """Each run through the engine and without it: a published run in a `wap --no-engine` process (its own JVM),
    the blocked one in this process (see the module docstring), the two refused before Spark as processes."""
    cfg = str(lake / "wap.toml")
    sides: dict[str, dict[str, Proc]] = {}
    own_jvm = False
    # The side without the engine first: the engine's Iceberg catalog keeps a table cached (30 s after its last
    # use) and meanwhile misses other writers' commits (its publish step refreshes it). Its runs here come after the
    # other side's, so it starts the next test knowing main as it is and that test's runs branch from there.
    for side, start, flags in (("own", 2001, ["--no-engine"]), ("engine", 1001, [])):
        folder = lake / f"cmp-{side}"
        good = trips_file(folder, "good.parquet", 50, start_id=start).name
        bad = trips_file(folder, "nulls.parquet", 50, null_rate=0.2, start_id=start + 100).name
        runs = {
            "published": ("run", TABLE, good, "-c", cfg),
            "blocked --json": ("run", TABLE, bad, "-c", cfg, "--json"),
            "bad table": ("run", "no namespace", good, "-c", cfg),
            "bad option": ("run", TABLE, good, "-c", cfg, "--bogus"),
        }
        sides[side] = {}
        for name, args in runs.items():
            if side == "own" and name == "blocked --json":
                sides[side][name] = here(*args, cwd=folder)
                continue
            p, saw_java = served(runtime, *args, *flags, cwd=folder)
            sides[side][name] = p
            if side == "engine":
                assert not saw_java and STARTING not in p.stderr, (name, p.text)  # the engine of the first test
            elif name == "published":
                own_jvm = saw_java
    engine, own = sides["engine"], sides["own"]
    codes = [p.code for p in engine.values()], [p.code for p in own.values()]
    assert codes[0] == codes[1] == [0, 1, 2, 2], (codes, [p.text for p in own.values()])
    assert "starting Spark" in own["published"].stderr and own_jvm  # the other side did start its own JVM
    for name in ("published", "bad table", "bad option"):
        assert _normal(engine[name].stdout) == _normal(own[name].stdout), name
        assert _normal(engine[name].stderr) == _normal(own[name].stderr), name
    blocked = _normal_doc(engine["blocked --json"].stdout)
    assert blocked["status"] == "blocked" and blocked == _normal_doc(own["blocked --json"].stdout)
    assert _normal(engine["blocked --json"].stderr) == _normal(own["blocked --json"].stderr)


def test_query_revert_discard_maintain_backfill_run_tables_say_what_they_say_without_the_engine(
    runtime: Path, lake: Path, spark: Any
) -> None:
    """The other commands the engine serves, each run once through it and once without it, in this process (see
    the module docstring; each side on its own rows and run ids): the same exit codes, and the same output once the
    side's names and numbers are masked."""
    cfg = str(lake / "wap.toml")
    sides: dict[str, list[Proc]] = {}
    for side, start in (("engine", 5001), ("own", 6001)):
        folder = lake / f"more-{side}"
        good = trips_file(folder, "good.parquet", 40, start_id=start)
        bad = trips_file(folder, "nulls.parquet", 40, null_rate=0.3, start_id=start + 100)
        # The setup, not compared: through the engine on its side; on the other, in this process by the session
        # that runs the commands then.
        if side == "engine":
            for f, run_id in ((good, f"par-{side}"), (bad, f"blk-{side}")):
                p, _ = served(runtime, "run", TABLE, f.name, "--run-id", run_id, "-c", cfg, "--json", cwd=folder)
                assert p.code in (0, 1), p.text
            branch = p.doc["branch"]  # the blocked run's, kept
        else:
            if spark.conf.get(f"spark.sql.catalog.{CATALOG}", None):  # registered here by the test before
                spark.catalog.refreshTable(f"{CATALOG}.{TABLE}")  # as a new process: no table cached from before
            assert setup_run(spark, Path(cfg), TABLE, good, run_id=f"par-{side}").status == "published"
            branch = setup_run(spark, Path(cfg), TABLE, bad, run_id=f"blk-{side}").branch
        assert branch, side
        commands = [
            ("query", f"SELECT count(*) AS n FROM {TABLE} WHERE trip_id BETWEEN {start} AND {start + 39}"),
            ("query", f"SELECT count(*) AS n FROM {TABLE} WHERE trip_id >= {start}", "--json"),
            ("query", "DROP TABLE e.trips"),  # refused: read-only
            ("revert", f"par-{side}"),
            ("revert", f"par-{side}", "--json"),  # again: nothing of it on main
            ("discard", branch),
            ("maintain", TABLE, "--dry-run"),
            ("maintain", "e.nope", "--dry-run"),
            ("backfill", "trips", "--since", "2000-01-01", "--dry-run", "--json"),
            ("backfill", "nope"),  # no such source
            ("run-tables", f"{TABLE}={good.name}", f"{TABLE}={good.name}"),  # refused: a table twice in one run
        ]
        sides[side] = []
        for args in commands:
            if side == "own":
                sides[side].append(here(*args, "-c", cfg, cwd=folder))
                continue
            p, saw_java = served(runtime, *args, "-c", cfg, cwd=folder)
            sides[side].append(p)
            assert not saw_java and STARTING not in p.stderr, (args, p.text)
        assert main_rows(lake)[-1] < start or start not in main_rows(lake)  # the revert took its rows off

    def masked(text: str, side: str, start: int) -> str:
        text = _normal(text).replace(f"par-{side}", "par-SIDE").replace(f"blk-{side}", "blk-SIDE")
        text = text.replace(str(lake / f"more-{side}"), "FOLDER")
        text = re.sub(r'"log": (null|"[^"]*")', '"log": LOG', text)  # Spark's log: the engine's, or the process's
        return re.sub(r"\d+(\.\d+)?", "N", text)

    engine, own = sides["engine"], sides["own"]
    assert [p.code for p in engine] == [p.code for p in own], ([p.text for p in engine], [p.text for p in own])
    assert [p.code for p in engine][:3] == [0, 0, 2] and engine[3].code == 0 and engine[4].code == 2
    assert [p.code for p in engine][8:] == [0, 2, 2], [p.text for p in engine[8:]]
    assert "appears twice" in engine[10].stderr.lower(), engine[10].text
    assert "1 row" in engine[0].stdout or "40" in engine[0].stdout, engine[0].text
    for e, o in zip(engine, own, strict=True):
        assert masked(e.stdout, "engine", 5001) == masked(o.stdout, "own", 6001), (e.text, o.text)
        assert masked(e.stderr, "engine", 5001) == masked(o.stderr, "own", 6001), (e.text, o.text)


def test_ctrl_c_mid_write_stops_the_command_and_the_run_resumes_once(runtime: Path, lake: Path) -> None:
    cfg = str(lake / "wap.toml")
    before = this_engine(runtime, lake)
    big = trips_file(lake / "landing", "big.parquet", 1_500_000, start_id=10_000_001)
    p = subprocess.Popen(
        [WAP, "run", TABLE, str(big), "-c", cfg, "--run-id", "stopped-mid-write"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=engine_env(runtime),
    )
    assert p.stderr is not None
    seen = []
    for line in p.stderr:
        seen.append(line)
        if "writing to branch" in line:
            break
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    err = "".join(seen) + err
    assert p.returncode == 130, out + err
    assert "stopped by SIGINT; anything under way resumes" in err and "Traceback" not in err
    # The command was cut inside Spark: the engine ended with its JVM before the client heard 130.
    assert gone([before["pid"], *before["jvm_pids"]]), before

    runs = subprocess.run(
        [WAP, "runs", "-c", cfg, "--json"], capture_output=True, text=True, env=engine_env(runtime), check=False
    )
    record = next(r for r in json.loads(runs.stdout)["runs"] if r["run_id"] == "stopped-mid-write")
    assert record["status"] == "interrupted"
    rows_before = len(main_rows(lake))

    again, _ = served(runtime, "run", TABLE, str(big), "-c", cfg, "--run-id", "stopped-mid-write")
    assert again.code == 0, again.text
    assert STARTING in again.stderr  # a new engine
    assert "PUBLISHED" in again.stdout and "rows written: 1500000" in again.stdout
    assert len(main_rows(lake)) == rows_before + 1_500_000


def _paused_child(engine_pid: int, within: float = 120.0) -> int:
    """The engine's child (a command's process) stopped at its WAP_PAUSE_AT point."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for pid in children(engine_pid):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "T":
                    return pid
        time.sleep(0.1)
    raise AssertionError("no command of the engine paused")


def test_engine_killed_mid_run_then_two_racing_commands_start_one_engine(runtime: Path, lake: Path) -> None:
    cfg = str(lake / "wap.toml")
    landing = lake / "landing"
    engine = this_engine(runtime, lake)
    killed_file = str(trips_file(landing, "killed.parquet", 300, start_id=50_001))
    p = subprocess.Popen(
        [WAP, "run", TABLE, killed_file, "-c", cfg, "--run-id", "engine-killed"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=engine_env(runtime, WAP_PAUSE_AT="write:appended"),
    )
    command = _paused_child(engine["pid"])  # its rows are on its branch
    os.kill(engine["pid"], signal.SIGKILL)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 3, err
    assert f"the wapflow engine (pid {engine['pid']}) ended while running the command" in err
    assert gone([engine["pid"], command, *engine["jvm_pids"]]), engine  # the command and the JVM end with it
    stale = runtime / "wapflow" / f"engine-{engine['key']}.sock"
    assert stale.exists()  # left by the SIGKILL: the next client finds it dead and replaces it

    procs = [
        subprocess.Popen(
            [WAP, "run", TABLE, *args, "-c", cfg],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=engine_env(runtime),
        )
        for args in (
            [killed_file, "--run-id", "engine-killed"],
            [str(trips_file(landing, "racer.parquet", 100, start_id=60_001))],
        )
    ]
    results = [(p.wait(timeout=400), *p.communicate()) for p in procs]
    assert [code for code, _, _ in results] == [0, 0], results
    assert sum(err.count(STARTING) for _, _, err in results) == 1, results
    new = this_engine(runtime, lake)
    assert new["pid"] != engine["pid"] and new["commands"] == 2
    rows = main_rows(lake)
    assert [r for r in rows if 50_001 <= r <= 50_300] == list(range(50_001, 50_300 + 1))  # published once
    assert [r for r in rows if 60_001 <= r <= 60_100] == list(range(60_001, 60_101))

    # Only the command's process killed (after its rows were committed on its branch): the engine ends with its
    # JVM, which may still hold that command's work, and says so as if it had been killed; the run resumes once.
    crashed_file = str(trips_file(landing, "crashed.parquet", 40, start_id=65_001))
    crashed, _ = served(
        runtime, "run", TABLE, crashed_file, "-c", cfg, "--run-id", "command-killed", WAP_CRASH_AT="write:appended"
    )
    assert crashed.code == 3, crashed.text
    assert f"the wapflow engine (pid {new['pid']}) ended while running the command" in crashed.stderr
    assert gone([new["pid"], *new["jvm_pids"]]), new
    again, _ = served(runtime, "run", TABLE, crashed_file, "-c", cfg, "--run-id", "command-killed")
    assert again.code == 0 and STARTING in again.stderr, again.text
    assert [r for r in main_rows(lake) if 65_001 <= r <= 65_040] == list(range(65_001, 65_041))


def test_an_edit_of_wap_toml_keeps_the_engine_and_a_spark_setting_replaces_it(runtime: Path, lake: Path) -> None:
    cfg = lake / "wap.toml"
    original = cfg.read_text()
    old = this_engine(runtime, lake)
    landing = lake / "landing"

    # A table's settings and engine_idle changed: the same engine serves the next command, which reads the new
    # wap.toml itself (the run is held for review); the engine read engine_idle again.
    edited = original.replace('engine_idle = "10m"', 'engine_idle = "9m"').replace(
        f'[tables."{TABLE}"]\n', f'[tables."{TABLE}"]\nreview = "always"\n'
    )
    cfg.write_text(edited)
    held, saw_java = served(
        runtime, "run", TABLE, str(trips_file(landing, "c.parquet", 10, start_id=70_001)), "-c", str(cfg), "--json"
    )
    assert held.code == 6 and held.doc["status"] == "awaiting_review", held.text
    assert STARTING not in held.stderr and not saw_java, held.text
    rejected, _ = served(runtime, "reject", held.doc["run_id"], "--reason", "a test", "-c", str(cfg))
    assert rejected.code == 0 and STARTING not in rejected.stderr, rejected.text
    same = this_engine(runtime, lake)
    assert same["pid"] == old["pid"] and same["idle_stop_s"] == 540, same
    assert 70_001 not in main_rows(lake)

    # A Spark setting changed (and engine_idle): a new engine, and the old one retires with its JVM instead of
    # idling beside it. The new one then idles out after 4 s, its JVM with it.
    cfg.write_text(original.replace('"spark.sql.shuffle.partitions" = "2"', '"spark.sql.shuffle.partitions" = "3"'))
    cfg.write_text(cfg.read_text().replace('engine_idle = "10m"', 'engine_idle = "4s"'))
    p, _ = served(runtime, "run", TABLE, str(trips_file(landing, "d.parquet", 10, start_id=70_101)), "-c", str(cfg))
    assert p.code == 0 and STARTING in p.stderr, p.text
    assert gone([old["pid"], *old["jvm_pids"]], within=60), old
    [new] = status(runtime, lake)["engines"]
    assert new["pid"] != old["pid"] and new["this_config"]
    assert gone([new["pid"], *new["jvm_pids"]], within=60), new
    assert status(runtime, lake)["engines"] == []
    cfg.write_text(original)


def test_engine_status_and_stop_leave_no_jvm(runtime: Path, lake: Path) -> None:
    cfg = str(lake / "wap.toml")
    started, _ = served(runtime, "query", "SELECT 1 AS one", "-c", cfg)
    assert started.code == 0 and STARTING in started.stderr, started.text
    engine = this_engine(runtime, lake)
    assert engine["memory_mb"] > 50 and engine["jvm_pids"] and engine["idle_for_s"] >= 0
    assert all(alive(p) and _is_java(p) for p in engine["jvm_pids"]) and engine["running"] == 0
    p, _ = served(runtime, "engine", "stop", "-c", cfg, "--json")
    assert p.code == 0, p.text
    assert [s["pid"] for s in p.doc["stopped"]] == [engine["pid"]]
    assert gone([engine["pid"], *engine["jvm_pids"]], within=5), engine
    assert status(runtime, lake)["engines"] == []
    assert not list((runtime / "wapflow").glob("engine-*.sock"))


def test_an_engine_that_cannot_start_leaves_the_command_to_its_own_process(
    runtime: Path, lake: Path, tmp_path: Path
) -> None:
    """One line says why, then the command runs as without an engine (here it fails before Spark, or on the
    missing Java, so no JVM is needed to see it)."""
    cfg = str(lake / "wap.toml")
    good = str(trips_file(tmp_path, "x.parquet", 10, start_id=90_001))
    not_a_folder = tmp_path / "rt"
    not_a_folder.mkdir()
    (not_a_folder / "wapflow").write_text("a file where the runtime folder goes")
    p, _ = served(not_a_folder, "run", "no namespace", good, "-c", cfg)
    assert p.code == 2, p.text
    assert "· the wapflow engine is not used: " in p.stderr and "needs a namespace" in p.stderr

    no_java = tmp_path / "bin"
    no_java.mkdir()
    p, _ = served(runtime, "run", TABLE, good, "-c", cfg, PATH=str(no_java), JAVA_HOME=str(tmp_path / "none"))
    assert p.code == 3, p.text
    assert "· the wapflow engine is not used: it could not start Spark" in p.stderr, p.stderr
    assert "Java was not found" in p.stderr and "Traceback" not in p.stderr
    assert status(runtime, lake)["engines"] == []  # the engine that could not start did not stay
