"""Progress of the Spark jobs inside one step (a write, an audit), for a bar a person can watch.

A `Meter` is what shows it (the CLI's is a Rich bar on a terminal; --json and pipes keep their plain lines
and get no meter). `watching(spark, meter, label)` polls Spark while the block runs: on a classic session the
driver's status store (tasks done of all, rows read so far, per stage), on Spark Connect the session's
progress handler (tasks and bytes; Connect reports no row counts). Nothing is shown for a block shorter than
`delay` seconds, so a small run prints exactly what it printed before.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Tick:
    """Where the block's Spark work stands: tasks over every stage seen so far, and what they read."""

    label: str
    tasks_done: int
    tasks: int
    rows: int | None  # rows read so far (classic Spark); None on Spark Connect
    bytes_read: int | None  # Spark Connect's measure instead of rows


class Meter(Protocol):
    def update(self, tick: Tick) -> None: ...

    def close(self) -> None: ...


class _Stages:
    """Per-stage figures, latest wins (a stage's counts only grow); summed for the tick."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[int, int, int]] = {}  # stage id -> (done, total, rows or bytes)
        self.lock = threading.Lock()

    def put(self, stage: int, done: int, total: int, amount: int) -> None:
        with self.lock:
            self.seen[stage] = (done, total, amount)

    def sums(self) -> tuple[int, int, int]:
        with self.lock:
            vals = list(self.seen.values())
        return sum(v[0] for v in vals), sum(v[1] for v in vals), sum(v[2] for v in vals)


def _poll_classic(spark: SparkSession, stages: _Stages) -> None:
    """Active stages from the driver's status store (the store Spark's UI reads; present with the UI off)."""
    jsc = spark.sparkContext._jsc
    assert jsc is not None
    active = jsc.sc().statusStore().activeStages()
    for i in range(active.size()):
        s = active.apply(i)
        stages.put(int(s.stageId()), int(s.numCompleteTasks()), int(s.numTasks()), int(s.inputRecords()))


def _final_classic(spark: SparkSession, stages: _Stages) -> None:
    """Stages that finished between two polls: their last counts, so the bar ends at 100%."""
    jsc = spark.sparkContext._jsc
    assert jsc is not None
    store = jsc.sc().statusStore()
    for sid in list(stages.seen):
        with contextlib.suppress(Exception):  # a stage the store has dropped keeps its last counts
            s = store.lastStageAttempt(sid)
            stages.put(sid, int(s.numCompleteTasks()), int(s.numTasks()), int(s.inputRecords()))


@contextlib.contextmanager
def watching(
    spark: SparkSession, meter: Meter | None, label: str, *, delay: float = 2.0, every: float = 0.25
) -> Iterator[None]:
    """Show the block's Spark progress on `meter` once it has run for `delay` seconds."""
    if meter is None:
        yield
        return
    from wapflow.spark.kind import is_connect

    stages = _Stages()
    connect = is_connect(spark)
    stop = threading.Event()
    shown = threading.Event()

    def tick() -> None:
        done, total, amount = stages.sums()
        if total:
            meter.update(Tick(label, done, total, None if connect else amount, amount if connect else None))
            shown.set()

    handler: Any = None
    if connect:

        def handler(stages_: Any, inflight_tasks: int, operation_id: str, done: bool) -> None:
            for s in stages_:
                stages.put(int(s.stage_id), int(s.num_completed_tasks), int(s.num_tasks), int(s.num_bytes_read))

        spark.registerProgressHandler(handler)  # Spark Connect sessions only

    def loop() -> None:
        if stop.wait(delay):
            return
        while not stop.is_set():
            if not connect:
                with contextlib.suppress(Exception):  # progress is best effort: never fail the step
                    _poll_classic(spark, stages)
            tick()
            stop.wait(every)

    thread = threading.Thread(target=loop, name="wapflow-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        if connect:
            spark.removeProgressHandler(handler)
        if shown.is_set():
            if not connect:
                with contextlib.suppress(Exception):
                    _final_classic(spark, stages)
            tick()
        meter.close()
