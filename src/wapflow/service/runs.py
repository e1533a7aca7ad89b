"""Rows of `wap runs` and `wap report`, read from the run store alone.

No Spark and no JVM: a dashboard (or `wap runs` on a laptop without Java) reads runs straight from the
store. Keep it that way: nothing here may import pyspark or wapflow.lakehouse (tests/test_layers.py checks).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypedDict

import sqlalchemy as sa

from wapflow.audit.anomaly import CHANGE_METRICS
from wapflow.errors import NotFound, did_you_mean
from wapflow.runs.metrics import PUBLISHED
from wapflow.runs.store import RunRecord, RunStore, runs_table
from wapflow.vocabulary import AWAITING_REVIEW as AWAITING_REVIEW
from wapflow.vocabulary import FAILED_WITH, GROUP_STATUS_ORDER, run_branch


class RunRow(TypedDict):
    """One line of `wap runs` (and one element of its JSON `runs` list)."""

    run_id: str
    table: str
    status: str  # the stored status, or interrupted when its process is gone (vocabulary.INTERRUPTED)
    resume: str | None  # the command that completes an interrupted run exactly once
    rows: int | None
    branch: str | None  # only while the branch is kept for inspection
    failed_checks: list[str]
    error: str | None
    reason: str | None  # why a run failed, in one short line (its error's first line, cut at REASON_CHARS)
    started_at: str
    seconds: float | None  # from start to end (None while it runs)
    review: str | None  # awaiting / approved by WHO / rejected by WHO (a run held for review), else None
    group_id: str | None  # the multi-table run (`wap run-tables`, a transaction, `wap run-models`) it is part of


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
    group_id: str | None  # the multi-table run it is part of (`wap report GROUP_ID` shows every table of it)


class Review(TypedDict):
    """A run held for review: the decision (None while it awaits one), who made it, why, when."""

    decision: str | None  # approved | rejected | None (awaiting review)
    by: str | None
    reason: str | None
    at: datetime | None


def _resume(rec: RunRecord) -> str | None:
    """The command that completes an interrupted run of one table (a table of a group resumes with its group:
    group_resume)."""
    return rec.resume_command() if rec.interrupted and not rec.group_id else None


def _utc(t: datetime) -> datetime:
    """A run store time as UTC (SQLite hands it back naive; it was written in UTC)."""
    return t.astimezone(UTC) if t.tzinfo else t.replace(tzinfo=UTC)


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    """Seconds from `start` to `end`, to the tenth; None when either is missing (a run still going)."""
    if start is None or end is None:
        return None
    return round(max(0.0, (_utc(end) - _utc(start)).total_seconds()), 1)


def duration_text(seconds: float | None) -> str | None:
    """How long a run took, as people say it: 0.4s, 12s, 2m 05s, 1h 03m. None for a run without an end."""
    if seconds is None:
        return None
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


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
        "seconds": seconds_between(rec.started_at, rec.finished_at),
        "review": review_line(rec),
        "group_id": rec.group_id,
    }


def list_runs(store: RunStore, table: str | None = None, limit: int = 20) -> list[RunRow]:
    """The most recent runs, newest first, optionally of one table."""
    return [run_row(r) for r in store.list(table, limit)]


# --- multi-table runs (`wap run-tables`, wapflow.transaction, `wap run-models`) ----------------------------------
# Each table of one has its own record (`<group id>-1`, `-2`, ... in the order the run named its tables), all with
# the group's id in wap_runs.group_id; the group itself has no record of its own: what it shows is read from them.

# The words wapflow.pipeline.group records for a table that another table of its group failed (Group.fail):
# its run is failed too, but not by anything of its own.
HELD_BACK = "not published:"
_GENERATED_ID = re.compile(r"^(?P<name>.+)_[0-9]{8}t[0-9]{6}_[0-9a-f]{6}$")


class GroupRow(TypedDict):
    """One multi-table run in `wap runs` (its tables follow it as RunRows) and in its JSON `groups` list."""

    group_id: str
    name: str | None  # a transaction's name (wapflow.transaction(name=...) prefixes its id), else None
    source: str  # files (`wap run-tables`) | dataframes (a transaction, `wap run-models`) | files and dataframes
    status: str  # the whole run's: its tables' status when they agree (they do, unless one was taken off main)
    tables: list[str]
    members: list[str]  # its tables' run ids, in the order the run named them
    rows: int | None  # rows its tables wrote
    branch: str | None  # its branch while kept for inspection (one name on every table)
    blocked_by: list[str]  # the tables whose own checks blocked it or whose own step failed it
    reason: str | None  # why it did not publish, in one short line
    resume: str | None  # how to complete it once its process is gone (exactly once, same run id)
    started_at: str
    seconds: float | None  # from its first table's start to its last table's end (None while it runs)
    review: str | None


class GroupReport(TypedDict):
    """Everything `wap report GROUP_ID` shows (and its JSON document): the whole run, then each table's report."""

    group_id: str
    name: str | None
    source: str
    status: str
    tables: list[str]
    blocked_by: list[str]
    reason: str | None
    error: dict[str, Any] | None  # the error of the table that failed it (or the run's own, shared by every table)
    resume: str | None
    branch: str | None
    branch_kept: bool
    rows_written: int | None
    started_at: datetime
    finished_at: datetime | None
    seconds: float | None
    review: Review | None
    members: list[RunReport]


class RunsListing(TypedDict):
    """`wap runs`: the runs newest first, a multi-table run's tables one after the other (each with its group
    id), and each multi-table run they are part of."""

    runs: list[RunRow]
    groups: list[GroupRow]


def _own_failure(rec: RunRecord) -> bool:
    """The table's run did not publish because of itself: its own checks, or its own step failed."""
    if failed_checks(rec):
        return True
    return rec.status == "failed" and bool((rec.error or {}).get("message")) and not held_back(rec.error)


def held_back(error: Mapping[str, Any] | None) -> bool:
    """The error of a table that another table of its group failed: not its own."""
    return error is not None and (FAILED_WITH in error or str(error.get("message") or "").startswith(HELD_BACK))


def group_status(members: list[RunRecord]) -> str:
    """The whole run's status: its tables' when they agree, else the first of GROUP_STATUS_ORDER among them."""
    statuses = [m.shown_status for m in members]
    if len(set(statuses)) == 1:
        return statuses[0]
    return next((s for s in GROUP_STATUS_ORDER if s in statuses), sorted(statuses)[0])


def blocked_by(members: list[RunRecord]) -> list[RunRecord]:
    """The tables of a group that stopped it: blocked by their own checks or failed at their own step. Empty
    when nothing of one table did (the whole run failed, e.g. its job raised or the commit failed)."""
    own = [m for m in members if _own_failure(m)]
    messages = {str((m.error or {}).get("message")) for m in own if not failed_checks(m)}
    if len(own) == len(members) > 1 and len(messages) == 1:
        return []  # one error recorded on every table: the run's own, not one table's
    return own


def _group_error(members: list[RunRecord]) -> dict[str, Any] | None:
    """The error that ended the group: its failing table's, else the one its tables share."""
    for m in blocked_by(members) or members:
        if m.error and not held_back(m.error):
            return m.error
    return None


def _group_reason(members: list[RunRecord], status: str) -> str | None:
    culprits = blocked_by(members)
    if status == "blocked":
        parts = [f"{m.table_name}: {', '.join(failed_checks(m))}" for m in culprits if failed_checks(m)]
        return f"blocked by {'; '.join(parts)}" if parts else None
    if status == "failed":
        failing = next((m for m in culprits if not failed_checks(m)), None)
        if failing is not None:
            why = failure_reason(failing) or "failed"
            return why if failing.table_name in why else f"{failing.table_name}: {why}"
        error = _group_error(members)
        return failure_reason(RunRecord("", "", "failed", error=error)) if error else None
    return None


def group_name(group_id: str) -> str | None:
    """A transaction's name: the prefix wapflow.transaction(name=...) gives its generated id."""
    m = _GENERATED_ID.match(group_id)
    return m["name"] if m else None


def group_source(members: list[RunRecord]) -> str:
    """files: tables read from files (`wap run-tables`); dataframes: a transaction's or models' DataFrames; both:
    a landed batch with the models downstream of it."""
    read = [bool(m.files or m.file_ids) for m in members]
    return "files" if all(read) else "dataframes" if not any(read) else "files and dataframes"


def group_resume(group_id: str, members: list[RunRecord]) -> str | None:
    """How to complete a group whose process is gone, exactly once: the same tables and files under the same
    run id; for DataFrames, the job again with that run id. None unless a table of it is interrupted."""
    if not any(m.interrupted for m in members):
        return None
    if group_source(members) != "files":
        return (
            f"run the job again with run id {group_id} (wapflow.transaction(lh, run_id={group_id!r}) or "
            f"wap run-models --run-id {group_id}): it publishes at most once"
        )
    specs = [f"{m.table_name}={','.join([f['uri'] for f in m.file_ids] or m.files)}" for m in members]
    parts = ["wap", "run-tables", *specs, "--run-id", group_id]
    branch = members[0].branch
    if branch and branch != run_branch(group_id):
        parts += ["--branch", branch]
    return shlex.join(parts)


def _rows(members: list[RunRecord]) -> int | None:
    written = [m.rows_written for m in members if m.rows_written is not None]
    return sum(written) if written else None


def _span(members: list[RunRecord]) -> tuple[datetime, datetime | None]:
    """When the first table started and the last ended (None while one runs), as the store gave them."""
    started = min((m.started_at for m in members), key=_utc)
    ends = [m.finished_at for m in members]
    return started, (max((e for e in ends if e is not None), key=_utc) if all(ends) else None)


def group_row(group_id: str, members: list[RunRecord]) -> GroupRow:
    """A multi-table run as one line of the runs list."""
    status = group_status(members)
    started, finished = _span(members)
    kept = [m.branch for m in members if m.branch_kept and m.branch]
    return {
        "group_id": group_id,
        "name": group_name(group_id),
        "source": group_source(members),
        "status": status,
        "tables": [m.table_name for m in members],
        "members": [m.run_id for m in members],
        "rows": _rows(members),
        "branch": kept[0] if kept else None,
        "blocked_by": [m.table_name for m in blocked_by(members)],
        "reason": _group_reason(members, status),
        "resume": group_resume(group_id, members),
        "started_at": started.isoformat(sep=" ", timespec="seconds"),
        "seconds": seconds_between(started, finished),
        "review": review_line(members[0]),
    }


def _recent_entries(store: RunStore, limit: int) -> list[str]:
    """The newest `limit` runs, a multi-table run counted once (by its group id), newest first."""
    c = runs_table.c
    entry = sa.func.coalesce(c.group_id, c.run_id).label("entry")
    started = sa.func.min(c.started_at).label("started")
    q = sa.select(entry, started).group_by(entry).order_by(sa.desc("started"), sa.desc("entry")).limit(limit)
    with store.engine.connect() as conn:
        return [str(e) for e, _ in conn.execute(q).all()]


def runs_listing(store: RunStore, table: str | None = None, limit: int = 20) -> RunsListing:
    """`wap runs`: the newest `limit` runs, newest first, a multi-table run counted once and followed by every
    table of it; with `table`, that table's own `limit` runs (each naming its group) and their groups."""
    if table:
        runs = store.list(table, limit)
        gids = list(dict.fromkeys(r.group_id for r in runs if r.group_id))
        found = [(g, store.group(g)) for g in gids]
        return {"runs": [run_row(r) for r in runs], "groups": [group_row(g, m) for g, m in found if m]}
    entries = _recent_entries(store, limit)
    c = runs_table.c
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(runs_table).where(sa.or_(c.run_id.in_(entries), c.group_id.in_(entries)))).all()
    recs = [RunRecord.from_row(r) for r in rows]
    singles = {r.run_id: r for r in recs if not r.group_id}
    members: dict[str, list[RunRecord]] = {}
    for r in sorted(recs, key=_member_index):
        if r.group_id:
            members.setdefault(r.group_id, []).append(r)
    out: list[RunRow] = []
    groups: list[GroupRow] = []
    for e in entries:
        if e in members:
            groups.append(group_row(e, members[e]))
            out += [run_row(m) for m in members[e]]
        elif e in singles:
            out.append(run_row(singles[e]))
    return {"runs": out, "groups": groups}


def _member_index(rec: RunRecord) -> int:
    """A table's place in its group (`<group id>-N`), as RunStore.group orders them."""
    tail = rec.run_id.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def find_run(store: RunStore, run_id: str) -> RunRecord:
    """One run's record; NotFound (with near matches among recent runs) if the store has none."""
    rec = store.get(run_id)
    if rec is None:
        raise _not_found(store, run_id)
    return rec


def _not_found(store: RunStore, run_id: str) -> NotFound:
    recent = [r.run_id for r in store.list(limit=50)]
    recent += list(dict.fromkeys(r.group_id for r in store.list(limit=50) if r.group_id))
    return NotFound(f"no run {run_id} in the run store{did_you_mean(run_id, recent)}", hint="list runs with `wap runs`")


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
        "group_id": rec.group_id,
    }


def group_report(store: RunStore, group_id: str) -> GroupReport | None:
    """The full record of a multi-table run: the whole, then each table's report. None when `group_id` names no
    multi-table run (a run of one table has its own report: run_report)."""
    if store.get(group_id) is not None:
        return None
    members = store.group(group_id)
    if not members:
        return None
    row = group_row(group_id, members)
    started, finished = _span(members)
    kept = [m for m in members if m.branch_kept]
    return {
        "group_id": group_id,
        "name": row["name"],
        "source": row["source"],
        "status": row["status"],
        "tables": row["tables"],
        "blocked_by": row["blocked_by"],
        "reason": row["reason"],
        "error": _group_error(members) if row["status"] == "failed" else None,
        "resume": row["resume"],
        "branch": members[0].branch,
        "branch_kept": bool(kept),
        "rows_written": row["rows"],
        "started_at": started,
        "finished_at": finished,
        "seconds": row["seconds"],
        "review": review_of(members[0]),
        "members": [run_report(store, m.run_id) for m in members],
    }
