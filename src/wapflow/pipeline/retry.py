"""When a run that failed is run again, in one place for every loop that retries (`wap ingest`/`watch` in
this process, the durable workflow): what is retryable, how long to wait, how many attempts a source allows.

Only a failure the core classified as retryable (a commit conflict, throttling, a store or catalog that
could not be reached) is tried again: a blocked run or bad input would meet the same verdict. The wait
doubles from 1 s up to 30 s. How to wait is the caller's: `time.sleep` or a watcher's interruptible sleep in
a process, `DBOS.sleep` in a workflow (a durable sleep a recovered workflow does not sleep again).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from wapflow.config import SourceConfig
from wapflow.lakehouse import conflicts

MAX_DELAY = 30.0


def retryable(error: Mapping[str, Any] | None) -> bool:
    """A run's recorded error (RunState.record["error"], RunResult.error) says a retry can help."""
    return bool(error and error.get("retryable"))


def backoff(attempt: int, *, first: float = 1.0, cap: float = MAX_DELAY) -> float:
    """Seconds to wait after failed attempt `attempt`: first, doubling, at most cap (runs: 1, 2, 4, ... 30 s;
    alert deliveries: their own first wait and cap); commit conflicts use the same schedule from 0.2 s
    (wapflow.lakehouse.conflicts)."""
    return conflicts.backoff(attempt, first=first, cap=cap)


@dataclass(frozen=True)
class RetryPolicy:
    """Attempts allowed per batch and how to wait between them."""

    max_attempts: int
    sleep: Callable[[float], object]

    @classmethod
    def of_source(cls, src: SourceConfig, sleep: Callable[[float], object]) -> RetryPolicy:
        return cls(src.max_attempts, sleep)

    def again(self, error: Mapping[str, Any] | None, attempt: int) -> bool:
        """Attempt `attempt` failed with `error`: whether another attempt is due."""
        return retryable(error) and attempt < self.max_attempts

    def wait(self, attempt: int) -> None:
        """The backoff after failed attempt `attempt`, with the caller's sleep."""
        self.sleep(backoff(attempt))
