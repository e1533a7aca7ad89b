"""What the steps of one run share: the run's state hydrated for one step, the names and checks that follow
from it and wap.toml, the run's sandbox, what its snapshots carry, and how its record is saved.

Hydrating and freezing are generic: each RunState field declares how a step sees it (state.hydration), so
`Run(lakehouse, state)` and `run.freeze()` follow the dataclass's fields and no list of them is kept here.
The annotations below only tell the type checker what those hydrated values are; `_check_annotations`
fails at import if they and RunState's fields ever differ.
"""

from __future__ import annotations

import copy
import time
from dataclasses import fields, replace
from typing import Any

from pydantic import TypeAdapter, ValidationError

from wapflow.audit.checks import AuditPlan
from wapflow.audit.report import AuditReport
from wapflow.audit.spec import CHECK_MODELS
from wapflow.config import Check, TableConfig
from wapflow.errors import WapError
from wapflow.files.spark_paths import SparkInputs
from wapflow.lakehouse import lineage
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.model import DELETED_RECORDS, Snapshot
from wapflow.pipeline.state import RunState, hydration
from wapflow.runs.store import APPROVED, RunRecord
from wapflow.spark import errors as spark_errors
from wapflow.sql.identifiers import TableName
from wapflow.storage.files import FileIdentity, SkippedFile
from wapflow.vocabulary import quarantine_table_name, run_branch, staging_table_name
from wapflow.writing.modes import WriteMode, write_mode
from wapflow.writing.plan import WriteOutcome, Written

CHECKS: TypeAdapter[Check] = TypeAdapter(Check)  # a check as wap.toml writes it (a dict) -> its Check


def _check(data: dict[str, Any]) -> Check:
    """A check the caller added, back from the state. One that its own declaration rules refuse (built with
    model_construct, or edited into a state) is kept as given: the write step's validate_checks then
    refuses it with the table named and nothing written, as it did before runs were data."""
    try:
        return CHECKS.validate_python(data)
    except (ValidationError, WapError):
        model = CHECK_MODELS.get(str(data.get("check")))
        if model is None:
            raise
        return model.model_construct(**data)


# A run's format when its batch is a DataFrame (RunState.frame), not files.
FRAME_FORMAT = "dataframe"


def quarantine_of(table: TableName) -> TableName:
    """Where rows failing a table's row-level checks go under on_row_failure = "quarantine"."""
    return TableName(table.namespace, quarantine_table_name(table.name))


def staging_of(table: TableName, run_id: str) -> TableName:
    """Where a run's batch waits under schema = "add_columns" until publish (its new columns are not on main)."""
    return TableName(table.namespace, staging_table_name(table.name, run_id))


class Run:
    """A run's state, hydrated for one step (typed values rebuilt from a RunState, and back: freeze)."""

    # RunState's fields as a step sees them (hydrated per the field's declaration in state.py).
    run_id: str
    table: str  # as the caller named it; `target` is the parsed name once prepare validated it
    patterns: list[str]
    branch: str  # wap_<run id> unless the caller chose one
    extra_checks: list[dict[str, Any]]
    source: str | None
    no_checks: bool
    once: bool
    frame: bool
    written_by: str | None
    overridden: list[str]
    write_settings: dict[str, Any]
    properties: dict[str, str]
    record: RunRecord
    done: list[str]
    files: list[FileIdentity]
    skipped: list[SkippedFile]
    skipped_note: str | None
    fmt: str | None
    record_owned: bool  # False when this call is refused for a run id another attempt owns
    already_published: int | None
    base: int | None
    run_snapshots: list[Snapshot]
    q_base: int | None  # quarantine: rows failing row-level error checks go to <table>__quarantine's branch
    q_snapshots: list[Snapshot]
    staging: TableName | None  # schema = "add_columns": the batch waits in a staging table
    schema_changes: list[str]
    created_table: bool
    opened_branch: bool  # Nessie: this run created its branch (a failed write then deletes it)
    observed: dict[str, Any] | None
    write_outcome: WriteOutcome | None  # what the write did: read through outcome()
    report: AuditReport | None
    main_heads: dict[str, int | None]  # main's head per table as main-dependent checks read it
    published_via: str | None
    reapplied: int
    message: str

    def __init__(self, lakehouse: Lakehouse, state: RunState) -> None:
        self.lh = lakehouse
        for f in fields(RunState):
            # A copy: the step's working values never reach back into the state it was given.
            setattr(self, f.name, hydration(f).load(copy.deepcopy(getattr(state, f.name))))
        self.branch = state.branch or run_branch(state.run_id)  # validated by prepare
        # Rebuilt by each step, never part of the state.
        self.inputs: SparkInputs | None = None
        self._sandbox: Any = None
        self.plan: AuditPlan | None = None
        self.new_columns: list[Any] = []
        self.checks: list[Check] = [_check(c) for c in self.extra_checks]
        self.quarantine: TableName | None = None
        # Set by a publish that sent the run back to write (merge / replace on a moved main): the step is
        # then not done (the driver runs write, audit and publish again).
        self.rewound = False
        # The other tables of a multi-table run (dotted name -> their Run), set by the group; empty on its own.
        self.siblings: dict[str, Run] = {}
        if "prepare" in self.done:
            self.derive()

    def derive(self) -> None:
        """Names and checks that follow from the state and wap.toml."""
        self.target = TableName.parse(self.table)
        self.table_cfg: TableConfig = self.lh.config.table(
            self.target.dotted, source=self.source, write=self.write_settings
        )
        self.checks = list(self.table_cfg.checks) + [_check(c) for c in self.extra_checks]
        if self.table_cfg.on_row_failure == "quarantine":
            self.quarantine = quarantine_of(self.target)

    def unchecked(self) -> str | None:
        """The user's word this run publishes without checks on (checks = [] in wap.toml, --no-checks); None
        when it has checks. A ConfigError when it has none and nobody said so, or its table's section is
        missing under a close name (config.audit_consent)."""
        return self.lh.config.audit_consent(self.target.dotted, checks=len(self.checks), no_checks=self.no_checks)

    def freeze(self) -> RunState:
        return RunState(**{f.name: hydration(f).dump(getattr(self, f.name)) for f in fields(RunState)})

    # --- shared by the steps ------------------------------------------------------------------

    def timer(self, name: str) -> _Timer:
        """Time a part of the run into its record's timings."""
        return _Timer(self.record.timings, name)

    def save(self) -> None:
        if not self.record_owned:
            return  # the record belongs to another attempt of this run id (see prepare)
        try:
            self.lh.store.save(self.record)
        except Exception as e:  # noqa: BLE001 - the run's own outcome matters more than its record
            from wapflow.runs import pending

            why = spark_errors.classify(e, doing="recording the run")
            kept = pending.keep(self.lh.config.run_store_url(), self.run_id, self.record.to_row())  # store may not open
            later = (
                f"kept in {kept.parent} until the next wap command that can write the store records it"
                if kept is not None
                else "until a command records it, `wap runs` shows it as interrupted, with the command that resumes it"
            )
            self.lh.progress(
                f"warning: could not record run {self.run_id} in the run store: "
                f"{why.message if why is not None else spark_errors.describe(e)}; {later}"
            )

    def snapshot_properties(self) -> dict[str, str]:
        """What every snapshot the run commits carries: its run id, files and their fingerprint (and, once a
        person approved the run, who and why)."""
        props = self.properties | lineage.run_properties(
            self.run_id, (f.uri for f in self.files), lineage.files_fingerprint(self.record.file_ids)
        )
        if self.record.review == APPROVED and self.record.review_by:
            props |= lineage.approval_properties(self.record.review_by, self.record.review_reason or "")
        return props

    def write_options(self, writer: Any) -> Any:
        return lineage.with_properties(writer, self.snapshot_properties())

    # --- the run's sandbox --------------------------------------------------------------------

    def wt(self) -> Any:
        """Tables as the run's sandbox sees them (for a Nessie branch, a catalog bound to it)."""
        if self._sandbox is None:
            self._sandbox = self.lh.iceberg.tables_for(self.branch)
        return self._sandbox

    def ref(self) -> str:
        """The Iceberg ref holding the run's rows (its table branch, or main within a Nessie branch)."""
        return self.lh.iceberg.iceberg_ref(self.branch)

    def run_tables(self) -> list[TableName]:
        """The tables the run writes: its own and its quarantine table."""
        return [self.target] + ([self.quarantine] if self.quarantine is not None else [])

    def staging_name(self) -> TableName:
        return staging_of(self.target, self.run_id)

    def written(self) -> bool:
        """The run's rows are on its branch or staging table (False when blocked before writing)."""
        return bool(self.run_snapshots) or self.staging is not None

    def branch_snapshots(self, table: TableName | None = None) -> list[Snapshot]:
        """The run's own snapshots on its branch of `table` (default: its table), oldest first."""
        t = table or self.target
        tables = self.wt()
        snaps = tables.snapshots(t)
        if self.written_by is not None and t == self.target:
            # An engine's commits carry no wapflow run id: the run's are those on its branch since its base.
            return list(reversed(tables.ancestry(snaps, tables.head(t, self.ref()), stop=self.base)))
        chain = tables.ancestry(snaps, tables.head(t, self.ref()))
        mine = [s for s in chain if s.run_id == self.run_id]
        return list(reversed(mine))

    def back_to_write(self) -> None:
        """The state as it was just after prepare: the driver runs write, audit and publish again. Write then
        finds what the run's branch holds (reused), what is gone (written again from the run's files), or the
        run on main already (nothing twice)."""
        self.done = ["prepare"]
        self.base, self.run_snapshots, self.report, self.observed, self.main_heads = None, [], None, None, {}
        self.write_outcome = None
        self.q_base, self.q_snapshots = None, []
        # The table may be shared by now (others published into it): a failed re-write must never drop it.
        self.created_table = False
        self.record.checks, self.record.rows_written = [], None
        self.record.base_snapshot_id = self.record.branch_snapshot_id = None
        self.rewound = True
        self.save()

    def outcome(self) -> WriteOutcome:
        """What the write did: the audit and publish read it instead of asking the write mode again. A state
        stored by a wapflow whose write did not record it gets it here, from the run's snapshots and its table's
        mode (as those steps derived it then)."""
        if self.write_outcome is None:
            self.write_outcome = self.outcome_of("resumed", write_mode(self.table_cfg))
        return self.write_outcome

    def outcome_of(self, case: Written, mode: WriteMode) -> WriteOutcome:
        """The outcome of a write of `mode` that ended as `case`, from what the run's state holds now (its
        snapshots, or its staging table). A change's counts come from its commits' summaries and main's rows
        at its base (metadata only)."""
        base = WriteOutcome(case, mode.name, mode.reapplies, keys_after_write=mode.keys_after_write)
        if case == "blocked":
            return base
        if self.staging is not None:
            tables = self.lh.tables
            on_main = {f.name.lower() for f in tables.schema(self.target).fields}
            new = tuple(f.name for f in tables.schema(self.staging).fields if f.name.lower() not in on_main)
            return replace(
                base,
                snapshot_id=tables.head(self.staging),
                rows_added=tables.row_count(self.staging),
                staged=True,
                staged_columns=new,
            )
        mine = self.run_snapshots
        changes = None
        if mode.reapplies and mine:
            changes = mode.changes([s.summary for s in mine], self.main_rows_at_base()).to_dict()
        return replace(
            base,
            snapshot_id=mine[-1].snapshot_id if mine else None,
            rows_added=sum(s.added_records for s in mine),
            rows_deleted=sum(int(s.summary.get(DELETED_RECORDS, "0") or 0) for s in mine),
            rows_quarantined=sum(s.added_records for s in self.q_snapshots),
            changes=changes,
        )

    def main_rows_at_base(self) -> int:
        """Rows main held at the snapshot the run's branch started from (metadata only; 0 without a base)."""
        snaps = self.wt().snapshots(self.target)
        base = snaps.get(self.base) if self.base is not None else None
        return (base.rows or 0) if base is not None else 0

    def branch_as_recorded(self) -> bool:
        """Whether the run's branch still holds exactly the snapshots its state records. A state handed over
        from a process that died (a durable workflow resumed by another worker, a replayed step) may be older
        than the branch: another process went on with the run meanwhile, or reset its branch. Then the state
        goes back to write (back_to_write) and this returns False, so no step trusts snapshots that are not
        the branch's, and none reports a state wapflow itself left as a bug."""
        if self.staging is not None or not self.run_snapshots or self.already_published is not None:
            return True
        recorded = [s.snapshot_id for s in self.run_snapshots]
        if (
            self.wt().exists(self.target)
            and self.lh.iceberg.exists(self.target, self.branch)
            and [s.snapshot_id for s in self.branch_snapshots()] == recorded
        ):
            return True
        self.lh.progress(
            f"run {self.run_id}: {self.lh.iceberg.describe(self.branch)} no longer holds the snapshots this "
            "state recorded (another process went on with the run); continuing from what the branch holds"
        )
        self.back_to_write()
        return False

    def only_this_run_beyond_main(self, table: TableName) -> bool:
        """Every snapshot on the branch that main does not have was written by this run (or there is none)."""
        tables = self.wt()
        snaps = tables.snapshots(table)
        on_main = {s.snapshot_id for s in tables.ancestry(snaps, tables.head(table, "main"))}
        beyond = tables.ancestry(snaps, tables.head(table, self.ref()))
        return all(s.snapshot_id in on_main or s.run_id == self.run_id for s in beyond)


class _Timer:
    def __init__(self, sink: dict[str, float], name: str) -> None:
        self.sink, self.name = sink, name

    def __enter__(self) -> _Timer:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sink[self.name] = round(self.sink.get(self.name, 0.0) + time.perf_counter() - self.t0, 3)


def _check_annotations() -> None:
    """The typed view above and RunState's fields name the same things (a field added to one only fails here)."""
    declared = set(Run.__annotations__)
    state = {f.name for f in fields(RunState)}
    if declared != state:
        raise TypeError(f"Run and RunState differ: {sorted(declared ^ state)}")


_check_annotations()
