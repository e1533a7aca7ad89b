"""The publish step, the one publish of every run (wapflow.pipeline.group: a run of one table is a group of one).

Blocked when any table failed its error checks (every table's sandbox kept or dropped as `on_failure` says), held
as awaiting_review when any table's `review` asks for a person (branches kept, `wap approve` resumes the run through
these same steps), else, under every table's publish lock: checks that read main re-checked, a person's approval
recorded on the snapshots, and every table's main moved by the catalog's commit (several tables: one atomic commit
or none). A merge or replace is never cherry-picked onto a moved main: the run's branches are dropped and it goes
back to write (fresh branches of the new mains), audit and publish again. A publish replayed after the run reached
main only cleans up."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Protocol

from wapflow.errors import CommitConflict, PublishConflict, UsageError
from wapflow.faults import crash_point
from wapflow.lakehouse.lineage import approval_of, find_published
from wapflow.lakehouse.refs import MainMoved, PublishedRun, RunSlice
from wapflow.pipeline.state import AWAITING_REVIEW
from wapflow.pipeline.steps.audit import NO_CHECKS, recheck_main
from wapflow.pipeline.steps.context import Run
from wapflow.runs.store import APPROVED
from wapflow.writing.modes import Changes

if TYPE_CHECKING:
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.sql.identifiers import TableName


class Group(Protocol):
    """What publish reads and sets of a run: its tables (`members`), sandbox and outcome (wapflow.pipeline.group)."""

    lh: Lakehouse
    run_id: str
    branch: str
    members: list[Run]
    reapplied: int

    @property
    def several(self) -> bool:
        """Tables published in one atomic commit (not a run of one table)."""
        ...

    def tables(self) -> list[TableName]:
        """Every table the run writes."""
        ...

    def end(self, message: str, *, announce: bool | None = None) -> None:
        """The run has ended: records saved, lineage told."""
        ...


# A merge or replace re-applied this many times on a main that kept moving fails as a transient conflict.
MAX_REAPPLY = 3


def publish(group: Group) -> None:
    """The one publish of every run, over its tables (a group of one for `wap run`): blocked when any failed its
    error checks, held when any table's `review` asks for a person, else, under every table's publish lock (taken
    in one order), main re-checked, approvals recorded, and every table's main moved by one commit of the catalog
    (a run of one table: its quarantine table first, then its own). A merge or replace that met a moved main goes
    back to write on fresh branches. A publish replayed after the run reached main only cleans up."""
    runs = group.members
    # A run prepare found on main was published (and told) by an earlier call; one found now, by this call's
    # earlier attempt that stopped before recording it.
    found_now = any(r.already_published is None for r in runs)
    for r in runs:
        if r.already_published is None and r.lh.tables.exists(r.target):
            # A publish replayed after a crash (or a retried step) finds its rows on main: nothing twice.
            r.already_published = find_published(r.lh.tables, r.target, r.run_id)
    published = [r.already_published is not None for r in runs]
    if all(published):
        _already(group, announce=found_now)
        return
    if any(published):
        raise PublishConflict(
            f"run {group.run_id} is published for some tables only, which one commit cannot produce",
            hint="see `wap runs`; re-run the remaining tables under a new run id",
        )
    if not all(r.branch_as_recorded() for r in runs):
        return  # another process went on with the run: write and audit again from what its branches hold
    failing = [r for r in runs if r.report is None or not r.report.passed]
    if failing:
        _block(group, failing)
        return
    staged = [r for r in runs if r.staging is not None]
    if staged and group.several:
        # New columns wait in a staging table until main's schema changes (table branches share a schema):
        # that schema change and the rows would be two commits, which a group cannot make one.
        raise UsageError(
            f"{staged[0].target} adds new column(s), which a commit of several tables cannot carry on table "
            "branches; no table changed on main",
            hint=f"run {staged[0].target} on its own first (`wap run`: its columns reach main), then the group "
            'again; or use catalog = "nessie", whose branches hold new columns',
        )
    held = [r for r in runs if held_for_review(r)]
    if held:
        _hold(group, held)
        return
    outcome = _locked(group)
    if isinstance(outcome, MainMoved):
        _rewind(group, outcome)
        return
    if outcome is None:
        _block(group, [r for r in runs if r.report is None or not r.report.passed])
        return
    done = outcome
    for r in runs:
        mark_published(r, done.heads.get(r.target.dotted), done.method)
    if done.leftover:
        where = f"wap discard {group.branch}" + ("" if group.several else f" --table {runs[0].target}")
        group.lh.progress(f"warning: published, but {done.leftover}; drop it with `{where}`")
    if group.several:
        tables = ", ".join(r.target.dotted for r in runs)
        again = f" (applied again {group.reapplied} time(s): main moved)" if group.reapplied else ""
        caveat = f"; {done.caveat}" if done.caveat else ""
        group.end(f"published {tables} in one commit{again}{caveat}")
    else:
        group.end(runs[0].message)


def _locked(group: Group) -> PublishedRun | MainMoved | None:
    """Under every table's publish lock: main re-checked, approvals recorded, the commit. The commit's outcome;
    None when the re-check blocked the run; MainMoved when a merge or replace met a moved main (before the commit,
    or in it: a writer that takes no wapflow lock)."""
    runs = group.members
    # A run of one table locks its table (its quarantine table is its own); a group every table it writes.
    names = {t.dotted for t in group.tables()} if group.several else {runs[0].target.dotted}
    with contextlib.ExitStack() as locks:
        for r in runs:
            locks.enter_context(r.timer("publish"))
        # In one order: no two runs wait on each other; others publish to these tables before or after this
        # commit, never inside it.
        for name in sorted(names):
            locks.enter_context(
                group.lh.store.publish_lock(name, timeout=group.lh.config.lakehouse.publish_lock_timeout)
            )
        crash_point("publish:locked")
        moved = next((m for r in runs if (m := _main_moved_under_change(r)) is not None), None)
        if moved is not None:
            return moved
        for r in runs:
            recheck_main(r)  # checks that read main, on a main that moved since the audit
        if any(r.report is None or not r.report.passed for r in runs):
            return None
        try:
            for r in runs:
                record_approval(r)  # an approved run's snapshots say who approved it and why
            return _commit(group)
        except MainMoved as e:
            return e


def _already(group: Group, *, announce: bool) -> None:
    """Every table holds the run on main already (a publish or a whole run replayed): only its sandbox goes."""
    for r in group.members:
        # A run of several tables never stages new columns (refused at publish): no staging table to look for.
        staging = None if group.several else r.staging_name()
        # Found published by prepare from the catalog's metadata: Spark starts only if a sandbox is left to drop.
        if r.lh.iceberg.sandbox_left(r.branch, r.run_tables(), staging):
            with r.timer("cleanup"):
                r.lh.iceberg.discard(r.branch, r.run_tables())
                if staging is not None and r.lh.tables.exists(staging):
                    r.lh.tables.drop(staging)
        mark_published(r, r.already_published, "already")
        r.message = f"run {r.run_id} was already published (snapshot {r.already_published}); nothing to do"
    if group.several:
        group.end(f"run {group.run_id} was already published; nothing to do", announce=announce)
    else:
        group.end(group.members[0].message, announce=announce)


def _commit(group: Group) -> PublishedRun:
    """Move every table's main to the run's rows: one atomic commit of the catalog for a run of several tables; a
    run of one table its quarantine table first, then its own (or, with new columns, from its staging table)."""
    if group.several:
        where = group.lh.iceberg.describe(group.branch)
        group.lh.progress(f"publishing {where} ({len(group.members)} tables) to main")
        done = group.lh.iceberg.commit(
            group.branch, group.run_id, [sl for r in group.members for sl in slices(r)], atomic=True
        )
        crash_point("publish:moved")
        return done
    return _publish_locked(group.members[0])


def held_for_review(run: Run) -> bool:
    """The table's `review` holds this run for a person (not yet approved by one)."""
    assert run.report is not None
    return run.record.review != APPROVED and run.table_cfg.holds_for_review(bool(run.report.warned))


def _hold(group: Group, held: list[Run]) -> None:
    """Stop before publish as awaiting_review: every table's branch kept, no main changed, the commands to
    decide (a group is decided as one: `wap approve <run id>` audits every table again and publishes them all)."""
    for r in group.members:
        r.record.status, r.record.snapshot_id, r.record.branch_kept = AWAITING_REVIEW, None, r.written()
    if not group.several:
        run = group.members[0]
        assert run.report is not None
        warned = ", ".join(c.name for c in run.report.warned)
        why = f"warning(s) {warned}" if warned else f'review = "{run.table_cfg.review}" for {run.target}'
        where = f"staging table {run.staging}" if run.staging is not None else run.lh.iceberg.describe(run.branch)
        run.message = (
            f"awaiting review ({why}); main unchanged; rows kept on {where} "
            f"(report: wap report {run.run_id}; publish: wap approve {run.run_id} --reason ...; "
            f"drop: wap reject {run.run_id} --reason ...)"
        )
        group.end(run.message)
        return
    why = "; ".join(
        f"{r.target}: warning(s) {', '.join(c.name for c in r.report.warned)}"
        if r.report is not None and r.report.warned
        else f'{r.target}: review = "{r.table_cfg.review}"'
        for r in held
    )
    for r in group.members:
        r.message = f"awaiting review with run {group.run_id} ({why})"
    sandbox = group.lh.iceberg.describe(group.branch)
    group.end(
        f"awaiting review ({why}); no table changed on main; rows kept on {sandbox} (diff: wap diff "
        f"{group.run_id}; publish every table: wap approve {group.run_id} --reason ...; drop them: wap reject "
        f"{group.run_id} --reason ...)"
    )


def record_approval(run: Run) -> None:
    """An approved run's rows were written before the approval: one more commit on its branch, with no rows,
    carries who approved it and why (lineage.approval_properties), so the snapshot main moves to says so.
    A run written after its approval (re-applied on a moved main) carries them on its own commits already."""
    if run.record.review != APPROVED or run.staging is not None or not run.run_snapshots:
        return
    if approval_of(run.run_snapshots[-1].summary) is not None:
        return
    tables = run.wt()
    empty = run.lh.spark.createDataFrame([], tables.schema(run.target))
    run.write_options(empty.writeTo(run.lh.iceberg.write_target(run.target, run.branch))).append()
    run.run_snapshots = run.branch_snapshots()
    run.save()


def _publish_locked(run: Run) -> PublishedRun:
    """Move main to the run's rows and drop the sandbox; the caller holds the table's publish lock."""
    assert run.report is not None
    if run.staging is not None:
        return _publish_staged(run)
    if run.report.quarantined_rows:
        run.lh.progress(f"publishing {run.report.quarantined_rows} quarantined row(s)")
    run.lh.progress(f"publishing {run.lh.iceberg.describe(run.branch)} to main")
    return run.lh.iceberg.commit(
        run.branch, run.run_id, slices(run), atomic=False, after_each=lambda sl: _after_slice(run, sl)
    )


def slices(run: Run) -> list[RunSlice]:
    """The run's part of its sandbox, per table, in publish order: quarantined rows first, so main
    never holds a run's good rows without the ones it diverted."""
    props = run.snapshot_properties()
    out = []
    if run.quarantine is not None and run.wt().exists(run.quarantine):
        out.append(RunSlice(run.quarantine, run.q_base, tuple(run.q_snapshots), props))
    change = run.outcome().change  # a merge or replace runs again on a moved main: never cherry-picked
    out.append(RunSlice(run.target, run.base, tuple(run.run_snapshots), props, cherry_pick=not change))
    return out


def _main_moved_under_change(run: Run) -> MainMoved | None:
    """A merge or replace whose branch no longer starts at main's head (another run published meanwhile)."""
    if run.staging is not None or not run.run_snapshots or not run.outcome().change:
        return None
    tables = run.lh.tables
    if not tables.exists(run.target):  # a table the run created on its Nessie branch: main has none to move
        return None
    tables.refresh(run.target)  # other processes' publishes, not this process's cached metadata
    if tables.head(run.target, "main") == run.base:
        return None
    return MainMoved(
        f"main of {run.target} moved since {run.lh.iceberg.describe(run.branch)} was made",
        hint="the run's change is applied again on a fresh branch of main",
    )


def _rewind(group: Group, moved: MainMoved) -> None:
    """Send a merge or replace back to write: the run's branches (made from a main that has moved since) are
    dropped, and every table's state returns to just after prepare, so write applies the change to fresh
    branches of the new mains, and audit judges that change. Bounded: a main that keeps moving fails the run as
    a transient conflict (a retry with the same run id starts over)."""
    runs = group.members
    if group.reapplied >= MAX_REAPPLY:
        if not group.several:
            run = runs[0]
            raise CommitConflict(
                f"main of {run.target} moved during each of {group.reapplied + 1} attempts to publish this "
                f"{run.outcome().mode}",
                hint=f"retry the run (`wap run ... --run-id {run.run_id}`) when fewer runs publish to the table",
            )
        raise CommitConflict(
            f"{moved.message}, during each of {group.reapplied + 1} attempts to publish run {group.run_id}",
            hint=f"every main is unchanged by this run; run it again (--run-id {group.run_id}) when fewer runs "
            "publish to these tables",
        )
    if group.several:
        group.lh.progress(f"{moved.message}: applying the group's changes again on fresh branches of main")
    else:
        run = runs[0]
        group.lh.progress(
            f"main of {run.target} moved since {run.lh.iceberg.describe(run.branch)} was made: applying the "
            f"{run.outcome().mode} again on a fresh branch of main"
        )
    group.lh.iceberg.discard(group.branch, group.tables())
    group.reapplied += 1
    for r in runs:
        r.reapplied = group.reapplied
        r.back_to_write()


def _after_slice(run: Run, sl: RunSlice) -> None:
    crash_point("publish:moved" if sl.table == run.target else "publish:quarantine-published")


def mark_published(run: Run, snapshot_id: int | None, via: str) -> None:
    """Record a publish done by this run or, for multi-table runs, by the group's single merge."""
    assert run.report is not None or via == "already"
    run.record.status, run.record.snapshot_id, run.record.branch_kept = "published", snapshot_id, False
    run.published_via = via
    if via == "already" or run.report is None:
        return
    _record_lineage(run, snapshot_id)
    warned = len(run.report.warned)
    change = next((c for c in run.report.checks if c.check == "changes"), None)
    what = f"{run.record.rows_written} row(s) to {run.target}"
    if change is not None and isinstance(change.observed, dict):
        what = f"the {run.outcome().mode} of {run.target}: {Changes.from_dict(change.observed).describe()}"
    again = f" (applied again {run.reapplied} time(s): main moved)" if run.reapplied else ""
    run.message = f"published {what}{again}" + (f" with {warned} warning(s)" if warned else "")
    unchecked = next((c for c in run.report.checks if c.check == NO_CHECKS), None)
    if unchecked is not None:
        run.message += f" without checks ({unchecked.observed})"
    if run.report.quarantined_rows:
        run.message += f"; {run.report.quarantined_rows} row(s) quarantined in {run.quarantine}"
    if run.record.review == APPROVED:
        run.message += f"; approved by {run.record.review_by}: {run.record.review_reason}"


def _record_lineage(run: Run, snapshot_id: int | None) -> None:
    """On v3 tables, the sequence numbers of the run's rows on main go into its record: `wap revert` finds the
    rows by them once `wap maintain` expired the run's snapshots (on v3 it keeps no history for revert_window)."""
    tables = run.lh.tables
    found: dict[str, dict[str, Any]] = {}
    for t in (run.quarantine, run.target):
        if t is None or not tables.exists(t):
            continue
        lineage = tables.runs_lineage(t, [run.run_id], snapshot_id if t == run.target else None)
        if run.run_id in lineage:
            found[t.dotted] = lineage[run.run_id]
    run.record.lineage = found or None


def _publish_staged(run: Run) -> PublishedRun:
    """New columns the sandbox could not hold: main's schema changes only now, then the staged rows are
    appended to the run's branch and published from there."""
    tables, branches = run.lh.tables, run.lh.iceberg
    assert run.staging is not None
    staged = tables.read(run.staging)
    current = {f.name.lower() for f in tables.schema(run.target).fields}
    new = [f for f in staged.schema.fields if f.name.lower() not in current]
    if new:
        run.lh.progress(f"adding column(s) {', '.join(f.name for f in new)} to {run.target}")
        tables.add_columns(run.target, new)
        crash_point("publish:columns-added")
    schema = tables.schema(run.target)
    mine = run.branch_snapshots() if branches.exists(run.target, run.branch) else []
    if not mine:
        # (A resumed publish finds its rows on the branch already and does not append them twice.)
        if branches.exists(run.target, run.branch):
            if not run.only_this_run_beyond_main(run.target):
                raise UsageError(
                    f"branch {run.branch} of {run.target} already exists and holds another run's data",
                    hint=f"drop it with `wap discard {run.branch} --table {run.target}`, then retry",
                )
            branches.reset(run.target, run.branch, [])
        run.base = branches.create(run.target, run.branch)
        run.write_options(
            staged.select(*[staged[f"`{f.name}`"] for f in schema.fields]).writeTo(
                branches.write_target(run.target, run.branch)
            )
        ).append()
        mine = run.branch_snapshots()
    run.run_snapshots = mine
    done = branches.commit(
        run.branch,
        run.run_id,
        [RunSlice(run.target, run.base, tuple(mine), run.snapshot_properties())],
        atomic=False,
        after_each=lambda sl: _after_slice(run, sl),
    )
    tables.drop(run.staging)
    return done


def _block(group: Group, failing: list[Run]) -> None:
    """Blocked: no main changed; the sandbox kept or dropped as the tables' `on_failure` says (kept when any
    table keeps it: a group's tables share one branch name)."""
    if not group.several:
        _block_one(failing[0])
        group.end(failing[0].message)
        return
    keep = any(r.table_cfg.on_failure != "drop" for r in group.members)
    why = "; ".join(f"{r.target}: {_failed_checks(r)}" for r in failing if r.report)
    if not keep:
        group.lh.iceberg.discard(group.branch, group.tables())
    for r in group.members:
        r.record.status, r.record.snapshot_id, r.record.branch_kept = "blocked", r.record.branch_snapshot_id, keep
        own = ", ".join(c.name for c in r.report.failed) if r.report and r.report.failed else None
        r.message = f"blocked by {own}" if own else f"not published: blocked by {why}"
    sandbox = group.lh.iceberg.describe(group.branch)
    where = f"all rows kept on {sandbox}" if keep else f"{sandbox} dropped"
    group.end(f"blocked ({why}); no table changed on main; {where}")


def _failed_checks(r: Run) -> str:
    """A table's failed checks by name; the schema contract's with what differs (the column a model added)."""
    assert r.report is not None
    return ", ".join(f"{c.name} ({c.observed})" if c.check == "schema" else c.name for c in r.report.failed)


def _block_one(run: Run) -> None:
    assert run.report is not None
    tables, branches = run.lh.tables, run.lh.iceberg
    failed = ", ".join(c.name for c in run.report.failed)
    run.record.status, run.record.snapshot_id = "blocked", run.record.branch_snapshot_id
    if not run.written():
        run.record.branch_kept = False
        diff = "; ".join(str(c.observed) for c in run.report.failed if c.check == "schema")
        if not diff:  # a merge's or replace's batch blocked before writing (write.modes: problems)
            why = "; ".join(str(c.observed) for c in run.report.failed)
            run.message = (
                f"blocked by {failed}: {why}; nothing was written; main unchanged (report: wap report {run.run_id})"
            )
            return
        run.message = (
            f"blocked by {failed}: {diff}; nothing was written; main unchanged (report: wap report {run.run_id}; "
            'fix the file, or set schema = "add_columns" / "ignore_extra" for the table in wap.toml)'
        )
        return
    keep = run.table_cfg.on_failure != "drop"
    run.record.branch_kept = keep
    if run.staging is not None:
        if not keep:
            tables.drop(run.staging)
        where = f"rows kept in staging table {run.staging}" if keep else f"staging table {run.staging} dropped"
        run.message = f"blocked by {failed}; main and its schema unchanged; {where}"
        return
    where = branches.describe(run.branch)
    if not keep:
        branches.discard(run.branch, run.run_tables())
        run.message = f"blocked by {failed}; main unchanged; {where} dropped"
        return
    run.message = (
        f"blocked by {failed}; main unchanged; rows kept on {where} "
        f'(report: wap report {run.run_id}; inspect: wap query "SELECT * FROM {run.target}" '
        f"--branch {run.branch}; drop: wap discard {run.branch})"
    )
