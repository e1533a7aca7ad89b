"""The write step: the batch onto the run's branch (or a staging table, or split with its quarantine table);
main and its readers see nothing. A write resumed after a crash finds its rows instead of writing them twice,
and a failed write leaves nothing behind."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wapflow.audit.checks import QUARANTINE_COLUMN, AuditPlan, validate_checks
from wapflow.audit.report import AuditReport, CheckResult
from wapflow.errors import CommitConflict, UsageError, WapError
from wapflow.faults import crash_point
from wapflow.files.spark_paths import SparkInputs
from wapflow.lakehouse import layout as table_layout
from wapflow.lakehouse.lineage import find_published
from wapflow.lakehouse.model import FORMAT_VERSION_PROP
from wapflow.pipeline import frames
from wapflow.pipeline.steps import adopt
from wapflow.pipeline.steps.context import Run
from wapflow.spark import errors as spark_errors
from wapflow.spark.shared_session import CO_PARTITIONED_JOIN
from wapflow.writing.input_errors import input_error_from_spark
from wapflow.writing.modes import MergeMode, WriteMode, write_mode
from wapflow.writing.plan import WriteCase, WriteFacts, WritePlan, plan_write
from wapflow.writing.read import read_batch
from wapflow.writing.schema import ContractViolation, apply_contract


def created_meanwhile(e: BaseException) -> bool:
    """Creating a table failed because it exists: another run created it since this one looked. By the Java
    class on a classic session, by Spark's error condition on Spark Connect (no Java classes reach a client)."""
    return spark_errors.raised(e, *_ALREADY_EXISTS) or "TABLE_OR_VIEW_ALREADY_EXISTS" in spark_errors.conditions(e)


_ALREADY_EXISTS = (
    "org.apache.iceberg.exceptions.AlreadyExistsException",
    "org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException",
)


def write(run: Run) -> None:
    """Append the batch to the run's branch (or staging table); main and its readers see nothing."""
    if run.already_published is None and run.lh.tables.exists(run.target):
        # A write replayed after the run was published (a retry with an old state) writes nothing.
        run.already_published = find_published(run.lh.tables, run.target, run.run_id)
    if run.already_published is not None:
        return
    # Spark gets exactly these files (safe-named links where a name would be globbed, hidden or
    # unreadable to Hadoop); they live until the write job that reads them is done.
    run.inputs = SparkInputs(run.files)
    try:
        _write(run)
    finally:
        run.inputs.close()
        run.inputs = None


@dataclass
class _Batch:
    """The batch as the write applies it: read, under the table's schema contract, validated against the
    table's mode (whose instance knows what problems() found) and layout."""

    df: Any
    mode: WriteMode
    layout: Any
    fit: adopt.Adoptable | str | None = None  # adopt.check's answer, once the plan's facts are read


def _write(run: Run) -> None:
    """Resume, or: prepare the batch (or block it), settle the table, plan the write once, run its case's
    strategy; the outcome goes into the run's state for the audit and publish."""
    with run.timer("write"):
        # A sandbox spanning the catalog (Nessie) exists before anything, table creation included, happens in it.
        run.opened_branch = run.lh.iceberg.open(run.branch)
        exists = run.wt().exists(run.target)
        mode = write_mode(run.table_cfg)
        if exists and not run.opened_branch and run.written_by is None and _resume(run):
            run.write_outcome = run.outcome_of("resumed", mode)
            return
        batch = _prepared(run, mode, exists)
        if batch is None:
            return  # blocked before anything was written (the outcome says so)
        _settle_table(run, batch, exists)
        try:
            plan = plan_write(_facts(run, batch))
        except Exception as e:
            _undo_write(run)
            raise _classify(run, e) from e
        STRATEGIES[plan.case](run, plan, batch)
        run.write_outcome = run.outcome_of(plan.case, mode)


def _prepared(run: Run, mode: WriteMode, exists: bool) -> _Batch | None:
    """The batch read and validated, before anything is written; None when it is blocked (an audit outcome)."""
    tables = run.wt()
    assert run.fmt is not None  # set by prepare
    if not run.frame:
        run.lh.progress(f"reading {len(run.files)} file(s) as {run.fmt}")
    try:
        table_schema = tables.schema(run.target) if exists else None
        if table_schema is not None:
            mode.validate_table(run.target.dotted, table_schema.fieldNames())
        df = _batch(run, table_schema, mode.reapplies)
        if table_schema is not None:
            contract = apply_contract(
                df,
                table_schema,
                table=run.target.dotted,
                policy=run.table_cfg.schema_policy,
                files=run.record.files,
            )
            df, run.new_columns = contract.df, contract.new_columns
            run.schema_changes = contract.report()
            for note in run.schema_changes:
                run.lh.progress(note)
        else:
            df.schema  # noqa: B018 - forces schema inference so unreadable files fail before any DDL
    except ContractViolation as e:
        # The batch does not fit the table's schema contract: an audit outcome, decided before
        # anything is written (blocked, exit 1), not a failure to read the files.
        _block_on_schema(run, e, mode)
        return None
    except WapError:
        raise
    except Exception as e:
        raise _classify(run, e) from e
    validate_checks(
        run.checks,
        df,
        table=run.target.dotted,
        table_exists=tables.exists,
        table_columns=lambda t: tables.schema(t).fieldNames(),
    )
    run.plan = AuditPlan.for_batch(run.checks, df.columns, table=run.target.dotted, key=run.table_cfg.sample_key())
    # partition_by / sort_by against the batch's columns: a config error before any table or row changes.
    layout = table_layout.for_batch(run.table_cfg.layout(), df.schema, run.target, run.new_columns, run.lh.progress)
    mode.validate(df, run.target.dotted)
    blocked = mode.problems(df)
    if blocked:
        # NULL or duplicate merge keys, rows outside replace_where: an audit outcome, before any write.
        _block_before_write(run, blocked, f"the batch cannot be applied to {run.target} as mode {mode.name}", mode)
        return None
    return _Batch(df, mode, layout)


def _settle_table(run: Run, batch: _Batch, exists: bool) -> None:
    """The table as every case writes into it: created (a new table), its layout evolved, its mode checked
    against it, and new columns added inside a sandbox that isolates schema changes (a Nessie branch)."""
    tables, branches, layout = run.wt(), run.lh.iceberg, batch.layout
    if not exists:
        run.lh.progress(f"creating table {run.target}" + (f" ({layout.describe()})" if layout.describe() else ""))
        try:
            tables.ensure_namespace(run.target)
        except Exception:
            # Two runs creating one namespace at once: the loser's insert fails, the namespace is there.
            if not tables.namespace_exists(run.target):
                raise
        try:
            tables.create_like(run.target, batch.df, *table_layout.creation(layout))
        except Exception as e:
            if created_meanwhile(e):
                # Another run created it since this one looked: a retry writes into it (under its contract).
                raise CommitConflict(
                    f"{run.target} was created by another run at the same time",
                    hint="retry: the run then writes into the table that now exists",
                ) from e
            raise
        run.created_table = True
        crash_point("write:table-created")
    try:
        table_layout.evolve(tables, run.target, layout, run.lh.progress)  # a table-level change: see its module
        batch.mode.check_table(run.lh.spark, tables.ident(run.target), run.target.dotted)
        if isinstance(batch.mode, MergeMode):
            batch.mode.join_confs = _join_confs(run, batch.mode)
    except Exception:
        _undo_write(run)  # a table this run created goes (with a sandbox it opened); nothing else was written
        raise
    if run.new_columns and branches.add_columns(run.target, run.branch, run.new_columns):
        # The sandbox isolates schema changes too (a Nessie branch): main keeps its schema, no staging.
        run.lh.progress(f"added column(s) {', '.join(f.name for f in run.new_columns)} on branch {run.branch}")
        run.new_columns = []


def _facts(run: Run, batch: _Batch) -> WriteFacts:
    """What the plan is decided from (reads only: the batch's schema, the table's metadata, the files' footers)."""
    mode, df = batch.mode, batch.df
    assert run.plan is not None  # built by _prepared
    fit = batch.fit = adopt.check(run, mode, df)
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    return WriteFacts(
        mode=mode.name,
        change=mode.reapplies,
        keys_after_write=mode.keys_after_write,
        new_columns=tuple(f.name for f in run.new_columns),
        quarantine=run.quarantine is not None and run.plan.quarantinable,
        adoptable=isinstance(fit, adopt.Adoptable),
        not_adopted=fit if isinstance(fit, str) else None,
        checks=bool(run.checks),
        counts_only=run.plan.counts_only(bounds=types),
        fmt=run.fmt,
        adopt_parquet=run.table_cfg.adopt_parquet,
        reapplied=run.reapplied,
        engine_wrote=run.written_by is not None,
    )


# --- one strategy per case (writing.plan) --------------------------------------------------------------------

Strategy = Callable[[Run, WritePlan, _Batch], None]
# A case written on the run's branch: returns the Observation its job filled (None: nothing observed there).
_OnBranch = Callable[[Run, WritePlan, _Batch], Any]


def _on_branch(body: _OnBranch) -> Strategy:
    """A case that writes on the run's branch: the branch made from main (its base saved first, so a resumed
    run finds it), the case's commits, and after them the run's snapshots and what the write observed; a
    failed write leaves nothing behind."""

    def strategy(run: Run, plan: WritePlan, batch: _Batch) -> None:
        run.base = run.lh.iceberg.create(run.target, run.branch)
        run.record.base_snapshot_id = run.base
        run.save()
        crash_point("write:branch-created")
        started = time.time()
        run.observed = None
        try:
            observation = body(run, plan, batch)
        except Exception as e:
            _undo_write(run, since=started)
            raise _classify(run, e) from e
        crash_point("write:appended")
        run.run_snapshots = run.branch_snapshots()
        if observation is not None:
            run.observed = dict(observation.get)
        if run.observed is not None:
            written = sum(s.added_records for s in run.run_snapshots) + sum(s.added_records for s in run.q_snapshots)
            if int(run.observed.get("_rows") or 0) != written:
                # Never trust metrics that do not describe exactly the rows committed: re-scan instead.
                run.observed = None

    strategy.__name__ = body.__name__
    strategy.__doc__ = body.__doc__
    return strategy


def _observation(run: Run, suffix: str = "") -> Any:
    """Row-level checks computed by the write job itself: auditing them costs no extra scan."""
    from pyspark.sql import Observation

    return Observation(f"wap_audit_{run.run_id}{suffix}")


def _change(run: Run, plan: WritePlan, batch: _Batch) -> Any:
    """Merge or replace (applied again on a fresh branch when main moved): the table's write mode applies the
    batch in one commit that carries the run's snapshot properties (a resumed write finds it: write.modes);
    with a quarantine, its failing changes go to the quarantine table's branch first."""
    mode = batch.mode
    run.lh.progress(f"{mode.name} into branch {run.branch}")
    if plan.quarantine:
        _split(run, mode.source(batch.df), mode, None)
    else:
        target = run.lh.iceberg.write_target(run.target, run.branch)
        mode.write(run.lh.spark, mode.source(batch.df), target, run.snapshot_properties())
    return None


def _quarantine_split(run: Run, plan: WritePlan, batch: _Batch) -> Any:
    """An append whose rows failing the row checks go to the quarantine table's branch."""
    run.lh.progress(f"writing to branch {run.branch}")
    observation = _observation(run) if plan.observe else None
    _split(run, batch.df, batch.mode, observation)
    return observation


def _adopt(run: Run, plan: WritePlan, batch: _Batch) -> Any:
    """The landed parquet files are the table's rows as they are: copied, not rewritten (adopt). A file that
    changed since it was listed: the rows are rewritten (the append plan) instead."""
    run.lh.progress(f"writing to branch {run.branch}")
    fit = batch.fit
    assert isinstance(fit, adopt.Adoptable), fit  # the plan's fact
    observation = _observation(run) if plan.observe else None
    how = adopt.adopt(run, fit, batch.df, observation)
    if how is None:
        assert plan.fallback is not None
        return _rewrite(run, plan.fallback, batch)
    # "decoded": Arrow decoded them here, and run.observed holds their row count.
    return None if how == "decoded" else observation


def _append(run: Run, plan: WritePlan, batch: _Batch) -> Any:
    """A Spark append of the batch to the run's branch."""
    run.lh.progress(f"writing to branch {run.branch}")
    if plan.note:
        run.lh.progress(plan.note)
    return _rewrite(run, plan, batch)


def _rewrite(run: Run, plan: WritePlan, batch: _Batch) -> Any:
    df = batch.df
    assert run.plan is not None
    # An Observation serves one query: a scan for adoption that fell back (parquet) may have used the first.
    observation = _observation(run, "_write" if run.fmt == "parquet" else "") if plan.observe else None
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    # An append: the audit reads its files' Iceberg counts, so what they answer is not observed.
    out = df.observe(observation, *run.plan.observable(counted=True, bounds=types)) if observation else df
    run.write_options(out.writeTo(run.lh.iceberg.write_target(run.target, run.branch))).append()
    return observation


def _staged(run: Run, plan: WritePlan, batch: _Batch) -> None:
    """New columns: the batch waits in a staging table so main's schema stays as it is until publish."""
    run.staging = run.staging_name()
    run.lh.progress(f"new column(s): staging the batch in {run.staging} until publish")
    observation = _observation(run) if plan.observe else None
    assert run.plan is not None  # built by the write before staging
    out = batch.df.observe(observation, *run.plan.observable()) if observation else batch.df
    try:
        run.write_options(
            out.writeTo(run.lh.tables.ident(run.staging)).using("iceberg").tableProperty(FORMAT_VERSION_PROP, "2")
        ).create()
    except Exception as e:
        run.lh.tables.drop(run.staging)
        raise _classify(run, e) from e
    crash_point("write:appended")
    if observation is not None:
        run.observed = dict(observation.get)


def _engine(run: Run, plan: WritePlan, batch: _Batch) -> None:
    """Rows a pipeline engine wrote on the run's branch (RunState.written_by): its commits since `base` (main's
    head when the engine started) are the run's snapshots, as they are. Nothing is written."""
    run.wt().refresh(run.target)
    run.run_snapshots = run.branch_snapshots()
    run.record.base_snapshot_id = run.base
    run.lh.progress(f"{run.target}: {len(run.run_snapshots)} commit(s) by {run.written_by} on branch {run.branch}")


STRATEGIES: dict[WriteCase, Strategy] = {
    "staged": _staged,
    "change": _on_branch(_change),
    "quarantine_split": _on_branch(_quarantine_split),
    "adopt": _on_branch(_adopt),
    "append": _on_branch(_append),
    "engine": _engine,
}


def _batch(run: Run, table_schema: Any, change: bool) -> Any:
    """The run's batch: the DataFrame given in this process (RunState.frame), or its files read. A change
    (merge, replace) reads its DataFrame as held once (frames.stable): the audit reads it again."""
    if run.frame:
        return frames.stable(run.run_id) if change else frames.frame_of(run.run_id)
    assert run.fmt is not None
    return read_batch(
        run.lh.spark,
        run.files,
        run.fmt,
        run.table_cfg.read_options,
        table_schema,
        run.lh.storage,
        inputs=run.inputs,
    )


def batch_of(run: Run) -> Any:
    """The run's batch read again (from its files, or the DataFrame given), under the table's schema contract,
    as the write applied it (a later step of a merge or replace audits it; run.inputs must be open)."""
    tables = run.wt()
    schema = tables.schema(run.target)
    df = _batch(run, schema, run.outcome().change)
    return apply_contract(
        df, schema, table=run.target.dotted, policy=run.table_cfg.schema_policy, files=run.record.files
    ).df


def _block_on_schema(run: Run, e: ContractViolation, mode: WriteMode) -> None:
    policy = run.table_cfg.schema_policy
    result = CheckResult(
        name="schema",
        check="schema",
        severity="error",
        status="failed",
        observed=" ".join(line.strip() for line in e.message.splitlines()),
        failing_rows=0,
        threshold=f'schema = "{policy}"',
        source="write",
        samples=[{"difference": line} for line in e.problems],
    )
    _block_before_write(run, [result], f"the batch does not match the schema of {run.target}", mode)


def _block_before_write(run: Run, failed: list[CheckResult], why: str, mode: WriteMode) -> None:
    """An audit outcome found before anything is written: the run is blocked with these failed checks."""
    _undo_write(run)  # a Nessie branch this run opened for the write; nothing else exists yet
    run.opened_branch = False
    run.write_outcome = run.outcome_of("blocked", mode)
    run.report = AuditReport(rows=0, checks=failed)
    run.record.rows_written = 0
    run.record.checks = [c.to_dict() for c in run.report.checks]
    run.lh.progress(f"{why}: blocked before writing")


def _resume(run: Run) -> bool:
    """After a crash: True when the write completed (the branch or staging table holds this run's rows).

    The table's own branch is written last, so its rows prove the whole write happened. A branch
    that holds nothing beyond main, or only this run's partial write (quarantined rows without the
    good ones), is this run's own unfinished write: it is dropped and the write starts over.
    """
    tables, branches = run.wt(), run.lh.iceberg
    staging = run.staging_name()
    if tables.exists(staging):
        if any(s.run_id == run.run_id for s in tables.snapshots(staging).values()):
            run.staging = staging
            run.lh.progress(f"staging table {staging} already holds run {run.run_id}'s rows; resuming")
            return True
        tables.drop(staging)  # created, never filled: write again
    if not branches.exists(run.target, run.branch):
        _reset_quarantine_branch(run)
        return False
    mine = run.branch_snapshots()
    if not mine:
        if not run.only_this_run_beyond_main(run.target):
            raise UsageError(
                f"branch {run.branch} of {run.target} already exists and holds another run's data",
                hint=f"pick another --branch, or drop it with `wap discard {run.branch} --table {run.target}`",
            )
        run.lh.progress(f"branch {run.branch} holds no rows of run {run.run_id} for {run.target}; writing")
        branches.reset(run.target, run.branch, [])
        _reset_quarantine_branch(run)
        return False
    run.run_snapshots = mine
    run.base = mine[0].parent_id
    run.record.base_snapshot_id = run.base
    if run.quarantine is not None and tables.exists(run.quarantine) and branches.exists(run.quarantine, run.branch):
        run.q_snapshots = run.branch_snapshots(run.quarantine)
        run.q_base = run.q_snapshots[0].parent_id if run.q_snapshots else None
    run.lh.progress(f"branch {run.branch} already holds run {run.run_id}'s rows; resuming")
    return True


def _reset_quarantine_branch(run: Run) -> None:
    """Quarantined rows of an unfinished write (the good rows never landed) are written again: drop them."""
    if run.quarantine is None:
        return
    tables, branches = run.wt(), run.lh.iceberg
    if not (tables.exists(run.quarantine) and branches.exists(run.quarantine, run.branch)):
        return
    if not run.only_this_run_beyond_main(run.quarantine):
        raise UsageError(
            f"branch {run.branch} of {run.quarantine} already exists and holds another run's data",
            hint=f"pick another --branch, or drop it with `wap discard {run.branch} --table {run.quarantine}`",
        )
    branches.reset(run.quarantine, run.branch, run.branch_snapshots(run.quarantine))
    run.q_snapshots, run.q_base = [], None


def _split(run: Run, df: Any, mode: WriteMode, observation: Any) -> None:
    """Quarantine: good rows to the table's branch (appended, or applied by the merge), failing rows to the
    quarantine table's branch. Only the rows the row checks judge are diverted (a merge's latest change per
    key, not its deletes): a quarantined change leaves its key on the table as it was."""
    from pyspark.sql import functions as F

    assert run.plan is not None and run.quarantine is not None
    tables, branches = run.wt(), run.lh.iceberg
    marked = df.withColumn(QUARANTINE_COLUMN, run.plan.quarantine_flags())
    failing = (F.size(QUARANTINE_COLUMN) > 0) & mode.judged()
    source = marked.observe(observation, *run.plan.observable()) if observation is not None else marked
    good = source.where(~failing).drop(QUARANTINE_COLUMN)
    bad = (
        mode.audited(marked.where(failing))
        .withColumn("_wap_run_id", F.lit(run.run_id))
        .withColumn("_wap_quarantined_at", F.current_timestamp())
    )
    if not tables.exists(run.quarantine):
        tables.create_like(run.quarantine, bad)
    run.q_base = branches.create(run.quarantine, run.branch)
    # Failing rows first: the table's own branch is written last, so a resumed run can tell a
    # complete write (the table's branch holds the run's rows) from one cut short.
    run.write_options(bad.writeTo(branches.write_target(run.quarantine, run.branch))).append()
    crash_point("write:quarantine-appended")
    mode.write(run.lh.spark, good, branches.write_target(run.target, run.branch), run.snapshot_properties())
    run.q_snapshots = run.branch_snapshots(run.quarantine)


def _join_confs(run: Run, mode: MergeMode) -> dict[str, str]:
    """A storage-partitioned join for the MERGE where the table's partitions are a function of the key (the
    settings wap.toml's `[lakehouse] spark_conf` names are the user's: those stay as the user set them)."""
    if not table_layout.keyed(table_layout.current(run.wt(), run.target), mode.key):
        return {}
    own = run.lh.config.lakehouse.spark_conf
    return {k: v for k, v in CO_PARTITIONED_JOIN.items() if k not in own}


def _undo_write(run: Run, since: float | None = None) -> None:
    """A failed write leaves nothing behind: the sandbox it opened, or its part of it, a table this run
    created, and (`since`: when its Spark write began) the data files it left unreferenced."""
    branches, tables = run.lh.iceberg, run.wt()
    if since is not None:
        _remove_partial_files(run, since)
    try:
        if run.opened_branch:
            branches.discard(run.branch, run.run_tables())
            return
        for t in run.run_tables():
            if tables.exists(t) and branches.exists(t, run.branch):
                branches.reset(t, run.branch, run.branch_snapshots(t))
        if run.created_table:
            tables.drop(run.target)
    except Exception as e:  # noqa: BLE001 - cleanup must not hide the write's own error
        run.lh.progress(f"warning: cleanup after failed write: {spark_errors.describe(e)}")


def _classify(run: Run, e: BaseException) -> WapError:
    """A failure of the write job: the run's input (by Spark's error condition, naming the file), or not."""
    named = spark_errors.classify(e, doing=f"writing {run.target}")
    if named is not None:
        return named  # the catalog, the warehouse or the network, not the files
    bad_input = input_error_from_spark(e, run.files, fmt=run.fmt, options=run.table_cfg.read_options)
    if bad_input is not None:
        return bad_input
    return spark_errors.unexpected_bug(e, run_id=run.run_id, step="write")


def _remove_partial_files(run: Run, since: float) -> None:
    """Delete the data files a failed write left behind on a local warehouse (a full disk cuts a file short;
    deleting needs no space, so this frees it at once). Only while no other run of the table is running: its
    files are not referenced by any snapshot yet either. Otherwise `wap maintain`'s orphan removal takes them."""
    try:
        others = [
            r
            for r in run.lh.store.list(table=run.target.dotted, limit=50)
            if r.run_id != run.run_id and r.status == "running" and not r.interrupted
        ]
        if others:
            run.lh.progress(
                f"leaving the failed write's files: run {others[0].run_id} is writing to {run.target} too "
                "(`wap maintain` removes orphan files)"
            )
            return
        left = run.wt().unreferenced_local_files(run.target, since)
        for path in left:
            path.unlink(missing_ok=True)
        if left:
            run.lh.progress(f"removed {len(left)} file(s) the failed write left in {run.target}")
    except Exception as e:  # noqa: BLE001 - cleanup must not hide the write's own error
        run.lh.progress(f"warning: could not remove the failed write's files: {spark_errors.describe(e)}")
