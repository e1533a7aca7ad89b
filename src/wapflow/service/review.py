"""A person's decision on a run held for review: `wap approve` publishes it, `wap reject` drops it.

A table with `review = "always"` (or `"on_warn"` and a warning) stops a run whose audit passed as
`awaiting_review`: its branch kept, main unchanged. Deciding is one conditional change of the run's record
(`RunStore.transition`: only while it is still awaiting review), so of two approvals, or an approval racing a
rejection, exactly one wins; the other gets AlreadyDecided (exit 4). Who and why go into the run store and,
for an approved run, into the snapshot main is published to (wapflow.lakehouse.lineage).

Approving does not publish by itself: the run goes on through the same steps `wap run --run-id` resumes it
with (prepare, write finds its rows on the branch, audit again against main as it is now, publish: fast-forward,
or cherry-pick / re-apply when main moved). A run that no longer passes its error checks is blocked, not
published. The CLI and the Python API (wapflow.api.approve / reject) call these functions.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Collection
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from wapflow.config import NO_CHECKS_FLAG, TableConfig
from wapflow.errors import AlreadyDecided, NotFound, UsageError
from wapflow.pipeline.state import AWAITING_REVIEW, RUN_REJECTED, new_state
from wapflow.runs.store import APPROVED, REJECTED, Decision, RunRecord, RunStore, current_owner, runs_table
from wapflow.service.runs import find_run
from wapflow.vocabulary import OVERRIDABLE_CHECKS, RUN_BLOCKED, blocked_by_history_only

if TYPE_CHECKING:
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.pipeline.result import MultiRunResult, RunResult

_BY_LIMIT = 256  # the run store's review_by column


def reviewer(by: str | None) -> str:
    """Who decides: `--by`, else the OS user running the command."""
    if by is not None:
        who = by.strip()
        if not who or len(who) > _BY_LIMIT:
            raise UsageError(
                f"--by {by!r} names nobody" if not who else f"--by is longer than {_BY_LIMIT} characters",
                hint='e.g. --by "alice@example.com"',
            )
        return who
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container): say which uid it was
        return f"uid {os.getuid()}"


def _reason(reason: str | None, verb: str) -> str:
    text = (reason or "").strip()
    if not text:
        raise UsageError(
            f"say why the run is {verb}: --reason is empty",
            hint=f'e.g. --reason "row count checked with the source team" (it is recorded with the {verb} run)',
        )
    return text


def awaiting(store: RunStore, run_id: str, verb: str) -> RunRecord:
    """The run's record if it awaits review; else the error that says what it is instead (no Spark)."""
    rec = find_run(store, run_id)
    if rec.status == AWAITING_REVIEW:
        return rec
    if rec.review is not None:
        raise decided(rec)
    raise UsageError(
        f"run {run_id} is {rec.shown_status}, not awaiting review: there is nothing to {verb}",
        hint='only a run held by its table\'s `review` setting ("always", "on_warn") can be approved or '
        f"rejected; see it with `wap report {run_id}`",
    )


def awaiting_runs(store: RunStore, tables: Collection[str] | None = None) -> list[RunRecord]:
    """Runs awaiting review, oldest first (of `tables` only, when given): one query of the run store."""
    t = runs_table.c
    q = sa.select(runs_table).where(t.status == AWAITING_REVIEW).order_by(t.started_at)
    if tables is not None:
        q = q.where(t.table_name.in_(list(tables)))
    with store.engine.connect() as conn:
        return [RunRecord.from_row(r) for r in conn.execute(q).all()]


def held_since(rec: RunRecord) -> datetime:
    """When the run was held: the end of the run that stopped before publish (its start if none recorded)."""
    t = rec.finished_at or rec.started_at
    return t.astimezone(UTC) if t.tzinfo else t.replace(tzinfo=UTC)


def age_words(seconds: float) -> str:
    """A wait as people say it: 50h, 3d 4h, 12m."""
    minutes = int(seconds // 60)
    days, hours = divmod(minutes // 60, 24)
    if days:
        return f"{days}d {hours}h" if hours else f"{days}d"
    return f"{minutes // 60}h" if minutes >= 60 else f"{minutes}m"


def overdue(rec: RunRecord, table: TableConfig, now: datetime | None = None) -> float | None:
    """Seconds the run has awaited review when that is past its table's review_timeout, else None."""
    limit = table.review_timeout_seconds()
    if limit is None or rec.status != AWAITING_REVIEW:
        return None
    age = ((now or datetime.now(UTC)) - held_since(rec)).total_seconds()
    return age if age >= limit else None


def timed_out_reason(table: TableConfig) -> str:
    """The reason recorded with a run rejected for waiting too long."""
    return f"review timed out after {table.review_timeout}"


def decided(rec: RunRecord) -> AlreadyDecided:
    """A run another approve or reject decided first."""
    when = rec.reviewed_at.isoformat(sep=" ", timespec="seconds") if rec.reviewed_at else "?"
    now = f"; it is {rec.shown_status} now" if rec.shown_status != rec.review else ""
    hint = f"see it with `wap report {rec.run_id}`"
    if rec.review == APPROVED and (rec.status == "failed" or rec.interrupted):
        hint = f"its publish did not finish: complete it with `{rec.resume_command()}`"
    return AlreadyDecided(
        f"run {rec.run_id} was already {rec.review} by {rec.review_by} at {when} ({rec.review_reason}){now}",
        hint=hint,
    )


def _decide(store: RunStore, rec: RunRecord, decision: Decision, by: str, reason: str, **values: Any) -> None:
    """The one conditional change deciding a run (exactly one of racing decisions wins), else AlreadyDecided."""
    won = store.transition(
        rec.run_id,
        AWAITING_REVIEW,
        review=decision,
        review_by=by,
        review_reason=reason,
        reviewed_at=datetime.now(UTC),
        **values,
    )
    if not won:
        now = store.get(rec.run_id)
        if now is not None and now.review is not None:
            raise decided(now)
        raise UsageError(f"run {rec.run_id} is no longer awaiting review", hint=f"see `wap report {rec.run_id}`")


def approve(lh: Lakehouse, run_id: str, *, reason: str | None, by: str | None = None) -> RunResult | MultiRunResult:
    """Publish a run awaiting review: audited again against main as it is now, then published (or blocked if
    it no longer passes its error checks). Its files in the ledger follow the outcome."""
    from wapflow.pipeline.driver import drive
    from wapflow.pipeline.steps.record import result

    why, who = _reason(reason, "approved"), reviewer(by)
    members = lh.store.group(run_id) if lh.store.get(run_id) is None else []
    if members:
        return _approve_group(lh, run_id, members, why, who)
    found = find_run(lh.store, run_id)
    if found.status == RUN_BLOCKED and found.review is None:
        return _approve_blocked(lh, found, why, who)
    rec = awaiting(lh.store, run_id, "approve")
    _not_a_member(rec, "approve")
    table = lh.config.table(rec.table_name)
    waited = overdue(rec, table)
    if waited is not None and table.on_review_timeout == "reject":
        raise UsageError(
            f"approval refused: run {run_id} has awaited review for {age_words(waited)}, past review_timeout = "
            f'"{table.review_timeout}" of {rec.table_name} (on_review_timeout = "reject"): it is rejected at the next '
            "`wap watch` tick or `wap expire-reviews`",
            hint="to publish its files after all, run them again (a new run); or raise review_timeout in wap.toml",
        )
    # status running, owned by this process: prepare lets the owner resume it, and no one else meanwhile.
    _decide(lh.store, rec, APPROVED, who, why, status="running", owner=current_owner())
    lh.progress(f"run {run_id} approved by {who}: auditing it again against main, then publishing")
    files = [f["uri"] for f in rec.file_ids] or rec.files
    # An ingested batch's source (its write mode applies): the ledger says whose files they are.
    source = next((r.source for r in lh.ledger.rows(run_id=run_id)), None)
    # A run held after publishing without checks on --no-checks keeps that word (its report's no_checks line).
    unchecked = any(c.get("check") == "no_checks" and c.get("observed") == NO_CHECKS_FLAG for c in rec.checks)
    state = new_state(rec.table_name, files, run_id=run_id, branch=rec.branch, source=source, no_checks=unchecked)
    res = result(lh, drive(lh, state))
    if res.status == "blocked":
        res.message = f"approval refused: run {run_id} no longer passes its error checks; {res.message}"
    _settle_files(lh, run_id, res)
    return res


def _approve_blocked(lh: Lakehouse, rec: RunRecord, why: str, who: str) -> RunResult:
    """A blocked run a person judges real (a storm, a holiday the band never saw): published in one command,
    recorded who and why. Only when every check that failed judges the batch against the table's history
    (OVERRIDABLE_CHECKS); those warn when it is audited again, everything else must pass again. Published, the
    day enters the history the next runs are judged against."""
    from wapflow.pipeline.driver import drive
    from wapflow.pipeline.steps.record import result

    _not_a_member(rec, "approve")
    failed = [c for c in rec.checks if c.get("status") == "failed"]
    if not blocked_by_history_only(rec.checks):
        rules = [str(c.get("name")) for c in failed if c.get("check") not in OVERRIDABLE_CHECKS]
        raise UsageError(
            f"run {rec.run_id} was blocked by {', '.join(rules) or 'no check'}: no approval overrides that (only "
            f"checks that judge a batch against the table's history: {', '.join(sorted(OVERRIDABLE_CHECKS))})",
            hint="fix the data and run it again (a new run); `wap report " + rec.run_id + "` shows what failed",
        )
    if not rec.branch_kept or rec.branch is None:
        raise UsageError(
            f'run {rec.run_id}\'s branch is gone (on_failure = "drop", or `wap discard`): nothing left to publish',
            hint='run its files again with --again; keep blocked runs\' branches with on_failure = "keep"',
        )
    won = lh.store.transition(
        rec.run_id, RUN_BLOCKED, status="running", owner=current_owner(), review=APPROVED, review_by=who,
        review_reason=why, reviewed_at=datetime.now(UTC),
    )  # fmt: skip
    if not won:
        raise decided(lh.store.get(rec.run_id) or rec)
    names = [str(c.get("name")) for c in failed]
    lh.progress(f"blocked run {rec.run_id} approved by {who} ({', '.join(names)} overridden): auditing it again")
    files = [f["uri"] for f in rec.file_ids] or rec.files
    source = next((r.source for r in lh.ledger.rows(run_id=rec.run_id)), None)
    state = new_state(rec.table_name, files, run_id=rec.run_id, branch=rec.branch, source=source)
    res = result(lh, drive(lh, state.evolve(overridden=names)))
    if res.status == "published":
        keys = [r.key for r in lh.ledger.rows(run_id=rec.run_id, state="blocked")]
        if keys:
            lh.ledger.settle(keys, "published", run_id=rec.run_id, snapshot_id=res.snapshot_id)
    return res


def _not_a_member(rec: RunRecord, verb: str) -> None:
    """A table's run of a multi-table run is decided with its group: its tables publish in one commit or none."""
    if rec.group_id:
        raise UsageError(
            f"run {rec.run_id} is the {rec.table_name} part of multi-table run {rec.group_id}, whose tables are "
            f"published together or not at all: {verb} the whole run",
            hint=f"wap {verb} {rec.group_id} --reason ...; see every table first with `wap diff {rec.group_id}`",
        )


def _approve_group(lh: Lakehouse, group_id: str, members: list[RunRecord], why: str, who: str) -> MultiRunResult:
    """Approve every table of a multi-table run held for review, then audit them all again and publish them in
    one commit (or block them all). Of two racing decisions, the one that decides the first table wins."""
    from wapflow.pipeline.driver import drive
    from wapflow.pipeline.group import group_result, held_group

    for rec in members:
        if rec.status != AWAITING_REVIEW:
            if rec.review is not None:
                raise decided(rec)
            raise UsageError(
                f"run {group_id} is {rec.shown_status} for {rec.table_name}, not awaiting review: nothing to approve",
                hint=f"see it with `wap report {rec.run_id}`",
            )
    for rec in members:
        _decide(lh.store, rec, APPROVED, who, why, status="running", owner=current_owner())
    tables = ", ".join(r.table_name for r in members)
    lh.progress(f"run {group_id} ({tables}) approved by {who}: auditing every table again, then publishing")
    unchecked = any(
        c.get("check") == "no_checks" and c.get("observed") == NO_CHECKS_FLAG for r in members for c in r.checks
    )
    state = held_group(lh, members, no_checks=unchecked)
    res = group_result(lh, drive(lh, state))
    if res.status == "blocked":
        res.message = f"approval refused: run {group_id} no longer passes its error checks; {res.message}"
    return res


def _settle_files(lh: Lakehouse, run_id: str, res: RunResult) -> None:
    """The ledger's files of an approved run: published or blocked with it (a failed publish leaves them
    awaiting review: resuming the run completes it)."""
    rows = lh.ledger.rows(run_id=run_id, state="awaiting_review")
    keys = [r.key for r in rows]
    if not keys:
        return
    if res.status == "published":
        lh.ledger.settle(keys, "published", run_id=run_id, snapshot_id=res.snapshot_id)
    elif res.status == "blocked":
        lh.ledger.settle(keys, "blocked", run_id=run_id, reason=res.message)


def reject(lh: Lakehouse, run_id: str, *, reason: str | None, by: str | None = None) -> dict[str, Any]:
    """Drop a run awaiting review: its branch goes (as `wap discard` drops it; a staged batch's staging table
    too), its files are `rejected`. A multi-table run's id rejects every table of it."""
    why, who = _reason(reason, "rejected"), reviewer(by)
    members = lh.store.group(run_id) if lh.store.get(run_id) is None else []
    if members:
        for m in members:
            if m.status != AWAITING_REVIEW:
                awaiting(lh.store, m.run_id, "reject")  # raises what it is instead
        docs = [_reject(lh, m, who, why) for m in members]
        tables = ", ".join(m.table_name for m in members)
        return {
            "run_id": run_id,
            "status": RUN_REJECTED,
            "review_by": who,
            "review_reason": why,
            "tables": docs,
            "message": f"run {run_id} rejected by {who} ({why}) for {tables}; their branches dropped; every main "
            "unchanged",
        }
    rec = awaiting(lh.store, run_id, "reject")
    _not_a_member(rec, "reject")
    return _reject(lh, rec, who, why)


def _reject(lh: Lakehouse, rec: RunRecord, who: str, why: str) -> dict[str, Any]:
    from wapflow.pipeline.steps.context import quarantine_of, staging_of
    from wapflow.sql.identifiers import TableName

    run_id = rec.run_id
    _decide(lh.store, rec, REJECTED, who, why, status=RUN_REJECTED, finished_at=datetime.now(UTC))
    dropped = False
    where = f"branch {rec.branch} dropped"
    if rec.branch and rec.branch_kept:
        try:
            dropped = lh.iceberg.discard(rec.branch, [TableName.parse(rec.table_name)]).found
        except NotFound:
            dropped = False  # gone already (dropped by hand): nothing left to drop
        quarantine = quarantine_of(TableName.parse(rec.table_name))
        if lh.tables.exists(quarantine):
            lh.iceberg.discard(rec.branch, [quarantine])
        staging = staging_of(TableName.parse(rec.table_name), run_id)  # schema = "add_columns": no branch
        if lh.tables.exists(staging):
            lh.tables.drop(staging)
            dropped, where = True, f"staging table {staging} dropped"
        after = lh.store.get(run_id)
        if after is not None and after.branch_kept:
            after.branch_kept = False
            lh.store.save(after)
    rows = lh.ledger.rows(run_id=run_id, state="awaiting_review")
    if rows:
        lh.ledger.settle([r.key for r in rows], "rejected", run_id=run_id, reason=f"rejected by {who}: {why}")
    ended = lh.store.get(run_id)
    if ended is not None:  # lineage: the run ends without publishing (OpenLineage ABORT), as `wap discard` says
        from wapflow.pipeline import lineage

        lineage.emit(lh.config, "ABORT", ended, progress=lh.progress)
    where = where if dropped else "no branch left to drop"
    return {
        "run_id": run_id,
        "table": rec.table_name,
        "status": RUN_REJECTED,
        "branch": rec.branch,
        "dropped": dropped,
        "review_by": who,
        "review_reason": why,
        "files": [r.uri for r in rows],
        "message": f"run {run_id} rejected by {who} ({why}); {where}; main unchanged",
    }
