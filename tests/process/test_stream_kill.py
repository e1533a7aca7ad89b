"""SIGKILL a streaming query's process (its driver JVM with it) while it writes batches through wapflow's stream
sink, at named crash points and at random moments, restart it from its checkpoint each time, and let it finish:
every input row is on main exactly once (read back by PyIceberg), each batch is one published run of the one
query id, and no run is left running.

The child is tests/support/stream_driver.py: Spark's file source over a folder of parquet files, one file per
batch, trigger availableNow. Each restart runs again the batch the kill interrupted (Spark's offset log names
its files), under the same run id (the query's id is in the checkpoint): a batch killed after main moved is
found published, one killed before is written again on its branch.

With publish_every=3 the kills land inside a run of three batches as well: each restart finishes the run its
staging folder sealed (by its run id), skips a batch the last done run holds, and adds the others to the run
still open; the last, not full, is published when the query ends.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import signal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support import killable
from support.cli_harness import Reader, write_config
from wapflow.config import load_config
from wapflow.runs.store import RunStore
from wapflow.streams import batch_run_id

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DRIVER = str(Path(__file__).resolve().parents[1] / "support" / "stream_driver.py")
FILES, ROWS = 8, 50
# Killed at the next point of the first batch that reaches it: main moved (the run store not told yet), the rows
# committed on the run's branch, the audit stored (nothing published).
CHAIN = ["publish:moved", "write:appended", "audit"]
# At random moments after the chain (WAP_STREAM_KILLS: more of them; each is one more driver JVM, ~10 s).
RANDOM_KILLS = int(os.environ.get("WAP_STREAM_KILLS", "1"))
# publish_every=3: killed once main carries the first run of three batches (the run store says so, the staging
# folder not yet), then while the next run's rows are on its branch (random moments: the test above).
EVERY = 3
EVERY_CHAIN = ["publish:recorded", "write:appended"]
SEED = 46
BATCH_LINE = re.compile(r"^stream batch (\d+): (\w+)")


def land(folder: Path, i: int) -> list[int]:
    ids = list(range(i * 1000, i * 1000 + ROWS))
    tmp = folder.parent / f".f{i}.parquet"
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "fare": pa.array([1.5] * ROWS, pa.float64())}), tmp)
    tmp.rename(folder / f"f{i:02d}.parquet")  # the file source needs files to land whole
    return ids


def run_driver(args: list[str], *, kill_after: float | None = None, **extra_env: str) -> tuple[int, list[str]]:
    """The driver, killed with its JVM `kill_after` seconds after its first batch line, if given."""
    return killable.run_driver([DRIVER, *args], kill_after=kill_after, start=BATCH_LINE, **extra_env)


def kill_and_restart(args: list[str], chain: list[str], random_kills: int) -> tuple[list[str], list[object]]:
    """The driver killed at each point of `chain`, then `random_kills` times at random moments, then run to its
    end: its last lines, and what each run did."""
    rng = random.Random(SEED)
    history: list[object] = []
    for point in chain:
        code, lines = run_driver(args, WAP_CRASH_AT=point)
        history.append((point, code, [m.group(0) for m in map(BATCH_LINE.match, lines) if m]))
        assert code == -signal.SIGKILL, (point, lines[-20:])
    for _ in range(random_kills):
        delay = rng.uniform(0.2, 3.0)
        code, lines = run_driver(args, kill_after=delay)
        history.append((f"random {delay:.2f}s", code, [m.group(0) for m in map(BATCH_LINE.match, lines) if m]))
        if code == 0:
            break  # every batch was done before the kill came
        assert code == -signal.SIGKILL, (delay, lines[-20:])
    code, lines = run_driver(args)
    assert code == 0, (history, lines[-30:])
    assert "Traceback" not in "\n".join(lines)
    return lines, history


def test_sigkill_a_stream_mid_batch_and_restart_from_its_checkpoint_exactly_once(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    expected = sorted(i for n in range(FILES) for i in land(landing, n))
    cfg = write_config(
        tmp_path,
        '[tables."k.events"]\n'
        'checks = [{ check = "not_null", column = "fare" }, { check = "unique", columns = ["id"] }]\n',
        catalog="skill",
    )
    args = [str(cfg), "k.events", str(landing), str(tmp_path / "chk")]
    lines, history = kill_and_restart(args, CHAIN, RANDOM_KILLS)

    reader = Reader(tmp_path, "skill")
    ids = sorted(r["id"] for r in reader.rows("k.events"))
    assert len(ids) == len(expected), (len(ids), len(expected), history)  # none lost, none twice
    assert ids == expected, history
    assert reader.branches("k.events") == []  # every batch's branch dropped at its publish

    # One query id from the first process to the last, one published run per batch (batch ids 0, 1, ...),
    # none left running.
    (query_id,) = {line.split()[1] for line in lines if line.startswith("query ")}
    store = RunStore(load_config(str(cfg)).run_store_url())
    runs = {r.run_id: r.status for r in store.list(table="k.events")}
    # (Spark may put two files in one batch when it plans a restarted query's next batch: at most one per file.)
    assert 0 < len(runs) <= FILES
    assert runs == {batch_run_id(query_id, b): "published" for b in range(len(runs))}, history
    on_main = [s.get("wapflow.run-id") for s in reader.summaries("k.events")]
    assert sorted(r for r in on_main if r) == sorted(runs), history


def test_sigkill_a_stream_publishing_every_three_batches_mid_run_exactly_once(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    expected = sorted(i for n in range(FILES) for i in land(landing, n))
    cfg = write_config(
        tmp_path,
        '[tables."k.events"]\n'
        'checks = [{ check = "not_null", column = "fare" }, { check = "unique", columns = ["id"] }]\n',
        catalog="skill3",
    )
    chk = tmp_path / "chk"
    lines, history = kill_and_restart([str(cfg), "k.events", str(landing), str(chk), str(EVERY)], EVERY_CHAIN, 0)

    reader = Reader(tmp_path, "skill3")
    ids = sorted(r["id"] for r in reader.rows("k.events"))
    assert len(ids) == len(expected), (len(ids), len(expected), history)  # none lost, none twice
    assert ids == expected, history
    assert reader.branches("k.events") == []

    # One run per three batches (fewer for the last, and where Spark put two files in one batch on a restart):
    # run ids s_<query>_<first batch>, the first at batch 0, each published once, each on main once.
    (query_id,) = {line.split()[1] for line in lines if line.startswith("query ")}
    store = RunStore(load_config(str(cfg)).run_store_url())
    runs = {r.run_id: r.status for r in store.list(table="k.events")}
    firsts = sorted(int(rid.rsplit("_", 1)[1]) for rid in runs)
    assert firsts[0] == 0 and all(b - a <= EVERY for a, b in itertools.pairwise(firsts)), (runs, history)
    assert runs == {batch_run_id(query_id, b): "published" for b in firsts}, history
    assert len(runs) <= -(-FILES // EVERY) + 1, (runs, history)
    summaries = [s for s in reader.summaries("k.events") if s.get("wapflow.run-id")]
    assert sorted(s["wapflow.run-id"] for s in summaries) == sorted(runs), history
    # Nothing left staged: the last run's batches were published when the query ended.
    staged = chk / "wapflow-staged" / query_id
    assert sorted(p.name for p in staged.iterdir() if not p.name.startswith("done=")) == [], history
