"""wapflow's shared words, each defined here once: run statuses, check statuses, file states, review decisions,
alert events, the names wapflow gives branches and tables, and the one duration grammar.

A leaf: it imports nothing of wapflow, so any layer may use it. The modules that used to define these words
(pipeline.state, runs.ledger, runs.store, config, alerts.event, audit.report, audit.checktype) import them
from here, and tests/unit/test_vocabulary.py fails when one is defined anywhere else again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, get_args

# --- Runs -------------------------------------------------------------------------------------------------
# A run's outcome as people and exit codes see it; "running" until publish (or a failure) ends it.
# awaiting_review: audited and passed, held before publish by the table's `review` setting until `wap approve`
# (then running again, and published or blocked) or `wap reject` (rejected: its branch dropped).
RunStatus = Literal["running", "published", "blocked", "failed", "awaiting_review", "rejected"]
RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)
# The statuses at which a run's steps stop (a replayed later step changes nothing).
HALTED: frozenset[str] = frozenset(RUN_STATUSES) - {"running"}
# The one status `wap approve` and `wap reject` act on, and the status `wap reject` leaves.
AWAITING_REVIEW: Final = "awaiting_review"
RUN_REJECTED: Final = "rejected"
# The status of runs that are a table's history (and of backfilled rows, which have no run record).
PUBLISHED: Final = "published"
# The one blocked-run status a person may still publish (`wap approve` of a blocked run: its failed verdicts are
# only history-based judgements it overrides, OVERRIDABLE_CHECKS).
RUN_BLOCKED: Final = "blocked"
# Check types whose verdict judges a batch against the table's own history (a band learnt from past runs): a
# person who knows the day was real may override them. Never a rule about the rows themselves (not_null, ...).
OVERRIDABLE_CHECKS: frozenset[str] = frozenset({"anomaly", "volume"})
# Check types whose pass is the producer's word that the batch is what it sent (its manifest's rows and sums):
# a run they passed that only the history blocked is a real day, learnt at once when nobody decides.
VOUCHING_CHECKS: frozenset[str] = frozenset({"control_totals"})


def blocked_by_history_only(checks: Iterable[Mapping[str, Any]]) -> bool:
    """A run's checks (its record's) failed, and every one that failed judged the batch against the table's
    history (OVERRIDABLE_CHECKS): the batch broke no rule about its rows, it only looked unlike earlier ones.
    Such a run is what `wap approve` may publish, and what the metric history learns from when nobody decides
    (wapflow.runs.metrics: a new level seen again and again is learnt, not blocked for ever)."""
    failed = [c for c in checks if c.get("status") == "failed"]
    return bool(failed) and all(c.get("check") in OVERRIDABLE_CHECKS for c in failed)


# The batch metrics a producer's totals pin down: its rows, and a column's sum (and so its mean) where the
# vouching check compared that column's sum (its record's `columns`).
VOUCHED_METRICS: frozenset[str] = frozenset({"row_count"})
VOUCHED_COLUMN_METRICS: frozenset[str] = frozenset({"sum", "mean"})


def vouched_for(checks: Iterable[Mapping[str, Any]], metric: str, column: str = "") -> bool:
    """A check of the run's record read what its producer declared and agreed (VOUCHING_CHECKS passed) on this
    metric of the batch: its rows, or the sum of this column (a category's values or a null fraction it never
    saw)."""
    for c in checks:
        if c.get("check") not in VOUCHING_CHECKS or c.get("status") != "passed":
            continue
        cols = {str(x).lower() for x in c.get("columns") or []}
        if metric in VOUCHED_METRICS or (metric in VOUCHED_COLUMN_METRICS and column.lower() in cols):
            return True
    return False


# The statuses a run ends at that no later step changes: a retried task with the same run id would only read
# them back, so an orchestrator's retry of one of these is a new run.
FINAL_STATUSES: frozenset[str] = frozenset({"blocked", "rejected", PUBLISHED})
# A run whose audit said no, or that failed, may keep its branch for inspection (`wap maintain` drops it later).
KEPT_STATUSES: tuple[str, ...] = ("blocked", "failed")
# In a run over several tables, the error of a table that did not fail itself names the table that failed the
# run under this key (its own message says only "not published: ...").
FAILED_WITH: Final = "failed_with"

# Statuses a run is shown with that no step records as its outcome: a run recorded as running whose process is
# gone (interrupted), and a blocked run whose branch was dropped since (discarded: `wap discard`, an ingest's split).
DerivedStatus = Literal["interrupted", "discarded"]
DERIVED_STATUSES: tuple[str, ...] = get_args(DerivedStatus)
INTERRUPTED: Final = "interrupted"
DISCARDED: Final = "discarded"
# A run over several tables shown as one: its status when its tables' differ (one interrupted, one since taken
# off main by a revert...), the first of these that applies.
GROUP_STATUS_ORDER: tuple[str, ...] = (
    INTERRUPTED,
    "running",
    "failed",
    "blocked",
    AWAITING_REVIEW,
    "rejected",
    DISCARDED,
    "reverted",
)

# A person's decision on a run held for review (the run store's `review`).
Decision = Literal["approved", "rejected"]
APPROVED: Final = "approved"
REJECTED: Final = "rejected"

# --- Checks -----------------------------------------------------------------------------------------------
# quarantined: a row-level error check whose failing rows went to the quarantine table.
CheckStatus = Literal["passed", "failed", "warned", "quarantined"]
CHECK_STATUSES: tuple[str, ...] = get_args(CheckStatus)

# --- Files (the ledger) -----------------------------------------------------------------------------------
# pending (seen, not yet run) -> claimed (by a run) -> published | blocked | failed | awaiting_review (then
# published, rejected, or pending again) | skipped (`wap skip`) | reverted (`wap revert`).
FileState = Literal[
    "pending", "claimed", "published", "blocked", "failed", "skipped", "reverted", "awaiting_review", "rejected"
]
FILE_STATES: tuple[str, ...] = get_args(FileState)
# A file in one of these states is done: listing it again does nothing until `wap retry` (or, awaiting review,
# until `wap approve` or `wap reject` decides its run).
SETTLED: frozenset[str] = frozenset(FILE_STATES) - {"pending", "claimed"}
# What `wap retry` puts back in line: files whose outcome someone may want to change.
RETRYABLE: tuple[str, ...] = ("blocked", "failed", "skipped", "reverted")

# --- Alerts -----------------------------------------------------------------------------------------------
# Events an alert sink can be sent (docs/guides/alerts.md); a sink without `events` gets all of them.
AlertEventName = Literal[
    "blocked",  # a run's audit blocked it
    "failed",  # a run failed terminally (not a transient error a retry may clear)
    "retries_exhausted",  # the outer loop gave up on a batch after max_attempts transient failures
    "quarantine_rate",  # a published run quarantined more than [alerts] quarantine_rate_above of its rows
    "file_failed",  # a file is `failed` in the ledger
    "branch_kept",  # a kept branch is older than [alerts] branch_kept_days (`wap alerts check`)
    "recovered",  # a run left by a dead process was resumed
    "maintenance_failed",  # an action of `wap maintain` (or of `wap watch`'s maintenance) failed on a table
    # a run is held for review (the table's `review`), with its warned checks, what publishing would change and
    # the approve / reject commands; sent again once per `review_timeout` while it waits (on_review_timeout = "alert")
    "awaiting_review",
    # a held run rejected by wapflow because nobody decided within `review_timeout` (on_review_timeout = "reject")
    "review_expired",
]
ALERT_EVENTS: tuple[str, ...] = get_args(AlertEventName)
REVIEW_EVENT: Final = "awaiting_review"
REVIEW_EXPIRED_EVENT: Final = "review_expired"
TEST_ALERT_EVENT: Final = "test"  # `wap alerts test`: sent to every sink, whatever its `events`
# Each event as an alert titles it: one title per event, and none for a word that is not one.
ALERT_TITLES: Final[dict[str, str]] = {
    "blocked": "Run blocked by its audit",
    "failed": "Run failed",
    "retries_exhausted": "Retries exhausted",
    "quarantine_rate": "Quarantine rate above threshold",
    "file_failed": "File failed",
    "branch_kept": "Branch kept too long",
    "recovered": "Recovered after a crash",
    "maintenance_failed": "Table maintenance failed",
    "awaiting_review": "Run awaiting review",
    "review_expired": "Run rejected: its review timed out",
    TEST_ALERT_EVENT: "Test alert",
}
if set(ALERT_TITLES) != {*ALERT_EVENTS, TEST_ALERT_EVENT}:
    raise RuntimeError(
        f"alert titles and events differ: {sorted(set(ALERT_TITLES) ^ {*ALERT_EVENTS, TEST_ALERT_EVENT})}"
    )

# --- Deliveries (an alert to a sink, a lineage event to its receiver) --------------------------------------
# pending: claimed by a process to send (perhaps sent: never sent again); sent: the sink answered 2xx; failed: it
# answered an error, or nothing in time after an answer was possible (sent again by `wap alerts resend`).
DeliveryState = Literal["pending", "sent", "failed"]
DELIVERY_STATES: tuple[str, ...] = get_args(DeliveryState)
DELIVERY_PENDING: Final = "pending"
DELIVERY_SENT: Final = "sent"
DELIVERY_FAILED: Final = "failed"

# Every word above: what tests/unit/test_vocabulary.py looks for elsewhere.
TERMS: frozenset[str] = frozenset(
    RUN_STATUSES + DERIVED_STATUSES + CHECK_STATUSES + FILE_STATES + ALERT_EVENTS + DELIVERY_STATES + get_args(Decision)
)

# --- Names wapflow gives --------------------------------------------------------------------------------
RUN_BRANCH_PREFIX: Final = "wap_"  # a run's branch: wap_<run id>, unless the run names its own
MAINTAIN_BRANCH_PREFIX: Final = "wap_maintain_"  # the compaction branch of one `wap maintain` pass
QUARANTINE_SUFFIX: Final = "__quarantine"  # <table>__quarantine: rows failing row-level error checks
STAGING_INFIX: Final = "__wap_"  # <table>__wap_<run id>: a batch with new columns, staged until publish


# The pipeline engine a run's rows were written by, when not wapflow's own write (RunState.written_by).
ENGINE_SDP = "sdp"  # Spark Declarative Pipelines (`wap pipelines run`)


def run_branch(run_id: str) -> str:
    """The branch a run writes to when it names none."""
    return f"{RUN_BRANCH_PREFIX}{run_id}"


def quarantine_table_name(table: str) -> str:
    """The quarantine table of a table (its bare name, without namespace)."""
    return f"{table}{QUARANTINE_SUFFIX}"


def table_of_quarantine(table: str) -> str:
    """The table whose quarantine `table` is, or `table` itself: a quarantine table's runs, settings and
    format are its table's."""
    return table.removesuffix(QUARANTINE_SUFFIX)


def staging_table_name(table: str, run_id: str) -> str:
    """Where a run's batch waits under schema = "add_columns" until publish (a bare table name; a group member's
    run id, `<run id>-<n>`, with an underscore for the dash, so the name is a plain identifier)."""
    return f"{table}{STAGING_INFIX}{run_id.replace('-', '_')}"


# --- Durations ----------------------------------------------------------------------------------------------
# One grammar for every duration in wap.toml and in checks (docs/guides/configuration.md#durations): a number
# and a unit, several run together ("1h30m"), or a plain number of seconds. Case and spaces do not matter.
DURATION_UNITS: dict[str, float] = {
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}
# Longer units first, so "min" and "ms" are not read as "m".
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|min|sec|s|m|h|d|w)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def parse_duration(value: str | float) -> float:
    """Seconds of "90s", "30m", "1h30m", "7d", "2w", "500ms" or a plain number of seconds; ValueError otherwise."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{value!r} is negative")
        return float(value)
    text = str(value).strip().lower().replace(" ", "")
    if _NUMBER.fullmatch(text):
        return float(text)
    parts = _DURATION_PART.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(
            f"{value!r} is not a duration: a number and a unit (ms, s, m, h, d, w), e.g. 90s, 30m, 1h30m, 7d, "
            "or a plain number of seconds"
        )
    return sum(float(n) * DURATION_UNITS[u] for n, u in parts)


def span_text(seconds: float) -> str:
    """A duration in the grammar above, in its largest whole unit: 30d, 36h, 90m, 45s (2.5s as it is)."""
    for unit in ("w", "d", "h", "m"):
        size = DURATION_UNITS[unit]
        if seconds >= size and float(seconds / size).is_integer():
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:g}s"
