"""Rows of `wap runs` and `wap report`, read from the run store alone.

No Spark and no JVM: a dashboard (or `wap runs` on a laptop without Java) reads runs straight from the
store. Keep it that way: nothing here may import pyspark or wapflow.lakehouse (tests/test_layers.py checks).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypedDict

from wapflow.audit.anomaly import CHANGE_METRICS
from wapflow.errors import NotFound, did_you_mean
from wapflow.runs.metrics import PUBLISHED
from wapflow.runs.store import RunRecord, RunStore

AWAITING_REVIEW = "awaiting_review"  # wapflow.pipeline.state's status (that module loads the lakehouse)


class RunRow(TypedDict):
    """One line of `wap runs` (and one element of its JSON `runs` list)."""

    run_id: str
    table: str
    status: str  # the stored status, or "interrupted" when its process is gone
    resume: str | None  # the command that completes an interrupted run exactly once
    rows: int | None
    branch: str | None  # only while the branch is kept for inspection
    failed_checks: list[str]
    error: str | None
    reason: str | None  # why a run failed, in one short line (its error's first line, cut at REASON_CHARS)
    started_at: str
    review: str | None  # awaiting / approved by WHO / rejected by WHO (a run held for review), else None


class RunReport(TypedDict):
    """Everything `wap report RUN_ID` shows (and its JSON document)."""

    run_id: str
    table: str
    status: str
    resume: str | None
    branch: str | None
    branch_kept: bool
    files: list[str]
    rows_written: int | None
    snapshot_id: int | None
    checks: list[dict[str, Any]]
    error: dict[str, Any] | None
    timings: dict[str, float]
    started_at: datetime
    finished_at: datetime | None
    review: Review | None  # a run held for review: awaiting, or who decided it, why and when
    would_change: str | None  # a run not on main that could still be: what publishing it would change (wap diff)
    change_keys: ChangeKeysDoc | None  # a merge's sample keys per kind of change (None: not a merge, or older)


class Review(TypedDict):
    """A run held for review: the decision (None while it awaits one), who made it, why, when."""

    decision: str | None  # approved | rejected | None (awaiting review)
    by: str | None
    reason: str | None
    at: datetime | None


def _resume(rec: RunRecord) -> str | None:
    return rec.resume_command() if rec.interrupted else None


_CALL = re.compile(r"^(?P<type>[A-Za-z_][A-Za-z0-9_]*)\((?P<args>.*?)\)(?P<rest>.*)$", re.DOTALL)

_NUMBER = re.compile(r"^(None-?[0-9.eE+-]+|-?[0-9.eE+-]+None)$")  # one bound given, one not


def shown_check_name(name: str) -> str:
    """A check's name with only the parameters that were given. Runs recorded before names left out unset
    bounds say `row_count(1, None)` or `between(fare, None, 100)`: shown as a run names them today
    (`row_count(min=1)`, `between(fare, max=100)`, wapflow.audit.checktype.range_name)."""
    m = _CALL.match(name)
    if m is None or "None" not in m["args"].split(", "):
        return name
    args = m["args"].split(", ")
    if len(args) >= 2 and (args[-2] == "None") != (args[-1] == "None") and _NUMBER.match(args[-2] + args[-1]):
        lo, hi = args[-2:]
        args[-2:] = [f"max={hi}" if lo == "None" else f"min={lo}"]
    args = [a for a in args if a != "None"]
    return f"{m['type']}({', '.join(args)}){m['rest']}"


def shown_checks(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's recorded check results with their names as people read them (shown_check_name)."""
    return [{**c, "name": shown_check_name(str(c["name"]))} if "name" in c else dict(c) for c in checks]


def failed_checks(rec: RunRecord) -> list[str]:
    """Names of the checks that failed (blocked the publish) in a run."""
    return [shown_check_name(str(c["name"])) for c in rec.checks if c.get("status") == "failed"]


def review_of(rec: RunRecord) -> Review | None:
    """The review of a run held for it (None for a run its table never held)."""
    if rec.review is None and rec.status != AWAITING_REVIEW:
        return None
    return {"decision": rec.review, "by": rec.review_by, "reason": rec.review_reason, "at": rec.reviewed_at}


def review_line(rec: RunRecord) -> str | None:
    """The review in a few words, for one line of the runs list."""
    review = review_of(rec)
    if review is None:
        return None
    if review["decision"] is None:
        return "awaiting"
    return f"{review['decision']} by {review['by']}: {review['reason']}"


REASON_CHARS = 100


def failure_reason(rec: RunRecord) -> str | None:
    """A failed run's error in one short line for the runs list (`wap report` shows it whole, with its hint):
    the message's first line, cut at REASON_CHARS. None for a run without an error."""
    message = str((rec.error or {}).get("message") or "").strip()
    if not message:
        return None
    line = message.splitlines()[0].strip()
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 1].rstrip() + "…"


def run_row(rec: RunRecord) -> RunRow:
    """A run as one line of the runs list."""
    return {
        "run_id": rec.run_id,
        "table": rec.table_name,
        "status": rec.shown_status,
        "resume": _resume(rec),
        "rows": rec.rows_written,
        "branch": rec.branch if rec.branch_kept else None,
        "failed_checks": failed_checks(rec),
        "error": (rec.error or {}).get("message"),
        "reason": failure_reason(rec),
        "started_at": rec.started_at.isoformat(sep=" ", timespec="seconds"),
        "review": review_line(rec),
    }


def list_runs(store: RunStore, table: str | None = None, limit: int = 20) -> list[RunRow]:
    """The most recent runs, newest first, optionally of one table."""
    return [run_row(r) for r in store.list(table, limit)]


def find_run(store: RunStore, run_id: str) -> RunRecord:
    """One run's record; NotFound (with near matches among recent runs) if the store has none."""
    rec = store.get(run_id)
    if rec is None:
        recent = [r.run_id for r in store.list(limit=50)]
        raise NotFound(
            f"no run {run_id} in the run store{did_you_mean(run_id, recent)}", hint="list runs with `wap runs`"
        )
    return rec


class RowsDoc(TypedDict):
    """What publishing does to main's rows (a merge's and replace's figures from its commit's summary)."""

    added: int
    updated: int
    deleted: int
    replaced: int
    main_rows: int  # main's rows now (its live data files' records)


def run_rows(rec: RunRecord, batch: Mapping[tuple[str, str], float | str], main_rows: int) -> RowsDoc:
    """The run's change: its audit's `changes` line (a merge or replace), else its change metrics, else the
    rows it wrote (an append adds them all)."""
    change = next((c.get("observed") for c in rec.checks if c.get("check") == "changes"), None)
    if isinstance(change, dict):
        figures = {
            k: int(change.get(k) or 0) for k in ("rows_inserted", "rows_updated", "rows_deleted", "rows_replaced")
        }
    elif any((m, "") in batch for m in CHANGE_METRICS):
        figures = {m: int(float(batch.get((m, ""), 0) or 0)) for m in CHANGE_METRICS}
    else:
        written = rec.rows_written if rec.rows_written is not None else batch.get(("row_count", ""), 0)
        figures = {"rows_inserted": int(float(written or 0))}
    return {
        "added": figures.get("rows_inserted", 0),
        "updated": figures.get("rows_updated", 0),
        "deleted": figures.get("rows_deleted", 0),
        "replaced": figures.get("rows_replaced", 0),
        "main_rows": main_rows,
    }


# A key's value: a JSON scalar (dates and timestamps as ISO text, decimals as text), or for a composite key an
# object {column: value} in the key's column order.
KeyValue = Any


class ChangeKeysDoc(TypedDict):
    """A merge's sample keys per kind of change, recorded by its audit (the `changes` line's samples, from one
    bounded Spark job: wapflow.writing.modes.MergeMode.change_keys): at most KEY_SAMPLES each, smallest first."""

    key: list[str]  # the key's columns
    inserted: list[KeyValue]
    updated: list[KeyValue]
    deleted: list[KeyValue]


def change_keys(rec: RunRecord) -> ChangeKeysDoc | None:
    """The sample keys the run's audit recorded with its change; None when it recorded none (an append or a
    replace, a run recorded before samples were kept, or a merge whose sample job failed)."""
    line = next((c for c in rec.checks if c.get("check") == "changes"), None)
    samples = [s for s in (line or {}).get("samples") or [] if isinstance(s, dict) and isinstance(s.get("key"), dict)]
    if not samples:
        return None
    key = list(samples[0]["key"])
    per_kind: dict[str, list[KeyValue]] = {"inserted": [], "updated": [], "deleted": []}
    for s in samples:
        kind, value = s.get("change"), s["key"]
        if kind in per_kind:
            per_kind[str(kind)].append(value.get(key[0]) if len(key) == 1 else {k: value.get(k) for k in key})
    return {
        "key": key,
        "inserted": per_kind["inserted"],
        "updated": per_kind["updated"],
        "deleted": per_kind["deleted"],
    }


def key_text(value: KeyValue) -> str:
    """A key as a person reads it: its value as a literal (text quoted, control characters escaped, so a key
    never passes for words or markup of the message around it); a composite key as a tuple `(1, "eu")`."""
    if isinstance(value, dict):
        return "(" + ", ".join(key_text(v) for v in value.values()) + ")"
    return json.dumps(value, ensure_ascii=False, default=str)


def keys_lines(doc: ChangeKeysDoc | None) -> list[str]:
    """One line per kind of change with sample keys: `inserted (id): 9, 10`."""
    if doc is None:
        return []
    key = doc["key"][0] if len(doc["key"]) == 1 else "(" + ", ".join(doc["key"]) + ")"
    kinds = (("inserted", doc["inserted"]), ("updated", doc["updated"]), ("deleted", doc["deleted"]))
    return [f"{kind} {key}: {', '.join(key_text(v) for v in values)}" for kind, values in kinds if values]


def change_words(rows: RowsDoc) -> str:
    """The change in a few words: "add 1 row(s), update 3, delete 2"."""
    words = [f"add {rows['added']} row(s)"]
    for n, verb in ((rows["updated"], "update"), (rows["deleted"], "delete"), (rows["replaced"], "replace")):
        if n:
            words.append(f"{verb} {n}")
    return ", ".join(words)


def pending(rec: RunRecord) -> bool:
    """The run is not on main and could still be published (its branch kept, or held for review)."""
    return rec.status != PUBLISHED and (rec.branch_kept or rec.status == AWAITING_REVIEW)


def pending_change(rec: RunRecord) -> str | None:
    """`wap report`'s line for a run that could still be published: its change from the record alone (no
    Spark, no metadata), and the command that shows main beside the batch. None for any other run."""
    if not pending(rec):
        return None
    rows = run_rows(rec, {}, 0)
    return f"publishing it would {change_words(rows)} (main vs the batch per column: wap diff {rec.run_id})"


def run_report(store: RunStore, run_id: str) -> RunReport:
    """The full record of one run; NotFound (with near matches among recent runs) if the store has none."""
    rec = find_run(store, run_id)
    return {
        "run_id": rec.run_id,
        "table": rec.table_name,
        "status": rec.shown_status,
        "resume": _resume(rec),
        "branch": rec.branch,
        "branch_kept": rec.branch_kept,
        "files": rec.files,
        "rows_written": rec.rows_written,
        "snapshot_id": rec.snapshot_id,
        "checks": shown_checks(rec.checks),
        "error": rec.error,
        "timings": rec.timings,
        "started_at": rec.started_at,
        "finished_at": rec.finished_at,
        "review": review_of(rec),
        "would_change": pending_change(rec),
        "change_keys": change_keys(rec),
    }
