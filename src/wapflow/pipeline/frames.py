"""The DataFrames runs write (wapflow.write, wapflow.transaction), held in the process that gave them.

A run's state is JSON data; a DataFrame is not: the state says only that its batch is a DataFrame
(RunState.frame), and the DataFrame waits here under the run's id until the run ends. A run resumed in another
process (a durable workflow, `wap run --run-id`) has no DataFrame to write: it is told to run the job again,
which the run id keeps from publishing twice.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from wapflow.errors import UsageError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_FRAMES: dict[str, DataFrame] = {}
_STABLE: set[str] = set()  # run ids whose DataFrame was read once into Spark's storage (stable)
_LOCK = threading.Lock()


def hold(run_id: str, df: DataFrame) -> None:
    with _LOCK:
        _FRAMES[run_id] = df


def release(run_id: str) -> None:
    with _LOCK:
        _FRAMES.pop(run_id, None)
        _STABLE.discard(run_id)


def stable(run_id: str) -> DataFrame:
    """The run's DataFrame computed once and kept in Spark's block storage (memory, then disk), read from there
    by every later use. A merge or replace needs it: Spark 4.1 cannot plan a MERGE whose source view reads an
    Iceberg table ("No plan for TableReference", measured 2026-11-28), and the audit then reads the same rows the
    write applied, even from a source that would give others on a second read."""
    from pyspark.storagelevel import StorageLevel

    df = frame_of(run_id)
    with _LOCK:
        if run_id in _STABLE:
            return df
    kept = df.localCheckpoint(eager=False, storageLevel=StorageLevel.MEMORY_AND_DISK)
    with _LOCK:
        _FRAMES[run_id] = kept
        _STABLE.add(run_id)
    return kept


def frame_of(run_id: str) -> DataFrame:
    """The DataFrame run `run_id` writes; UsageError when this process was not given it."""
    with _LOCK:
        df = _FRAMES.get(run_id)
    if df is None:
        raise UsageError(
            f"run {run_id} writes a DataFrame, which lives only in the process that gave it",
            hint="run the job again with the same run id: what was published already is not published twice",
        )
    return df
