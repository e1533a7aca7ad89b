"""The publish step: under the table's publish lock, main moves to the run's rows (after re-checking what
depends on main), or the run is blocked and its sandbox kept or dropped as the table says. A publish replayed
after the run reached main only cleans up. A merge or replace is never cherry-picked onto a moved main: its
branch is dropped and the run goes back to write (a fresh branch of the new main), audit and publish again.
A table with `review` holds a run that passed as awaiting_review instead (its branch kept); once a person
approves it (wapflow.service.review), the run resumes through these same steps and publishes here."""

from __future__ import annotations

from datetime import UTC, datetime

from wapflow.errors import CommitConflict, UsageError
from wapflow.faults import crash_point
from wapflow.lakehouse.branches import MainMoved, PublishedRun, RunSlice
from wapflow.lakehouse.lineage import approval_of, find_published
from wapflow.pipeline.state import AWAITING_REVIEW
from wapflow.pipeline.steps.audit import NO_CHECKS, recheck_main
from wapflow.pipeline.steps.context import Run
from wapflow.runs.store import APPROVED
from wapflow.writing.modes import Changes

# A merge or replace re-applied this many times on a main that kept moving fails as a transient conflict.
MAX_REAPPLY = 3


def publish(run: Run) -> None:
    """Publish (or block, or hold for review), and record the outcome: a caller driving the steps one by one
    needs no run()."""
    if run.already_published is None and run.lh.tables.exists(run.target):
        # A publish replayed after a crash (or a retried step) finds its rows on main: nothing twice.
        run.already_published = find_published(run.lh.tables, run.target, run.run_id)
    if run.already_published is None and not run.branch_as_recorded():
        return  # another process went on with the run: write and audit again from what its branch holds
    if run.already_published is not None:
        staging = run.staging_name()
        # Found published by prepare from the catalog's metadata: Spark starts only if a sandbox is left to drop.
        if run.lh.sandbox_left(run.branch, run.run_tables(), staging):
            with run.timer("cleanup"):
                run.lh.branches.discard(run.branch, run.run_tables())
                if run.lh.tables.exists(staging):
                    run.lh.tables.drop(staging)
        mark_published(run, run.already_published, "already")
        run.message = f"run {run.run_id} was already published (snapshot {run.already_published}); nothing to do"
    else:
        assert run.report is not None
        done = None
        moved = False
        held = run.report.passed and held_for_review(run)
        if held:
            _hold(run)
        elif run.report.passed:
            with (
                run.timer("publish"),
                run.lh.store.publish_lock(run.target.dotted, timeout=run.lh.config.lakehouse.publish_lock_timeout),
            ):
                crash_point("publish:locked")
                moved = _main_moved_under_change(run)
                if not moved:
                    recheck_main(run)
                if not moved and run.report.passed:
                    try:
                        record_approval(run)
                        done = _publish_locked(run)
                    except MainMoved:
                        moved = True  # main moved after the look above (a writer that takes no wapflow lock)
        if moved:
            _rewind(run)
            return
        if done is not None:
            mark_published(run, done.heads.get(run.target.dotted), done.method)
            if done.leftover:
                run.lh.progress(
                    f"warning: published, but {done.leftover}; drop it with `wap discard {run.branch}"
                    f" --table {run.target}`"
                )
        elif not held:
            _block(run)
    run.record.finished_at = datetime.now(UTC)
    run.save()


def held_for_review(run: Run) -> bool:
    """The table's `review` holds this run for a person (not yet approved by one)."""
    assert run.report is not None
    return run.record.review != APPROVED and run.table_cfg.holds_for_review(bool(run.report.warned))


def _hold(run: Run) -> None:
    """Stop before publish as awaiting_review: the branch kept, main unchanged, the commands to decide."""
    assert run.report is not None
    run.record.status, run.record.snapshot_id = AWAITING_REVIEW, None
    run.record.branch_kept = run.written()
    warned = ", ".join(c.name for c in run.report.warned)
    why = f"warning(s) {warned}" if warned else f'review = "{run.table_cfg.review}" for {run.target}'
    where = f"staging table {run.staging}" if run.staging is not None else run.lh.branches.describe(run.branch)
    run.message = (
        f"awaiting review ({why}); main unchanged; rows kept on {where} "
        f"(report: wap report {run.run_id}; publish: wap approve {run.run_id} --reason ...; "
        f"drop: wap reject {run.run_id} --reason ...)"
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
    run.write_options(empty.writeTo(run.lh.branches.write_target(run.target, run.branch))).append()
    run.run_snapshots = run.branch_snapshots()
    run.save()


def _publish_locked(run: Run) -> PublishedRun:
    """Move main to the run's rows and drop the sandbox; the caller holds the table's publish lock."""
    assert run.report is not None
    if run.staging is not None:
        return _publish_staged(run)
    if run.report.quarantined_rows:
        run.lh.progress(f"publishing {run.report.quarantined_rows} quarantined row(s)")
    run.lh.progress(f"publishing {run.lh.branches.describe(run.branch)} to main")
    return run.lh.branches.publish(run.branch, run.run_id, slices(run), lambda sl: _after_slice(run, sl))


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


def _main_moved_under_change(run: Run) -> bool:
    """A merge or replace whose branch no longer starts at main's head (another run published meanwhile)."""
    if run.staging is not None or not run.run_snapshots or not run.outcome().change:
        return False
    tables = run.lh.tables
    if not tables.exists(run.target):  # a table the run created on its Nessie branch: main has none to move
        return False
    tables.refresh(run.target)  # other processes' publishes, not this process's cached metadata
    return tables.head(run.target, "main") != run.base


def _rewind(run: Run) -> None:
    """Send a merge or replace back to write: its branch (made from a main that has moved since) is dropped,
    and the state returns to just after prepare, so write applies the change to a fresh branch of the new
    main, and audit judges that change. Bounded: a main that keeps moving fails the run as a transient
    conflict (a retry with the same run id starts over)."""
    mode = run.outcome().mode
    if run.reapplied >= MAX_REAPPLY:
        raise CommitConflict(
            f"main of {run.target} moved during each of {run.reapplied + 1} attempts to publish this {mode}",
            hint=f"retry the run (`wap run ... --run-id {run.run_id}`) when fewer runs publish to the table",
        )
    run.lh.progress(
        f"main of {run.target} moved since {run.lh.branches.describe(run.branch)} was made: applying the "
        f"{mode} again on a fresh branch of main"
    )
    run.lh.branches.discard(run.branch, run.run_tables())
    run.reapplied += 1
    run.back_to_write()


def _after_slice(run: Run, sl: RunSlice) -> None:
    crash_point("publish:moved" if sl.table == run.target else "publish:quarantine-published")


def mark_published(run: Run, snapshot_id: int | None, via: str) -> None:
    """Record a publish done by this run or, for multi-table runs, by the group's single merge."""
    assert run.report is not None or via == "already"
    run.record.status, run.record.snapshot_id, run.record.branch_kept = "published", snapshot_id, False
    run.published_via = via
    if via == "already" or run.report is None:
        return
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


def _publish_staged(run: Run) -> PublishedRun:
    """New columns the sandbox could not hold: main's schema changes only now, then the staged rows are
    appended to the run's branch and published from there."""
    tables, branches = run.lh.tables, run.lh.branches
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
    done = branches.publish(
        run.branch,
        run.run_id,
        [RunSlice(run.target, run.base, tuple(mine), run.snapshot_properties())],
        lambda sl: _after_slice(run, sl),
    )
    tables.drop(run.staging)
    return done


def _block(run: Run) -> None:
    assert run.report is not None
    tables, branches = run.lh.tables, run.lh.branches
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
