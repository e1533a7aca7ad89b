"""One policy for a commit that lost to another writer: refresh, wait, commit again, then give up with exit 5.

Every commit wapflow makes to table metadata (a branch created or dropped, main fast-forwarded, a cherry-pick,
files added or removed, a layout change, a maintenance rewrite, a group of tables published together) may
meet a concurrent commit: Iceberg's CommitFailedException, a busy SQLite catalog, PyIceberg's stale metadata
(wapflow.spark.errors.commit_conflict recognises them all). The caller's `fn` makes the commit from the
table's current state; `on_conflict` refreshes that state (a cached table, a reloaded one) before the next
attempt. Waits double from CONFLICT_FIRST_WAIT up to CONFLICT_MAX_WAIT; after the last attempt the conflict
is a CommitConflict (exit 5, retryable) naming what was being committed.

Any other exception, and any WapError (already a verdict), propagates at once: it is not a conflict.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from wapflow.errors import CommitConflict, WapError
from wapflow.spark import errors as spark_errors

T = TypeVar("T")

CONFLICT_ATTEMPTS = 5  # attempts in all, the first included
CONFLICT_FIRST_WAIT = 0.2  # seconds after the first conflict; doubling after each further one
CONFLICT_MAX_WAIT = 5.0


def backoff(attempt: int, *, first: float, cap: float) -> float:
    """Seconds to wait after failed attempt `attempt` (1, 2, ...): `first`, doubling, at most `cap`. The one
    doubling schedule: commit conflicts (conflict_wait), runs and alert deliveries (wapflow.pipeline.retry)."""
    return min(first * 2.0 ** (attempt - 1), cap)


def conflict_wait(attempt: int) -> float:
    """Seconds to wait after the `attempt`-th conflict: 0.2, 0.4, 0.8, 1.6, 3.2, then 5 s."""
    return backoff(attempt, first=CONFLICT_FIRST_WAIT, cap=CONFLICT_MAX_WAIT)


def retry_on_conflict(
    fn: Callable[[], T],
    *,
    what: str,
    on_conflict: Callable[[], object] | None = None,
    attempts: int = CONFLICT_ATTEMPTS,
    is_conflict: Callable[[BaseException], bool] = spark_errors.commit_conflict,
    hint: str = "nothing was committed by this attempt; run the command again",
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """`fn()`, made again while it fails with a commit conflict, at most `attempts` times in all.

    `what`: the commit, for the error ("fast-forwarding main of db.t to wap_x"); `on_conflict`: run after each
    conflict before the wait (refresh the table, count the conflict); `is_conflict`: what counts as one
    (wapflow.spark.errors.commit_conflict unless the caller knows more, e.g. PyIceberg's validation of a
    concurrent change); `sleep`: how to wait (an interruptible or durable sleep). Raises CommitConflict,
    chained to the last conflict, when every attempt conflicted."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    last: BaseException | None = None
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as e:
            if isinstance(e, WapError) or not is_conflict(e):
                raise
            last = e
        if attempt < attempts:
            if on_conflict is not None:
                on_conflict()
            sleep(conflict_wait(attempt))
    assert last is not None
    raise CommitConflict(
        f"{what} conflicted with other commits {attempts} times ({spark_errors.describe(last)})", hint=hint
    ) from last
