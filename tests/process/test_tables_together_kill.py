"""Several tables published in one commit on the embedded SQLite catalog, proven from outside with real processes.

1. A reader reads every table's pointer in ONE query of the catalog database (`iceberg_tables`), in a loop,
   while a publisher of groups (tests/support/group_driver.py: PyIceberg appends to branch `g<k>` of three
   tables, then wapflow's publish_group) is SIGKILLed at random moments, 30 times by default (half of them just
   after it starts publishing a group; besides, a few drivers kill themselves at publish:group-planned and
   publish:group-staged), and restarted each time: every state it reads holds the same groups on every table
   (all old or all new), never fewer than the state before. At the end every group is on main exactly once on
   every table, no branch is left, and a fresh Spark session (`wap query`) counts the rows PyIceberg counts.
   Seeded: WAP_GROUP_KILL_SEED=<seed> replays the kills' choices (the seed prints itself), WAP_GROUP_KILLS
   sets how many (default 30; 50 before 2026-12-03, when CI's suite ran over its 40 minutes).
2. `wap run-tables` SIGKILLed at each of its crash points (wapflow.faults, the group commit's included), one
   after another, each process resuming the run the previous one left: before the commit no main changed,
   after it every main holds the run; then the same command exits 0, every table's rows on main exactly once,
   no branch left. The chain on tables with rows gives no --run-id: each command resumes the run by its files.
3. A one-table `wap run` into a table of a group while the group publishes, both orders (WAP_PAUSE_AT stops
   one of them inside the publish lock; /proc shows the other waiting for it): both publish, no row is lost or
   doubled, and each publishes the way its order implies (the second one onto a moved main).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support import group_driver
from support.cli_harness import WAP, Reader, checksum, env, wap, write_config
from support.killable import stopped

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SEED = int(os.environ.get("WAP_GROUP_KILL_SEED", "4501"))
KILLS = int(os.environ.get("WAP_GROUP_KILLS", "30"))
CATALOG = "gk"
KTABLES = ["t1", "t2", "t3"]  # namespace k: the driver's tables
CHECK = '[{ check = "not_null", column = "id" }]'
TABLES = "".join(f'[tables."{t}"]\nchecks = {CHECK}\n\n' for t in ("k.t1", "k.t2", "k.t3"))
TABLES += "".join(f'[tables."{ns}.{t}"]\nchecks = {CHECK}\n\n' for ns in ("shop", "fresh") for t in ("orders", "lines"))


def _file(folder: Path, name: str, ids: range, grp: int = 0) -> Path:
    path = folder / "landing" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "grp": pa.array([grp] * len(ids), pa.int64())}), path)
    return path


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Reader]:
    """One lakehouse: k.t1..t3 (the driver's) and shop.orders/lines, three rows each, made by one group run."""
    folder = tmp_path_factory.mktemp("together")
    cfg = write_config(folder, TABLES, catalog=CATALOG)
    specs = [f"{t}={_file(folder, f'seed_{t}.parquet', range(1, 4))}" for t in ("k.t1", "k.t2", "k.t3")]
    specs += [f"shop.{t}={_file(folder, f'seed_{t}.parquet', range(1, 4))}" for t in ("orders", "lines")]
    seeded = wap("run-tables", *specs, "--run-id", "seed", "--config", str(cfg))
    assert seeded.code == 0, seeded.text
    return folder, cfg, Reader(folder, CATALOG)


def _run_ids(reader: Reader, table: str) -> Counter[str]:
    """The runs main's snapshots carry: a snapshot's own wapflow.run-id, or for a cherry-pick made by Iceberg
    (it names its source-snapshot-id) the run id of the branch snapshot it copies."""
    tbl = reader.cat.load_table(table)
    out: Counter[str] = Counter()
    snap = tbl.current_snapshot()
    while snap is not None:
        props = dict(snap.summary.additional_properties) if snap.summary else {}
        if "wapflow.run-id" not in props and "source-snapshot-id" in props:
            source = tbl.snapshot_by_id(int(props["source-snapshot-id"]))
            props = dict(source.summary.additional_properties) if source and source.summary else {}
        if "wapflow.run-id" in props:
            out[props["wapflow.run-id"]] += 1
        snap = tbl.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    return out


# --- 1. the pointer reader under SIGKILLs ------------------------------------------------------------------------


class PointerReader(threading.Thread):
    """Every table's metadata_location in one SQL query, in a loop; each metadata JSON read for the groups on
    main (the `g<k>` of its snapshots' wapflow.run-id `g<k>-<i>`). A state whose tables hold different groups,
    a run id twice on one main, a group on the wrong table, or fewer groups than a state read before: a
    violation."""

    def __init__(self, db: Path, namespace: str, tables: list[str]) -> None:
        super().__init__(name="pointer-reader", daemon=True)
        self.db, self.namespace, self.tables = db, namespace, tables
        self.halt = threading.Event()
        self.reads = 0
        self.states: list[frozenset[int]] = []  # each new state read, in order
        self.violations: list[str] = []
        self._groups: dict[str, frozenset[int]] = {}  # metadata files never change: each read once

    def groups(self, location: str, position: int) -> frozenset[int]:
        if location not in self._groups:
            path = urlparse(location).path if location.startswith("file:") else location
            meta = json.loads(Path(path).read_text())
            snaps = {s["snapshot-id"]: s for s in meta.get("snapshots", [])}
            main = meta.get("refs", {}).get("main", {}).get("snapshot-id", meta.get("current-snapshot-id"))
            ids: list[str] = []
            while main is not None and main in snaps:
                rid = snaps[main].get("summary", {}).get("wapflow.run-id")
                if rid:
                    ids.append(rid)
                main = snaps[main].get("parent-snapshot-id")
            twice = [r for r, n in Counter(ids).items() if n > 1]
            if twice:
                self.violations.append(f"{location}: run ids twice on main: {twice}")
            found = [m for r in ids if (m := group_driver.GROUP_RUN.match(r))]
            wrong = [m.group(0) for m in found if int(m.group(2)) != position]
            if wrong:
                self.violations.append(f"{location}: runs of another table on main: {wrong}")
            self._groups[location] = frozenset(int(m.group(1)) for m in found)
        return self._groups[location]

    def read_once(self, con: sqlite3.Connection) -> None:
        rows = con.execute(
            "SELECT table_name, metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ?",
            (CATALOG, self.namespace),
        ).fetchall()
        where = dict(rows)
        if sorted(where) != sorted(self.tables):
            self.violations.append(f"tables read: {sorted(where)}")
            return
        state = {t: self.groups(where[t], i) for i, t in enumerate(self.tables, start=1)}
        self.reads += 1
        if len(set(state.values())) != 1:
            self.violations.append(f"torn state: { ({t: sorted(g) for t, g in state.items()}) }")
            return
        now = state[self.tables[0]]
        if self.states and not now >= self.states[-1]:
            self.violations.append(f"groups went back: {sorted(self.states[-1])} then {sorted(now)}")
        if not self.states or now != self.states[-1]:
            self.states.append(now)

    def run(self) -> None:
        con = sqlite3.connect(self.db, timeout=30, isolation_level=None)  # each SELECT its own read
        try:
            while not self.halt.is_set():
                try:
                    self.read_once(con)
                except FileNotFoundError as e:  # a pointer's file: never removed while a pointer names it
                    self.violations.append(f"metadata file of a pointer missing: {e}")
                time.sleep(0.002)
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.violations.append(f"reader failed: {e!r}")
        finally:
            con.close()


class ForkServer:
    """group_driver.py serve: each driver it forks is a new process, SIGKILLed by the test."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-P", group_driver.__file__, "serve", *args, str(log)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env(),
        )

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def start(self, crash_at: str = "") -> int:
        answer = self.ask(f"start {crash_at}".strip())
        assert answer.startswith("started "), answer
        return int(answer.split()[1])

    def reap(self, pid: int) -> int:
        return int(self.ask(f"reap {pid}").split()[1])

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.ask("quit")
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _lines_since(log: Path, offset: int) -> list[str]:
    with log.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace").splitlines()


def _wait_line(log: Path, offset: int, pattern: re.Pattern[str], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(pattern.match(ln) for ln in _lines_since(log, offset)):
            return True
        time.sleep(0.002)
    return False


PUBLISH_LINE = re.compile(r"^g\d+ publish$")
LIFE_LINE = re.compile(r"^life \d+ at g(\d+)$")


def test_a_reader_of_every_pointer_in_one_query_sees_all_or_nothing_while_the_publisher_is_killed(lake):
    folder, cfg, reader = lake
    rng = random.Random(SEED)
    print(f"group kill seed {SEED}, {KILLS} kills: WAP_GROUP_KILL_SEED={SEED} replays them")
    wh = folder / "lakehouse"
    db = wh / "catalog.db"
    log = folder / "driver.log"
    log.touch()
    args = [str(db), CATALOG, str(wh), "k", ",".join(KTABLES)]
    watcher = PointerReader(db, "k", KTABLES)
    watcher.start()
    server = ForkServer(args, log)
    landed: list[str] = []  # per kill: the driver's last line before it
    self_killed: list[str] = []
    try:
        for n in range(KILLS):
            if rng.random() < 0.15:
                # Besides: a driver that kills itself between the metadata files and the transaction, or just
                # before writing them (the moments a kill from outside seldom hits).
                point = rng.choice(["publish:group-staged", "publish:group-planned"])
                since = log.stat().st_size
                code = server.reap(server.start(point))
                life = _lines_since(log, since)
                assert code == -signal.SIGKILL and PUBLISH_LINE.match(life[-1]), (point, code, life[-20:])
                self_killed.append(point)
            since = log.stat().st_size
            pid = server.start()
            if rng.random() < 0.5:
                # Inside publish_group: planning, writing the metadata files, the one transaction, or just after.
                assert _wait_line(log, since, PUBLISH_LINE, timeout=30), (
                    _lines_since(log, since),
                    watcher.violations[:5],
                )
                time.sleep(rng.uniform(0.0, 0.06))
            else:
                assert _wait_line(log, since, LIFE_LINE, timeout=30), (_lines_since(log, since), watcher.violations[:5])
                time.sleep(rng.uniform(0.0, 0.8))
            os.kill(pid, signal.SIGKILL)
            code = server.reap(pid)
            life = _lines_since(log, since)
            assert code == -signal.SIGKILL, (n, code, life[-20:], watcher.violations[:5])
            landed.append(life[-1] if life else "(started)")
        final = subprocess.run(
            [sys.executable, "-P", group_driver.__file__, "run", *args, str(log), "2"],
            env=env(),
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert final.returncode == 0, (log.read_text()[-3000:], watcher.violations[:5])
    finally:
        server.close()
        watcher.halt.set()
        watcher.join(timeout=30)

    # Where the kills landed; for a driver killed after "g<k> publish", whether the next one found g<k> on main.
    lives: list[list[str]] = []
    for ln in log.read_text().splitlines():
        if LIFE_LINE.match(ln):
            lives.append([ln])
        elif lives:
            lives[-1].append(ln)
    after_publish = [
        (int(prev[-1].split()[0][1:]), int(m.group(1)))
        for prev, nxt in itertools.pairwise(lives)
        if PUBLISH_LINE.match(prev[-1]) and (m := LIFE_LINE.match(nxt[0]))
    ]
    committed = sum(1 for k, next_start in after_publish if next_start == k + 1)
    kinds = Counter(ln.split()[1] if ln.startswith("g") else ln.split()[0] for ln in landed)
    print(f"kills from outside after: {dict(kinds)}; self-inflicted at {dict(Counter(self_killed))}; "
          f"{len(after_publish)} inside publish_group, of which the commit had landed in {committed}; "
          f"reader: {watcher.reads} reads, {len(watcher.states)} states")  # fmt: skip
    assert len(landed) >= 50 or KILLS < 50
    assert watcher.violations == [], watcher.violations[:10]
    assert watcher.reads >= 100 and len(watcher.states) >= 3, (watcher.reads, watcher.states)
    assert after_publish, landed

    # Every group on every table's main exactly once, every row of it, no branch left (PyIceberg).
    last = max(watcher.states[-1])
    assert last >= 3 and watcher.states[-1] == frozenset(range(1, last + 1)), watcher.states[-1]
    counts = {}
    for i, t in enumerate(KTABLES, start=1):
        name = f"k.{t}"
        ids = _run_ids(reader, name)
        assert {r for r in ids if r.startswith("g")} == {f"g{k}-{i}" for k in range(1, last + 1)}, ids
        assert all(n == 1 for n in ids.values()), ids
        rows = reader.rows(name)
        per_group = Counter(r["grp"] for r in rows)
        assert per_group == Counter({0: 3} | {k: group_driver.rows_of(k, i) for k in range(1, last + 1)}), per_group
        assert reader.branches(name) == [], reader.branches(name)
        counts[name] = [len(rows), last + 1]
    # A fresh Spark session (Iceberg's own JdbcCatalog) reads what PyIceberg read.
    sql = " UNION ALL ".join(f"SELECT '{t}' AS t, count(*) AS n, count(DISTINCT grp) AS g FROM {t}" for t in counts)
    q = wap("query", sql, "--limit", "0", "--json", "--config", str(cfg))
    assert q.code == 0, q.text
    assert {r[0]: [r[1], r[2]] for r in q.doc["rows"]} == counts, (q.doc, counts)


# --- 2. SIGKILL at each crash point of `wap run-tables`, then resume -----------------------------------------------

# Every point a group run passes (wapflow.faults), in order, in two chains: each process resumes the run the
# previous one left and is itself killed at the next point; the last one completes it. The first chain on tables
# the run creates, the second on tables with rows, so the commit fast-forwards mains that hold something.
# (A chain costs a JVM start per point and one at the end: 12 `wap` processes where one run per point took 20.)
CHAINS = {
    "new tables": ["prepare", "write:table-created", "write:branch-created"],
    "tables with rows": ["write:appended", "audit", "publish:locked", "publish:group-planned",
                         "publish:group-staged", "publish:moved", "publish:recorded"],
}  # fmt: skip
AFTER_COMMIT = {"publish:moved", "publish:recorded"}


@pytest.mark.parametrize("chain", list(CHAINS))
def test_sigkill_at_each_step_of_a_group_run_then_the_same_command_publishes_it_exactly_once(lake, chain):
    folder, cfg, reader = lake
    n = list(CHAINS).index(chain)
    ns = "fresh" if chain == "new tables" else "shop"
    run_id = f"kill{n}"
    base = 100 * (n + 1)
    files = {
        t: _file(folder, f"{run_id}_{t}.parquet", range(base, base + 5 + j)) for j, t in enumerate(("orders", "lines"))
    }
    tables = [f"{ns}.{t}" for t in files]
    before = {t: reader.rows(t) if reader.exists(t) else [] for t in tables}
    heads = {t: reader.main(t) if reader.exists(t) else None for t in tables}
    # The second chain gives no --run-id: the same command resumes the interrupted run by its tables and files.
    by_files = chain == "tables with rows"
    named = [] if by_files else ["--run-id", run_id]
    command = ["run-tables", *(f"{ns}.{t}={f}" for t, f in files.items()), *named, "--config", str(cfg)]

    for k, point in enumerate(CHAINS[chain]):
        killed = wap(*command, WAP_CRASH_AT=point)
        assert killed.code == -signal.SIGKILL, (point, killed.text)
        assert "Traceback" not in killed.stderr, killed.stderr
        if by_files and k == 0:  # the run the first process began, as `wap runs` shows it
            listed = wap("runs", "--json", "--config", str(cfg))
            (run_id,) = [g["group_id"] for g in listed.doc["groups"] if g["status"] == "interrupted"]
        elif by_files:
            assert f"resuming run {run_id}" in killed.stderr, (point, killed.stderr[-2000:])
        on_main = {t: _run_ids(reader, t) if reader.exists(t) else Counter() for t in tables}
        if point in AFTER_COMMIT:  # every table holds the run, once
            assert [ids[f"{run_id}-{i}"] for i, ids in enumerate(on_main.values(), start=1)] == [1, 1], on_main
        else:  # no table changed on main (a new one may exist, without rows)
            assert {t: h for t, h in heads.items() if h is not None} == {
                t: reader.main(t) for t in tables if heads[t] is not None
            }, point
            assert {t: checksum(reader.rows(t) if reader.exists(t) else [], "id") for t in tables} == {
                t: checksum(rows, "id") for t, rows in before.items()
            }, point
            assert not any(r.startswith(run_id) for ids in on_main.values() for r in ids), (point, on_main)

    done = wap(*command, "--json")
    if by_files:  # killed after recording the publish: the run is done; its files are refused, naming it
        assert done.code == 2 and f"by run {run_id}-1" in done.text, done.text
    else:
        assert done.code == 0, done.text
        assert done.doc["status"] == "published" and done.doc["run_id"] == run_id, done.doc
    if CHAINS[chain][-1] in AFTER_COMMIT and not by_files:
        assert {r["published_via"] for r in done.doc["tables"]} == {"already"}, done.doc
    for i, (t, f) in enumerate(zip(tables, files.values(), strict=True), start=1):
        new = pq.read_table(f).to_pylist()
        assert checksum(reader.rows(t), "id") == checksum(before[t] + new, "id"), t
        assert _run_ids(reader, t)[f"{run_id}-{i}"] == 1, _run_ids(reader, t)
        assert reader.branches(t) == [], (t, reader.branches(t))


# --- 3. a one-table run into a group's table during the group's publish -------------------------------------------


def _open_locks(pid: int, folder: Path) -> int:
    """How many tables' publish-lock files the process has open: it holds or waits for each
    (wapflow.runs.locks). Only those: a process starting up also takes the run store's schema lock and the
    catalog's init lock in the same folder, which once made a one-table run look as if it waited to publish."""
    locks = folder / "lakehouse" / "locks"
    publish = {
        str(locks / (hashlib.sha256(f"publish:{t}".encode()).hexdigest()[:24] + ".lock"))
        for t in ("shop.orders", "shop.lines")
    }
    n = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            n += os.readlink(fd) in publish
        except OSError:
            continue
    return n


def _until(what: str, ok: Any, procs: list[subprocess.Popen[bytes]], timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while not ok():
        assert all(p.poll() is None for p in procs), f"a process ended while waiting until {what}"
        assert time.monotonic() < end, f"timed out waiting until {what}"
        time.sleep(0.05)


def _start(folder: Path, name: str, args: list[str], **extra: str) -> tuple[subprocess.Popen[bytes], list[IO[bytes]]]:
    """A `wap ... --json` process: its JSON in NAME.json, its progress in NAME.log."""
    files = [(folder / f"{name}.json").open("wb"), (folder / f"{name}.log").open("wb")]
    p = subprocess.Popen(
        [WAP, *args, "--json"], stdout=files[0], stderr=files[1], stdin=subprocess.DEVNULL, env=env(**extra)
    )
    return p, files


def _finish(p: subprocess.Popen[bytes], files: list[IO[bytes]], folder: Path, name: str) -> tuple[dict, str, int]:
    """Wait for the process to end, continuing it each time it stops itself again (WAP_PAUSE_AT stops it at every
    pass of the point: a group planned again passes publish:group-staged again). Its JSON, its progress and
    how often it stopped."""
    stops = 0
    end = time.monotonic() + 300
    try:
        while p.poll() is None and time.monotonic() < end:
            if stopped(p.pid):
                stops += 1
                os.kill(p.pid, signal.SIGCONT)
            time.sleep(0.05)
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait()
        for f in files:
            f.close()
    text = (folder / f"{name}.log").read_text(errors="replace")
    assert p.returncode == 0, (folder / f"{name}.json").read_text() + text[-4000:]
    return json.loads((folder / f"{name}.json").read_text()), text, stops


@pytest.mark.parametrize("first", ["group", "one-table"])
def test_a_one_table_run_into_a_groups_table_during_the_groups_publish_loses_no_row(lake, first):
    """group: the group stops with its metadata files written and both publish locks held; a `wap run` to
    shop.orders writes its branch (moving the table's pointer under the group's plan) and waits for the lock;
    the group goes on (its transaction finds orders moved, plans again) and publishes, then the one-table run.
    one-table: the one-table run stops holding orders' publish lock; the group writes, audits and waits for that
    lock; the one-table run publishes, then the group on the moved main of orders."""
    folder, cfg, reader = lake
    tag = "a" if first == "group" else "b"
    base = 10_000 * (1 + ["group", "one-table"].index(first))
    o = _file(folder, f"o_{tag}.parquet", range(base, base + 4))
    ln = _file(folder, f"l_{tag}.parquet", range(base, base + 6))
    solo_file = _file(folder, f"solo_{tag}.parquet", range(base + 500, base + 503))
    before = {t: reader.rows(t) for t in ("shop.orders", "shop.lines")}
    group_args = ["run-tables", f"shop.orders={o}", f"shop.lines={ln}", "--run-id", f"race_{tag}", "--config", str(cfg)]
    solo_args = ["run", "shop.orders", str(solo_file), "--run-id", f"solo_{tag}", "--config", str(cfg)]
    procs: list[tuple[subprocess.Popen[bytes], list[IO[bytes]]]] = []
    try:
        if first == "group":
            group = _start(folder, f"group_{tag}", group_args, WAP_PAUSE_AT="publish:group-staged")
            procs.append(group)
            _until("the group stops at publish:group-staged", lambda: stopped(group[0].pid), [group[0]])
            solo = _start(folder, f"solo_{tag}", solo_args)
            procs.append(solo)
            _until("the one-table run waits for the lock", lambda: _open_locks(solo[0].pid, folder) == 1, [solo[0]])
            time.sleep(1.0)
            assert solo[0].poll() is None  # still waiting: the group holds the lock
            paused = group
        else:
            solo = _start(folder, f"solo_{tag}", solo_args, WAP_PAUSE_AT="publish:locked")
            procs.append(solo)
            _until("the one-table run stops at publish:locked", lambda: stopped(solo[0].pid), [solo[0]])
            group = _start(folder, f"group_{tag}", group_args)
            procs.append(group)
            # It holds the lines lock and waits for the orders one (taken in one order: lines, orders).
            _until("the group waits for the lock", lambda: _open_locks(group[0].pid, folder) == 2, [group[0]])
            time.sleep(1.0)
            assert group[0].poll() is None
            paused = solo
        os.kill(paused[0].pid, signal.SIGCONT)
        group_doc, group_text, group_stops = _finish(*group, folder, f"group_{tag}")
        solo_doc, solo_text, _ = _finish(*solo, folder, f"solo_{tag}")
    finally:
        for p, files in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()
            for f in files:
                f.close()
    assert group_doc["status"] == "published" and solo_doc["status"] == "published", (group_doc, solo_doc)
    via = {"group": {r["published_via"] for r in group_doc["tables"]}, "solo": solo_doc["published_via"]}
    if first == "group":
        # The group's transaction found orders' pointer moved by the one-table run's branch: rolled back, planned
        # again (stopping again at the point), fast-forwarded; the one-table run then met a moved main.
        assert group_stops >= 1, group_text[-3000:]
        assert "a table moved during the commit: nothing published; planning again" in group_text
        assert via == {"group": {"fast_forward"}, "solo": "cherry_pick"}, via
    else:
        assert via == {"group": {"cherry_pick"}, "solo": "fast_forward"}, via
    expected = {
        "shop.orders": before["shop.orders"] + pq.read_table(o).to_pylist() + pq.read_table(solo_file).to_pylist(),
        "shop.lines": before["shop.lines"] + pq.read_table(ln).to_pylist(),
    }
    for t, rows in expected.items():
        assert checksum(reader.rows(t), "id") == checksum(rows, "id"), (t, group_text[-3000:], solo_text[-3000:])
        assert reader.branches(t) == [], (t, reader.branches(t))
    ids = _run_ids(reader, "shop.orders")
    assert ids[f"race_{tag}-1"] == 1 and ids[f"solo_{tag}"] == 1, ids
    assert _run_ids(reader, "shop.lines")[f"race_{tag}-2"] == 1
