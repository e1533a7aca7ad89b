"""Takeovers between workers: two `wap watch` workers and a `wap ingest` on one source, one of them SIGKILLed at
random moments inside each step of a batch (write, audit, publish, the ledger's settle), restarted, the others
taking over what it left. At the end every landed file is on main exactly once (rows and a checksum per file, read
by PyIceberg), no branch is left, the ledger is all terminal and says `published` for every file, no run is left
`running`, and no worker ever called a state wapflow itself left "a bug".

Seeded: every seed prints itself and its kills, so a failure is replayed with WAP_TAKEOVER_SEEDS=<seed>.
WAP_TAKEOVER_KILLS sets the kills per seed before the last one, which is for good (default 1, with the one default
seed: 2 kills, one restarted and taken over beside an ingest, one for good; with 2 it took 120 s of CI's worker
time). Each kill costs a worker's restart, a JVM start: seed 11 alone took 162-223 s of the suite's worker time on
2026-12-03, seed 12 with 4 kills 67-136 s, and the suite must stay within CI's 40 minutes;
WAP_TAKEOVER_SEEDS=11,12,13 WAP_TAKEOVER_KILLS=6 runs 21 kills, as on 2026-12-02.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pyarrow.parquet as pq
import pytest

from support.cli_harness import WAP, Reader, checksum, env, wap, write_config
from support.data import write_parquet
from wapflow.demo.generate import generate_trips

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SEEDS = [int(s) for s in os.environ.get("WAP_TAKEOVER_SEEDS", "12").split(",")]
KILLS = int(os.environ.get("WAP_TAKEOVER_KILLS", "1"))

# A step as a worker's log shows it starting (wapflow.outer and the steps print these lines).
STEPS = {
    "write": ("writing to branch", "rewriting the rows", "reading "),
    "audit": ("auditing ",),
    "publish": ("publishing branch",),
    "settle": (": published (",),
}


@dataclass
class Worker:
    """A `wap watch` process of one worker name, its output appended to one log across restarts."""

    name: str
    cfg: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    starts: int = 0
    started_at: int = 0  # the log's size when the current process started
    kills: list[str] = field(default_factory=list)

    def start(self) -> None:
        self.started_at = self.size()
        self.log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [WAP, "watch", "--config", str(self.cfg), "--worker", self.name],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env(),
        )
        self.starts += 1

    def ready(self) -> bool:
        """The current process is watching (its start line is in the log since it started)."""
        with self.log_path.open("rb") as f:
            f.seek(self.started_at)
            return b"watching days" in f.read()

    def size(self) -> int:
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def wait_for(self, words: tuple[str, ...], since: int, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.log_path.open("rb") as f:
                f.seek(since)
                text = f.read().decode(errors="replace")
            if any(w in text for w in words):
                return True
            if self.proc is not None and self.proc.poll() is not None:
                return False
            time.sleep(0.02)
        return False

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.close()

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=240)
        self.close()
        return code

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")


def _land(landing: Path, n: int, files: list[Path]) -> None:
    """`n` new files land as writers should: written under a hidden name, renamed into place."""
    for i in range(len(files), len(files) + n):
        tmp = landing / f".day{i:03d}.tmp"
        write_parquet(tmp, generate_trips(400 + 37 * (i % 7), start_id=1 + 100_000 * i, seed=i))
        final = landing / f"day{i:03d}.parquet"
        os.rename(tmp, final)
        files.append(final)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_killed_workers_batches_are_finished_by_the_others_exactly_once(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    print(f"takeover seed {seed}: WAP_TAKEOVER_SEEDS={seed} replays it")
    landing = tmp_path / "landing"
    landing.mkdir()
    cfg = write_config(
        tmp_path,
        '[tables."k.days"]\nchecks = [{ check = "not_null", column = "passenger_count" }, '
        '{ check = "unique", columns = ["trip_id"] }]\n\n'
        f'[sources.days]\ntable = "k.days"\nlocation = "{landing}"\nsettle_seconds = 0\nmax_files_per_run = 2\n',
        catalog=f"tk{seed}",
    )
    files: list[Path] = []
    workers = {n: Worker(n, cfg, tmp_path / f"{n}.log") for n in ("A", "B")}
    everyone = dict(workers)
    try:
        for w in workers.values():
            w.start()
        for w in workers.values():
            assert w.wait_for(("watching days",), 0, timeout=120), w.text()
        ingest_at = rng.randrange(KILLS)
        for k in range(KILLS):
            # The victim is a worker that is up; the one killed before restarts meanwhile (a JVM start), so
            # a kill costs about one batch, and the live worker always has a dead one's batch to take over.
            up = [w for w in workers.values() if w.ready()]
            if not up:
                assert any(w.wait_for(("watching days",), w.started_at, timeout=120) for w in workers.values())
                up = [w for w in workers.values() if w.ready()]
            victim = rng.choice(up)
            step = rng.choice(list(STEPS))
            since = victim.size()
            _land(landing, 2 + rng.randrange(2), files)
            hit = victim.wait_for(STEPS[step], since, timeout=60)
            delay = rng.uniform(0.0, 0.8)
            time.sleep(delay)
            victim.kill()
            victim.kills.append(f"{step}+{delay:.2f}s" if hit else "idle")
            print(f"kill {k}: worker {victim.name} {'in ' + step if hit else 'idle'} +{delay:.2f}s", flush=True)
            if k == ingest_at:
                # A one-off ingest takes over whatever the killed worker left, beside the live worker.
                done = wap("ingest", "days", "--config", str(cfg), "--no-engine", timeout=300)
                assert done.code in (0, 1), done.text
                assert "bug in wapflow" not in done.text, done.text
            victim.start()
        for w in workers.values():
            assert w.wait_for(("watching days",), w.started_at, timeout=120), w.text()
        # The last kill is for good: the worker that is left finishes what the dead one held, with no restart
        # of a worker of that name to resume its durable workflow.
        gone = workers[rng.choice("AB")]
        step = rng.choice(list(STEPS))
        since = gone.size()
        _land(landing, 2, files)
        hit = gone.wait_for(STEPS[step], since, timeout=60)
        time.sleep(rng.uniform(0.0, 0.8))
        gone.kill()
        print(f"kill for good: worker {gone.name} {'in ' + step if hit else 'idle'}", flush=True)
        del workers[gone.name]
        _land(landing, 1, files)
        # The live worker drains the source; then it stops cleanly.
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            rows = wap("files", "days", "--config", str(cfg), "--json").doc["files"]
            if len(rows) == len(files) and all(r["state"] in ("published", "blocked", "failed") for r in rows):
                break
            time.sleep(1)
        for w in workers.values():
            assert w.stop() == 0, w.text()
    finally:
        for w in everyone.values():
            if w.proc is not None and w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
            w.close()
    logs = {n: w.text() for n, w in everyone.items()}
    print(f"kills: A {everyone['A'].kills}, B {everyone['B'].kills}")
    for name, text in logs.items():
        assert "bug in wapflow" not in text, (name, text[-4000:])
        assert "Traceback" not in text, (name, text[-4000:])

    rows = wap("files", "days", "--config", str(cfg), "--json").doc["files"]
    assert sorted(Path(r["uri"]).name for r in rows) == sorted(f.name for f in files)
    bad = [(Path(r["uri"]).name, r["state"], r.get("error")) for r in rows if r["state"] != "published"]
    assert bad == [], (bad, logs["A"][-3000:], logs["B"][-3000:])

    reader = Reader(tmp_path, f"tk{seed}")
    on_main = reader.rows("k.days")
    expected = [r for f in files for r in pq.read_table(f).to_pylist()]
    assert checksum(on_main, "trip_id") == checksum(expected, "trip_id")  # every row once
    # And per file: each file's rows, by its id range, exactly once.
    by_file: dict[int, list[dict]] = {}
    for r in on_main:
        by_file.setdefault(int(r["trip_id"]) // 100_000, []).append(r)
    for f in files:
        i = int(f.stem[3:])
        assert checksum(by_file.get(i, []), "trip_id") == checksum(pq.read_table(f).to_pylist(), "trip_id"), f.name
    assert reader.branches("k.days") == []
    runs = wap("runs", "--config", str(cfg), "--json").doc["runs"]
    assert runs and {r["status"] for r in runs} == {"published"}, [(r["run_id"], r["status"]) for r in runs]
