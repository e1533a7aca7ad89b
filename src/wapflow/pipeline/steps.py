"""The steps of one run: prepare, write, audit, publish, each a function RunState -> RunState.

A step rebuilds what it works with (table names, checks, snapshots, the audit report) from the
state and the configuration, does its work, and returns the next state; nothing survives a step
except what that state holds, so each step may run in another process (a durable executor's
worker) or run again after a crash. Running a step twice with the same input changes nothing the
second time: a write finds its rows on the branch, a publish finds them on main.

A failed step does not raise: it records the failure (run store, state.record["error"] with its
kind and whether a retry can help) and returns the failed state, so every outcome is recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from pydantic import TypeAdapter, ValidationError

from wapflow.audit.checks import QUARANTINE_COLUMN, AuditContext, AuditPlan, FileMetrics, evaluate, validate_checks
from wapflow.audit.report import AuditReport, CheckResult
from wapflow.audit.spec import CHECK_MODELS
from wapflow.config import Check, NotNullCheck
from wapflow.errors import CommitConflict, UsageError, WapError, bug
from wapflow.faults import crash_point
from wapflow.lakehouse import spark_errors
from wapflow.lakehouse.branches import PublishedRun, RunSlice
from wapflow.lakehouse.identifiers import TableName, validate_branch
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.tables import FILES_HASH_PROP, RUN_ID_PROP, SOURCE_SNAPSHOT_PROP, SOURCES_PROP, Snapshot
from wapflow.pipeline.result import RunResult
from wapflow.pipeline.state import (
    STEPS,
    RunState,
    Step,
    record_from_data,
    record_to_data,
    report_from_data,
    report_to_data,
    snapshot_from_data,
    snapshot_to_data,
)
from wapflow.publish import find_published
from wapflow.runs.store import RunRecord, current_owner, owner_alive
from wapflow.storage.files import FileIdentity, SkippedFile
from wapflow.write.schema import ContractViolation, apply_contract
from wapflow.write.sources import (
    SparkInputs,
    detect_format,
    input_error_from_spark,
    read_batch,
    resolve_sources,
)

_CHECKS: TypeAdapter[Check] = TypeAdapter(Check)


def _check(data: dict[str, Any]) -> Check:
    """A check the caller added, back from the state. One that its own declaration rules refuse (built with
    model_construct, or edited into a state) is kept as given: the write step's validate_checks then
    refuses it with the table named and nothing written, as it did before runs were data."""
    try:
        return _CHECKS.validate_python(data)
    except (ValidationError, WapError):
        model = CHECK_MODELS.get(str(data.get("check")))
        if model is None:
            raise
        return cast(Check, model.model_construct(**data))


def quarantine_of(table: TableName) -> TableName:
    """Where rows failing a table's row-level checks go under on_row_failure = "quarantine"."""
    return TableName(table.namespace, f"{table.name}__quarantine")


def new_run_id() -> str:
    """Sortable by time, unique across machines, and safe in branch names and SQL."""
    return datetime.now(UTC).strftime("%Y%m%dt%H%M%S") + "_" + secrets.token_hex(3)


def validate_run_id(run_id: str) -> str:
    validate_branch(run_id)
    return run_id


def files_fingerprint(ids: list[dict[str, Any]]) -> str:
    """One short hash of a set of file identities (stored on the run's snapshots)."""
    rows = sorted([i["uri"], i.get("size"), i.get("version")] for i in ids)
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:32]


def _describe_files(ids: list[dict[str, Any]], limit: int = 5) -> str:
    shown = [f"{i['uri']} ({i.get('size')} bytes, {i.get('version')})" for i in ids[:limit]]
    more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
    return ", ".join(shown) + more


def new_state(
    table: str,
    sources: list[str],
    *,
    branch: str | None = None,
    run_id: str | None = None,
    extra_checks: list[Check] | None = None,
    not_null: list[str] | None = None,
) -> RunState:
    """The state of a run nothing has happened to yet (names are validated by prepare)."""
    rid = validate_run_id(run_id) if run_id else new_run_id()
    checks: list[Check] = list(extra_checks or [])
    checks += [NotNullCheck(check="not_null", column=col) for col in not_null or []]
    rec = RunRecord(run_id=rid, table_name=table, status="running", branch=branch, files=list(sources))
    return RunState(
        run_id=rid,
        table=table,
        patterns=list(sources),
        branch=branch,
        extra_checks=[c.model_dump(mode="json") for c in checks],
        record=record_to_data(rec),
    )


class LiveRun:
    """A run's state, hydrated for one step: typed values rebuilt from a RunState, and back (freeze)."""

    def __init__(self, lakehouse: Lakehouse, state: RunState) -> None:
        s = state
        self.lh = lakehouse
        self.run_id = s.run_id
        self.table_text = s.table
        self.patterns = list(s.patterns)
        self.branch: str = s.branch or f"wap_{s.run_id}"  # validated by prepare
        self.extra_checks = [dict(c) for c in s.extra_checks]
        self.rec = record_from_data(s.record)
        self.done = list(s.done)
        self.sources = [FileIdentity.from_dict(d) for d in s.sources]
        self.skipped = [SkippedFile(**d) for d in s.skipped]  # bookkeeping files (_SUCCESS, .crc) not read
        self.skipped_note = s.skipped_note
        self.fmt = s.fmt
        self.record_owned = s.record_owned  # False when this call is refused for a run id another attempt owns
        self.already_published = s.already_published
        self.base = s.base
        self.run_snapshots = [snapshot_from_data(d) for d in s.run_snapshots]
        # Quarantine: rows failing row-level error checks go to <table>__quarantine's branch.
        self.q_base = s.q_base
        self.q_snapshots = [snapshot_from_data(d) for d in s.q_snapshots]
        # Schema evolution (schema = "add_columns"): the batch waits in a staging table.
        self.staging = TableName.parse(s.staging) if s.staging else None
        self.schema_changes = list(s.schema_changes)
        self.created_table = s.created_table
        # Catalog-level branches (Nessie): whether this run created its branch (a failed write then
        # deletes it, whatever it holds).
        self.opened_branch = s.opened_branch
        self.observed = dict(s.observed) if s.observed is not None else None
        self.report = report_from_data(s.report) if s.report is not None else None
        # main's head per table, as read by the checks that depend on main (re-checked at publish).
        self.main_heads = dict(s.main_heads)
        self.published_via = s.published_via
        self.message = s.message
        # Rebuilt by each step, never part of the state.
        self.inputs: SparkInputs | None = None
        self.wt: Any = None  # tables where the run's rows live (a Nessie branch's catalog, or the catalog)
        self.plan: AuditPlan | None = None
        self.new_columns: list[Any] = []
        self.checks: list[Check] = [_check(c) for c in self.extra_checks]
        self.quarantine: TableName | None = None
        if "prepare" in self.done:
            self._derive()

    def _derive(self) -> None:
        """Names and checks that follow from the state and wap.toml."""
        self.table = TableName.parse(self.table_text)
        self.table_cfg = self.lh.config.table(self.table.dotted)
        self.checks = list(self.table_cfg.checks) + [_check(c) for c in self.extra_checks]
        if self.table_cfg.on_row_failure == "quarantine":
            self.quarantine = quarantine_of(self.table)

    def freeze(self) -> RunState:
        return RunState(
            run_id=self.run_id,
            table=self.table_text,
            patterns=list(self.patterns),
            branch=self.branch,
            extra_checks=self.extra_checks,
            record=record_to_data(self.rec),
            done=list(self.done),
            sources=[f.to_dict() for f in self.sources],
            skipped=[f.to_dict() for f in self.skipped],
            skipped_note=self.skipped_note,
            fmt=self.fmt,
            record_owned=self.record_owned,
            already_published=self.already_published,
            base=self.base,
            run_snapshots=[snapshot_to_data(x) for x in self.run_snapshots],
            q_base=self.q_base,
            q_snapshots=[snapshot_to_data(x) for x in self.q_snapshots],
            staging=self.staging.dotted if self.staging is not None else None,
            schema_changes=list(self.schema_changes),
            created_table=self.created_table,
            opened_branch=self.opened_branch,
            observed=dict(self.observed) if self.observed is not None else None,
            report=report_to_data(self.report) if self.report is not None else None,
            main_heads=dict(self.main_heads),
            published_via=self.published_via,
            message=self.message,
        )

    # --- helpers ------------------------------------------------------------------------------

    def _step(self, name: str) -> _Timer:
        return _Timer(self.rec.timings, name)

    def save(self) -> None:
        if not self.record_owned:
            return  # the record belongs to another attempt of this run id (see prepare)
        try:
            self.lh.store.save(self.rec)
        except Exception as e:  # noqa: BLE001 - the run's own outcome matters more than its record
            self.lh.progress(f"warning: could not record run {self.run_id}: {e}")

    def snapshot_properties(self) -> dict[str, str]:
        """What every snapshot the run commits carries: its run id, files and their fingerprint."""
        return {
            RUN_ID_PROP: self.run_id,
            SOURCES_PROP: ",".join(s.uri for s in self.sources)[:4000],
            FILES_HASH_PROP: files_fingerprint(self.rec.file_ids),
        }

    def write_options(self, writer: Any) -> Any:
        for k, v in self.snapshot_properties().items():
            writer = writer.option(f"snapshot-property.{k}", v)
        return writer

    # --- steps --------------------------------------------------------------------------------

    def _wt(self) -> Any:
        """Tables as the run's sandbox sees them (for a Nessie branch, a catalog bound to it)."""
        if self.wt is None:
            self.wt = self.lh.branches.tables_for(self.branch)
        return self.wt

    def _ref(self) -> str:
        """The Iceberg ref holding the run's rows (its table branch, or main within a Nessie branch)."""
        return self.lh.branches.iceberg_ref(self.branch)

    def prepare(self) -> None:
        """Validate names, resolve files, check idempotence. No data moves."""
        with self._step("prepare"):
            # Nessie down, wrong URL or token: fail here, before any file is read or anything written.
            self.lh.check_catalog()
            self._derive()
            self.branch = validate_branch(self.branch)
            self.rec.branch = self.branch
            previous = self.lh.store.get(self.run_id)
            if previous is not None:
                owner = previous.owner or {}
                if previous.status == "running" and owner_alive(owner) and owner.get("pid") != os.getpid():
                    self.record_owned = False
                    raise UsageError(
                        f"run {self.run_id} is running right now (process {owner.get('pid')} on {owner.get('host')})",
                        hint="wait for it to finish; `wap report " + self.run_id + "` shows its outcome",
                    )
                self.rec.started_at = previous.started_at
                self.base = previous.base_snapshot_id
            self.rec.status = "running"
            self.rec.owner = current_owner()
            self.save()
            self.lh.progress(f"run {self.run_id}")
            found = resolve_sources(self.patterns, storage=self.lh.storage)
            self.sources = list(found)
            self.skipped = list(found.skipped)
            self.skipped_note = found.skipped_message()
            if self.skipped_note is not None:
                self.lh.progress(self.skipped_note)
            self.rec.files = [s.uri for s in self.sources]
            self.rec.file_ids = [f.to_dict() for f in self.sources]
            if previous is not None and previous.file_ids and not self._same_files(previous.file_ids):
                # Refused: the run id's record stays as it was (e.g. published), not this call's.
                self.lh.store.save(previous)
                self.record_owned = False
                self._refuse_other_files(previous.file_ids)
            self.fmt = detect_format(self.sources, self.table_cfg.format)
            tables = self.lh.tables
            if tables.exists(self.table):
                self.already_published = find_published(tables, self.table, self.run_id)
                if self.already_published is not None and (previous is None or not previous.file_ids):
                    self._same_files_as_published()
            self.save()
            crash_point("prepare")

    def _same_files(self, before: list[dict[str, Any]]) -> bool:
        return files_fingerprint(before) == files_fingerprint(self.rec.file_ids)

    def _refuse_other_files(self, before: list[dict[str, Any]]) -> None:
        """A run id stands for one set of files: resuming it with other (or changed) files is an error."""
        raise UsageError(
            f"run {self.run_id} was started with {len(before)} file(s): {_describe_files(before)}; "
            f"this call names {len(self.rec.file_ids)} file(s): {_describe_files(self.rec.file_ids)}",
            hint="a run id means one set of files: to resume the run, pass the same files unchanged; "
            "to ingest other files, start a new run (leave out --run-id)",
        )

    def _same_files_as_published(self) -> None:
        """No run record (another machine's store, or lost): compare with the fingerprint on main's snapshot."""
        tables = self.lh.tables
        snaps = tables.snapshots(self.table)
        published = snaps.get(self.already_published) if self.already_published is not None else None
        src = published.summary.get(SOURCE_SNAPSHOT_PROP) if published else None
        origin = snaps.get(int(src)) if src and src.isdigit() else published
        recorded = origin.summary.get(FILES_HASH_PROP) if origin else None
        if recorded is None or recorded == files_fingerprint(self.rec.file_ids):
            return
        files = origin.summary.get(SOURCES_PROP, "?") if origin else "?"
        raise UsageError(
            f"run {self.run_id} was already published (snapshot {self.already_published}) with other files "
            f"({files}); this call names {_describe_files(self.rec.file_ids)}",
            hint="a run id means one set of files: to ingest these files, start a new run (leave out --run-id)",
        )

    def write(self) -> None:
        """Append the batch to the run's branch (or staging table); main and its readers see nothing."""
        if self.already_published is None and self.lh.tables.exists(self.table):
            # A write replayed after the run was published (a retry with an old state) writes nothing.
            self.already_published = find_published(self.lh.tables, self.table, self.run_id)
        if self.already_published is not None:
            return
        # Spark gets exactly these files (safe-named links where a name would be globbed, hidden or
        # unreadable to Hadoop); they live until the write job that reads them is done.
        self.inputs = SparkInputs(self.sources)
        try:
            self._write()
        finally:
            self.inputs.close()
            self.inputs = None

    def _write(self) -> None:
        branches = self.lh.branches
        with self._step("write"):
            # A sandbox spanning the catalog (Nessie) exists before anything, table creation included, happens in it.
            self.opened_branch = branches.open(self.branch)
            tables = self._wt()
            exists = tables.exists(self.table)
            if exists and not self.opened_branch and self._resume():
                return
            assert self.fmt is not None  # set by prepare
            self.lh.progress(f"reading {len(self.sources)} file(s) as {self.fmt}")
            try:
                table_schema = tables.schema(self.table) if exists else None
                df = read_batch(
                    self.lh.spark,
                    self.sources,
                    self.fmt,
                    self.table_cfg.read_options,
                    table_schema,
                    self.lh.storage,
                    inputs=self.inputs,
                )
                if table_schema is not None:
                    contract = apply_contract(
                        df,
                        table_schema,
                        table=self.table.dotted,
                        policy=self.table_cfg.schema_policy,
                        files=self.rec.files,
                    )
                    df, self.new_columns = contract.df, contract.new_columns
                    self.schema_changes = contract.report()
                    for note in self.schema_changes:
                        self.lh.progress(note)
                else:
                    df.schema  # noqa: B018 - forces schema inference so unreadable files fail before any DDL
            except ContractViolation as e:
                # The batch does not fit the table's schema contract: an audit outcome, decided before
                # anything is written (blocked, exit 1), not a failure to read the files.
                self._block_on_schema(e)
                return
            except WapError:
                raise
            except Exception as e:
                raise self._classify(e) from e
            validate_checks(
                self.checks,
                df,
                table=self.table.dotted,
                table_exists=tables.exists,
                table_columns=lambda t: tables.schema(t).fieldNames(),
            )
            self.plan = AuditPlan(self.checks, df.columns, table=self.table.dotted, key=self.table_cfg.sample_key())
            if not exists:
                self.lh.progress(f"creating table {self.table}")
                try:
                    tables.ensure_namespace(self.table)
                except Exception:
                    # Two runs creating one namespace at once: the loser's insert fails, the namespace is there.
                    if not tables.namespace_exists(self.table):
                        raise
                try:
                    tables.create_like(self.table, df)
                except Exception as e:
                    if created_meanwhile(e):
                        # Another run created it since this one looked: a retry writes into it (under its contract).
                        raise CommitConflict(
                            f"{self.table} was created by another run at the same time",
                            hint="retry: the run then writes into the table that now exists",
                        ) from e
                    raise
                self.created_table = True
                crash_point("write:table-created")
            if self.new_columns and branches.add_columns(self.table, self.branch, self.new_columns):
                # The sandbox isolates schema changes too (a Nessie branch): main keeps its schema, no staging.
                self.lh.progress(
                    f"added column(s) {', '.join(f.name for f in self.new_columns)} on branch {self.branch}"
                )
                self.new_columns = []
            if self.new_columns:
                self._write_staged(df)
                return
            self.base = branches.create(self.table, self.branch)
            self.rec.base_snapshot_id = self.base
            self.save()
            crash_point("write:branch-created")
            self.lh.progress(f"writing to branch {self.branch}")
            observation = None
            if self.checks:
                # Row-level checks are computed by the write job itself: auditing them costs no extra scan.
                from pyspark.sql import Observation

                observation = Observation(f"wap_audit_{self.run_id}")
            try:
                if self.quarantine is not None and self.plan.quarantinable:
                    self._write_split(df, observation)
                else:
                    out = df.observe(observation, *self.plan.observable()) if observation else df
                    self.write_options(out.writeTo(branches.write_target(self.table, self.branch))).append()
            except Exception as e:
                self._undo_write()
                raise self._classify(e) from e
            crash_point("write:appended")
            self.run_snapshots = self._branch_snapshots()
            if observation is not None:
                self.observed = dict(observation.get)
                written = sum(s.added_records for s in self.run_snapshots) + sum(
                    s.added_records for s in self.q_snapshots
                )
                if int(self.observed.get("_rows") or 0) != written:
                    # Never trust metrics that do not describe exactly the rows committed: re-scan instead.
                    self.observed = None

    def _block_on_schema(self, e: ContractViolation) -> None:
        self._undo_write()  # a Nessie branch this run opened for the write; nothing else exists yet
        self.opened_branch = False
        policy = self.table_cfg.schema_policy
        self.report = AuditReport(
            rows=0,
            checks=[
                CheckResult(
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
            ],
        )
        self.rec.rows_written = 0
        self.rec.checks = [c.to_dict() for c in self.report.checks]
        self.lh.progress(f"the batch does not match the schema of {self.table}: blocked before writing")

    def _written(self) -> bool:
        """The run's rows are on its branch or staging table (False when blocked before writing)."""
        return bool(self.run_snapshots) or self.staging is not None

    def _resume(self) -> bool:
        """After a crash: True when the write completed (the branch or staging table holds this run's rows).

        The table's own branch is written last, so its rows prove the whole write happened. A branch
        that holds nothing beyond main, or only this run's partial write (quarantined rows without the
        good ones), is this run's own unfinished write: it is dropped and the write starts over.
        """
        tables, branches = self._wt(), self.lh.branches
        staging = self._staging_name()
        if tables.exists(staging):
            if any(s.run_id == self.run_id for s in tables.snapshots(staging).values()):
                self.staging = staging
                self.lh.progress(f"staging table {staging} already holds run {self.run_id}'s rows; resuming")
                return True
            tables.drop(staging)  # created, never filled: write again
        if not branches.exists(self.table, self.branch):
            self._reset_quarantine_branch()
            return False
        mine = self._branch_snapshots()
        if not mine:
            if not self._only_this_run_beyond_main(self.table):
                raise UsageError(
                    f"branch {self.branch} of {self.table} already exists and holds another run's data",
                    hint=f"pick another --branch, or drop it with `wap discard {self.branch} --table {self.table}`",
                )
            self.lh.progress(f"branch {self.branch} holds no rows of run {self.run_id} for {self.table}; writing")
            branches.reset(self.table, self.branch, [])
            self._reset_quarantine_branch()
            return False
        self.run_snapshots = mine
        self.base = mine[0].parent_id
        self.rec.base_snapshot_id = self.base
        if (
            self.quarantine is not None
            and tables.exists(self.quarantine)
            and branches.exists(self.quarantine, self.branch)
        ):
            self.q_snapshots = self._branch_snapshots(self.quarantine)
            self.q_base = self.q_snapshots[0].parent_id if self.q_snapshots else None
        self.lh.progress(f"branch {self.branch} already holds run {self.run_id}'s rows; resuming")
        return True

    def _only_this_run_beyond_main(self, table: TableName) -> bool:
        """Every snapshot on the branch that main does not have was written by this run (or there is none)."""
        tables = self._wt()
        snaps = tables.snapshots(table)
        on_main = {s.snapshot_id for s in tables.ancestry(snaps, tables.head(table, "main"))}
        beyond = tables.ancestry(snaps, tables.head(table, self._ref()))
        return all(s.snapshot_id in on_main or s.run_id == self.run_id for s in beyond)

    def _reset_quarantine_branch(self) -> None:
        """Quarantined rows of an unfinished write (the good rows never landed) are written again: drop them."""
        if self.quarantine is None:
            return
        tables, branches = self._wt(), self.lh.branches
        if not (tables.exists(self.quarantine) and branches.exists(self.quarantine, self.branch)):
            return
        if not self._only_this_run_beyond_main(self.quarantine):
            raise UsageError(
                f"branch {self.branch} of {self.quarantine} already exists and holds another run's data",
                hint=f"pick another --branch, or drop it with `wap discard {self.branch} --table {self.quarantine}`",
            )
        branches.reset(self.quarantine, self.branch, self._branch_snapshots(self.quarantine))
        self.q_snapshots, self.q_base = [], None

    def _staging_name(self) -> TableName:
        return TableName(self.table.namespace, f"{self.table.name}__wap_{self.run_id}")

    def _write_staged(self, df: Any) -> None:
        """New columns: the batch waits in a staging table so main's schema stays as it is until publish."""
        from pyspark.sql import Observation

        self.staging = self._staging_name()
        self.lh.progress(f"new column(s): staging the batch in {self.staging} until publish")
        observation = Observation(f"wap_audit_{self.run_id}") if self.checks else None
        assert self.plan is not None  # built by the write before staging
        out = df.observe(observation, *self.plan.observable()) if observation else df
        try:
            self.write_options(
                out.writeTo(self.lh.tables.ident(self.staging)).using("iceberg").tableProperty("format-version", "2")
            ).create()
        except Exception as e:
            self.lh.tables.drop(self.staging)
            raise self._classify(e) from e
        crash_point("write:appended")
        if observation is not None:
            self.observed = dict(observation.get)

    def _write_split(self, df: Any, observation: Any) -> None:
        """Quarantine: good rows to the table's branch, failing rows to the quarantine table's branch."""
        from pyspark.sql import functions as F

        assert self.plan is not None and self.quarantine is not None
        tables, branches = self._wt(), self.lh.branches
        marked = df.withColumn(QUARANTINE_COLUMN, self.plan.quarantine_flags())
        source = marked.observe(observation, *self.plan.observable()) if observation is not None else marked
        good = source.where(F.size(QUARANTINE_COLUMN) == 0).drop(QUARANTINE_COLUMN)
        bad = (
            marked.where(F.size(QUARANTINE_COLUMN) > 0)
            .withColumn("_wap_run_id", F.lit(self.run_id))
            .withColumn("_wap_quarantined_at", F.current_timestamp())
        )
        if not tables.exists(self.quarantine):
            tables.create_like(self.quarantine, bad)
        self.q_base = branches.create(self.quarantine, self.branch)
        # Failing rows first: the table's own branch is written last, so a resumed run can tell a
        # complete write (the table's branch holds the run's rows) from one cut short.
        self.write_options(bad.writeTo(branches.write_target(self.quarantine, self.branch))).append()
        crash_point("write:quarantine-appended")
        self.write_options(good.writeTo(branches.write_target(self.table, self.branch))).append()
        self.q_snapshots = self._branch_snapshots(self.quarantine)

    def _branch_snapshots(self, table: TableName | None = None) -> list[Snapshot]:
        t = table or self.table
        tables = self._wt()
        snaps = tables.snapshots(t)
        chain = tables.ancestry(snaps, tables.head(t, self._ref()))
        mine = [s for s in chain if s.run_id == self.run_id]
        return list(reversed(mine))

    def _undo_write(self) -> None:
        """A failed write leaves nothing behind: the sandbox it opened, or its part of it, and a table this run
        created."""
        branches, tables = self.lh.branches, self._wt()
        try:
            if self.opened_branch:
                branches.discard(self.branch, self.run_tables())
                return
            for t in self.run_tables():
                if tables.exists(t) and branches.exists(t, self.branch):
                    branches.reset(t, self.branch, self._branch_snapshots(t))
            if self.created_table:
                tables.drop(self.table)
        except Exception as e:  # noqa: BLE001 - cleanup must not hide the write's own error
            self.lh.progress(f"warning: cleanup after failed write: {spark_errors.describe(e)}")

    def run_tables(self) -> list[TableName]:
        """The tables the run writes: its own and its quarantine table."""
        return [self.table] + ([self.quarantine] if self.quarantine is not None else [])

    def _classify(self, e: BaseException) -> WapError:
        """A failure of the write job: the run's input (by Spark's error condition, naming the file), or not."""
        named = spark_errors.classify(e, doing=f"writing {self.table}")
        if named is not None:
            return named  # the catalog, the warehouse or the network, not the files
        bad_input = input_error_from_spark(e, self.sources, fmt=self.fmt, options=self.table_cfg.read_options)
        if bad_input is not None:
            return bad_input
        return bug(e, run_id=self.run_id, step="write")

    # --- audit --------------------------------------------------------------------------------

    def _added_rows(self) -> Any:
        """Every row the run added: the table branch's new rows, plus quarantined ones, or the staging table."""
        tables = self._wt()
        if self.staging is not None:
            return tables.read(self.staging)
        head = self.run_snapshots[-1].snapshot_id
        added = tables.read_increment(self.table, self.base, head)
        if self.q_snapshots:
            assert self.quarantine is not None
            q = tables.read_increment(self.quarantine, self.q_base, self.q_snapshots[-1].snapshot_id)
            added = added.unionByName(q.select(*added.columns))
        return added

    def _file_metrics(self) -> FileMetrics | None:
        if self.staging is not None or self.q_snapshots or not self.run_snapshots:
            return None
        try:
            metrics: FileMetrics | None = self._wt().added_file_metrics(
                self.table, self._ref(), [s.snapshot_id for s in self.run_snapshots]
            )
            return metrics
        except Exception as e:  # noqa: BLE001 - metadata is an optimisation; the scan is always right
            self.lh.progress(f"file metrics unavailable ({spark_errors.describe(e)}); scanning instead")
            return None

    def _history(self) -> list[int]:
        """Rows added by the table's earlier published runs, newest first (for volume checks)."""
        tables = self.lh.tables
        snaps = tables.snapshots(self.table)
        out = []
        for s in tables.ancestry(snaps, tables.head(self.table, "main")):
            src = s.summary.get("source-snapshot-id")
            origin = snaps.get(int(src)) if src and src.isdigit() else None
            rid = s.run_id or (origin.run_id if origin else None)
            if rid and rid != self.run_id:
                out.append(s.added_records)
        return out

    def audit(self) -> AuditReport:
        if self.already_published is not None:
            return AuditReport(rows=0, checks=[])
        if self.report is not None and not self._written():
            return self.report  # blocked by the schema contract before anything was written
        tables = self.lh.tables
        with self._step("audit"):
            if self.staging is not None:
                self.rec.branch_snapshot_id = tables.head(self.staging)
                self.rec.rows_written = tables.row_count(self.staging)
            else:
                self.rec.branch_snapshot_id = self.run_snapshots[-1].snapshot_id
                self.rec.rows_written = sum(s.added_records for s in self.run_snapshots)
            quarantined = sum(s.added_records for s in self.q_snapshots)
            if not self.checks:
                self.report = AuditReport(rows=self.rec.rows_written, checks=[])
            else:
                total = self.rec.rows_written + quarantined
                self.lh.progress(f"auditing {total} new row(s) with {len(self.checks)} check(s)")
                added = self._added_rows()
                if self.plan is None:
                    self.plan = AuditPlan(
                        self.checks, added.columns, table=self.table.dotted, key=self.table_cfg.sample_key()
                    )
                view = self.lh.branches.audit_view(self.table, self.branch, self.base)
                branch_sql = tables.ident(self.staging) if self.staging is not None else view.branch_sql
                # Checks that depend on main read it at a head pinned here (re-checked at publish, where the
                # backend's publish would not notice main moving by itself).
                for t in self._main_dependencies():
                    view.pin(t)
                self.main_heads = view.pinned
                ctx = AuditContext(
                    main_table=view.read_main,
                    this_table=self.table,
                    history=self._history,
                    branch_sql=branch_sql,
                    file_metrics=self._file_metrics,
                )
                try:
                    self.report = evaluate(self.plan, added, observed=self.observed, ctx=ctx)
                except WapError:
                    raise
                except Exception as e:
                    raise _unexpected(e, self.run_id, "audit", f"auditing {self.table}") from e
                self._apply_quarantine(quarantined)
            self.report.schema_changes = list(self.schema_changes)
            self.rec.checks = [c.to_dict() for c in self.report.checks]
            self.save()
            crash_point("audit")
            return self.report

    def _main_head(self, t: TableName) -> int | None:
        tables = self.lh.tables
        return tables.head(t, "main") if tables.exists(t) else None

    def _main_dependent(self, chk: Check) -> bool:
        from wapflow.audit.spec import CustomSqlCheck, ForeignKeyCheck, UniqueInTableCheck, VolumeCheck

        if isinstance(chk, CustomSqlCheck):
            return bool(_tables_in_sql(chk.sql, self.lh.catalog))
        return isinstance(chk, (UniqueInTableCheck, ForeignKeyCheck, VolumeCheck))

    def _main_dependencies(self) -> set[TableName]:
        """Tables whose main the audit's verdict depends on (their heads are re-checked at publish)."""
        from wapflow.audit.spec import CustomSqlCheck, ForeignKeyCheck

        out: set[TableName] = set()
        for chk in self.checks:
            if not self._main_dependent(chk):
                continue
            if isinstance(chk, ForeignKeyCheck):
                out.add(TableName.parse(chk.table))
            elif isinstance(chk, CustomSqlCheck):
                out.update(_tables_in_sql(chk.sql, self.lh.catalog))
            else:
                out.add(self.table)
        return out

    def _recheck_main(self) -> None:
        """Under the publish lock: if main moved since the audit read it, re-evaluate the checks that read main."""
        if self.staging is not None or not self.main_heads:
            return
        assert self.report is not None
        tables = self.lh.tables
        for t in self.main_heads:
            if tables.exists(TableName.parse(t)):
                tables.refresh(TableName.parse(t))  # other processes' publishes, not this process's cache
        moved = {t: (old, self._main_head(TableName.parse(t))) for t, old in self.main_heads.items()}
        moved = {t: v for t, v in moved.items() if v[0] != v[1]}
        if not moved:
            return
        idx = [i for i, chk in enumerate(self.checks) if self._main_dependent(chk)]
        if not idx:
            return
        where = ", ".join(f"{t} {a} -> {b}" for t, (a, b) in moved.items())
        self.lh.progress(f"main moved since the audit ({where}): re-checking {len(idx)} check(s)")
        view = self.lh.branches.audit_view(self.table, self.branch, self.base)
        added = self._added_rows()
        sub = AuditPlan(
            [self.checks[i] for i in idx], added.columns, table=self.table.dotted, key=self.table_cfg.sample_key()
        )
        ctx = AuditContext(
            main_table=view.read_main, this_table=self.table, history=self._history, branch_sql=view.branch_sql
        )
        try:
            again = evaluate(sub, added, ctx=ctx)
        except WapError:
            raise
        except Exception as e:
            raise _unexpected(e, self.run_id, "publish", f"re-checking the audit of {self.table} at publish") from e
        for i, res in zip(idx, again.checks, strict=True):
            res.threshold = f"{res.threshold} (re-checked at publish: main moved, {where})"
            self.report.checks[i] = res
        self.main_heads = view.pinned
        self.rec.checks = [c.to_dict() for c in self.report.checks]
        self.save()

    def _apply_quarantine(self, quarantined: int) -> None:
        """Row-level failures that were diverted do not block; too many diverted rows do."""
        assert self.report is not None
        if self.quarantine is None:
            return
        self.report.quarantined_rows = quarantined
        assert self.plan is not None
        for comp, res in zip(self.plan.compiled, self.report.checks, strict=False):  # + max_quarantine_rate
            if comp.blocks_rows and res.status == "failed":
                res.status = "quarantined"
        limit = self.table_cfg.max_quarantine_rate
        total = self.report.rows
        rate = quarantined / total if total else 0.0
        if limit is not None:
            self.report.checks.append(
                CheckResult(
                    name=f"max_quarantine_rate({limit})",
                    check="max_quarantine_rate",
                    severity="error",
                    status="passed" if rate <= limit else "failed",
                    observed=round(rate, 6),
                    failing_rows=quarantined,
                    threshold=f"<= {limit}",
                    source="write",
                )
            )

    # --- publish ------------------------------------------------------------------------------

    def publish(self) -> None:
        """Publish (or block), and record the outcome: a caller driving the steps one by one needs no run()."""
        if self.already_published is None and self.lh.tables.exists(self.table):
            # A publish replayed after a crash (or a retried step) finds its rows on main: nothing twice.
            self.already_published = find_published(self.lh.tables, self.table, self.run_id)
        if self.already_published is not None:
            with self._step("cleanup"):
                self.lh.branches.discard(self.branch, self.run_tables())
                staging = self._staging_name()
                if self.lh.tables.exists(staging):
                    self.lh.tables.drop(staging)
            self.mark_published(self.already_published, "already")
            self.message = f"run {self.run_id} was already published (snapshot {self.already_published}); nothing to do"
        else:
            assert self.report is not None
            done = None
            if self.report.passed:
                with (
                    self._step("publish"),
                    self.lh.store.publish_lock(
                        self.table.dotted, timeout=self.lh.config.lakehouse.publish_lock_timeout
                    ),
                ):
                    crash_point("publish:locked")
                    self._recheck_main()
                    if self.report.passed:
                        done = self._publish_locked()
            if done is not None:
                self.mark_published(done.heads.get(self.table.dotted), done.method)
                if done.leftover:
                    self.lh.progress(
                        f"warning: published, but {done.leftover}; drop it with `wap discard {self.branch}"
                        f" --table {self.table}`"
                    )
            else:
                self._block()
        self.rec.finished_at = datetime.now(UTC)
        self.save()

    def slices(self) -> list[RunSlice]:
        """The run's part of its sandbox, per table, in publish order: quarantined rows first, so main
        never holds a run's good rows without the ones it diverted."""
        props = self.snapshot_properties()
        out = []
        if self.quarantine is not None and self._wt().exists(self.quarantine):
            out.append(RunSlice(self.quarantine, self.q_base, tuple(self.q_snapshots), props))
        out.append(RunSlice(self.table, self.base, tuple(self.run_snapshots), props))
        return out

    def _after_slice(self, sl: RunSlice) -> None:
        crash_point("publish:moved" if sl.table == self.table else "publish:quarantine-published")

    def _publish_locked(self) -> PublishedRun:
        """Move main to the run's rows and drop the sandbox; the caller holds the table's publish lock."""
        assert self.report is not None
        if self.staging is not None:
            return self._publish_staged()
        if self.report.quarantined_rows:
            self.lh.progress(f"publishing {self.report.quarantined_rows} quarantined row(s)")
        self.lh.progress(f"publishing {self.lh.branches.describe(self.branch)} to main")
        return self.lh.branches.publish(self.branch, self.run_id, self.slices(), self._after_slice)

    def mark_published(self, snapshot_id: int | None, via: str) -> None:
        """Record a publish done by this run or, for multi-table runs, by the group's single merge."""
        assert self.report is not None or via == "already"
        self.rec.status, self.rec.snapshot_id, self.rec.branch_kept = "published", snapshot_id, False
        self.published_via = via
        if via == "already" or self.report is None:
            return
        warned = len(self.report.warned)
        self.message = f"published {self.rec.rows_written} row(s) to {self.table}" + (
            f" with {warned} warning(s)" if warned else ""
        )
        if self.report.quarantined_rows:
            self.message += f"; {self.report.quarantined_rows} row(s) quarantined in {self.quarantine}"

    def _publish_staged(self) -> PublishedRun:
        """New columns the sandbox could not hold: main's schema changes only now, then the staged rows are
        appended to the run's branch and published from there."""
        tables, branches = self.lh.tables, self.lh.branches
        assert self.staging is not None
        staged = tables.read(self.staging)
        current = {f.name.lower() for f in tables.schema(self.table).fields}
        new = [f for f in staged.schema.fields if f.name.lower() not in current]
        if new:
            self.lh.progress(f"adding column(s) {', '.join(f.name for f in new)} to {self.table}")
            tables.add_columns(self.table, new)
            crash_point("publish:columns-added")
        schema = tables.schema(self.table)
        mine = self._branch_snapshots() if branches.exists(self.table, self.branch) else []
        if not mine:
            # (A resumed publish finds its rows on the branch already and does not append them twice.)
            if branches.exists(self.table, self.branch):
                if not self._only_this_run_beyond_main(self.table):
                    raise UsageError(
                        f"branch {self.branch} of {self.table} already exists and holds another run's data",
                        hint=f"drop it with `wap discard {self.branch} --table {self.table}`, then retry",
                    )
                branches.reset(self.table, self.branch, [])
            self.base = branches.create(self.table, self.branch)
            self.write_options(
                staged.select(*[staged[f"`{f.name}`"] for f in schema.fields]).writeTo(
                    branches.write_target(self.table, self.branch)
                )
            ).append()
            mine = self._branch_snapshots()
        self.run_snapshots = mine
        done = branches.publish(
            self.branch,
            self.run_id,
            [RunSlice(self.table, self.base, tuple(mine), self.snapshot_properties())],
            self._after_slice,
        )
        tables.drop(self.staging)
        return done

    def _block(self) -> None:
        assert self.report is not None
        tables, branches = self.lh.tables, self.lh.branches
        failed = ", ".join(c.name for c in self.report.failed)
        self.rec.status, self.rec.snapshot_id = "blocked", self.rec.branch_snapshot_id
        if not self._written():
            self.rec.branch_kept = False
            diff = "; ".join(str(c.observed) for c in self.report.failed if c.check == "schema")
            self.message = (
                f"blocked by {failed}: {diff}; nothing was written; main unchanged (report: wap report {self.run_id}; "
                'fix the file, or set schema = "add_columns" / "ignore_extra" for the table in wap.toml)'
            )
            return
        keep = self.table_cfg.on_failure != "drop"
        self.rec.branch_kept = keep
        if self.staging is not None:
            if not keep:
                tables.drop(self.staging)
            where = f"rows kept in staging table {self.staging}" if keep else f"staging table {self.staging} dropped"
            self.message = f"blocked by {failed}; main and its schema unchanged; {where}"
            return
        where = branches.describe(self.branch)
        if not keep:
            branches.discard(self.branch, self.run_tables())
            self.message = f"blocked by {failed}; main unchanged; {where} dropped"
            return
        self.message = (
            f"blocked by {failed}; main unchanged; rows kept on {where} "
            f'(report: wap report {self.run_id}; inspect: wap query "SELECT * FROM {self.table}" '
            f"--branch {self.branch}; drop: wap discard {self.branch})"
        )

    # --- failure and result ------------------------------------------------------------------

    def fail(self, e: WapError, step: str) -> None:
        self.rec.status = "failed"
        if not e.hint and step in ("audit", "publish"):
            e.hint = f"the branch {self.branch} is kept; retry with `{self.rec.resume_command()}`"
        self.rec.error = e.to_dict()
        self.rec.error["run_id"] = self.run_id
        if step in ("audit", "publish") and self.branch:
            # Recording the failure matters more than this detail.
            with contextlib.suppress(Exception):
                self.rec.branch_kept = self.lh.branches.exists(self.table, self.branch)
        self.message = str(e)
        self.rec.finished_at = datetime.now(UTC)
        self.save()

    def result(self) -> RunResult:
        return RunResult(
            run_id=self.run_id,
            table=self.table_text,
            status=self.rec.status,
            branch=self.rec.branch,
            rows_written=self.rec.rows_written,
            snapshot_id=self.rec.snapshot_id,
            base_snapshot_id=self.base,
            checks=self.rec.checks,
            error=self.rec.error,
            files=self.rec.files,
            branch_kept=self.rec.branch_kept,
            published_via=self.published_via,
            message=self.message + (f"; {self.skipped_note}" if self.skipped_note and self.message else ""),
            timings=dict(self.rec.timings),
            quarantined_rows=self.report.quarantined_rows if self.report and self.quarantine else None,
            schema_changes=list(self.schema_changes),
            staging_table=self.staging.dotted if self.staging is not None else None,
            skipped=[f.to_dict() for f in self.skipped],
        )


class _Timer:
    def __init__(self, sink: dict[str, float], name: str) -> None:
        self.sink, self.name = sink, name

    def __enter__(self) -> _Timer:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sink[self.name] = round(self.sink.get(self.name, 0.0) + time.perf_counter() - self.t0, 3)


def _tables_in_sql(sql: str, catalog: str | None = None) -> set[TableName]:
    """Lakehouse tables a custom_sql query names (the view `batch` and CTEs excluded; `catalog.` dropped)."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except sqlglot.errors.ParseError:
        return set()
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    out: set[TableName] = set()
    for t in tree.find_all(exp.Table):
        parts = [p for p in (t.catalog, t.db, t.name) if p]
        if catalog and len(parts) > 2 and parts[0] == catalog:
            parts = parts[1:]
        if len(parts) == 1 and parts[0].lower() in ctes | {"batch"}:
            continue
        try:
            out.add(TableName.parse(".".join(parts)))
        except WapError:
            continue
    return out


def _unexpected(e: BaseException, run_id: str, step: str, doing: str) -> WapError:
    """An exception no step named: a known condition of Spark, the catalog or storage, else a bug."""
    return (spark_errors.classify(e, doing=doing) or bug(e, run_id=run_id, step=step)).at(run_id=run_id, step=step)


def created_meanwhile(e: BaseException) -> bool:
    """Creating a table failed because it exists: another run created it since this one looked. By the Java
    class on a classic session, by Spark's error condition on Spark Connect (no Java classes reach a client)."""
    return spark_errors.raised(e, *_ALREADY_EXISTS) or "TABLE_OR_VIEW_ALREADY_EXISTS" in spark_errors.conditions(e)


_ALREADY_EXISTS = (
    "org.apache.iceberg.exceptions.AlreadyExistsException",
    "org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException",
)
_DOING = {"prepare": "preparing the run into", "write": "writing", "audit": "auditing", "publish": "publishing"}


def _step(name: Step, body: Callable[[LiveRun], object]) -> Callable[[Lakehouse, RunState], RunState]:
    def step(lakehouse: Lakehouse, state: RunState) -> RunState:
        needs = STEPS[: STEPS.index(name)]
        missing = [n for n in needs if n not in state.done]
        if missing:
            raise UsageError(f"step {name} of run {state.run_id} needs step {missing[0]} first")
        if state.status in ("failed", "published", "blocked") and name != "prepare":
            return state  # the run has ended: a replayed later step changes nothing
        lakehouse.on_this_thread()
        live = LiveRun(lakehouse, state)
        if name != "prepare":
            live.rec.owner = current_owner()  # this process runs the run now (prepare checks who did before)
        try:
            body(live)
        except WapError as e:
            live.fail(e.at(run_id=live.run_id, step=name), name)
        except Exception as e:  # noqa: BLE001 - named conditions are classified, anything else is a bug
            live.fail(_unexpected(e, live.run_id, name, f"{_DOING[name]} {live.table_text}"), name)
        else:
            if name not in live.done:
                live.done.append(name)
        return live.freeze()

    step.__name__ = name
    step.__doc__ = f"The {name} step: RunState -> RunState (a failure is recorded in the returned state)."
    return step


prepare = _step("prepare", LiveRun.prepare)
write = _step("write", LiveRun.write)
audit = _step("audit", LiveRun.audit)
publish_step = _step("publish", LiveRun.publish)
STEP_FUNCTIONS: dict[Step, Callable[[Lakehouse, RunState], RunState]] = {
    "prepare": prepare,
    "write": write,
    "audit": audit,
    "publish": publish_step,
}


def result(lakehouse: Lakehouse, state: RunState) -> RunResult:
    """What the caller sees of a run in this state."""
    return LiveRun(lakehouse, state).result()
