"""Every run is a group: the one step function over a run's tables, and the ways a group is made.

A run writes one or several tables to one sandbox (its branch) and publishes them in one step, or none of them:
`wap run` is a group of one, `wap run-tables`, `[runs.NAME]`, transactions, models, a source's batch with its
models and pipelines are groups of several. Its state is a GroupState (wapflow.pipeline.state): one RunState per
table (a member) and the group's own fields. `apply` is the one step of every run, driven by the one loop
(wapflow.pipeline.driver.drive): prepare, write and audit are each table's work (wapflow.pipeline.steps) applied
to every member, and publish is one step over all of them (wapflow.pipeline.steps.publish): hold, lock, recheck,
approve, commit, rewind when main moved, mark. A failure of any member fails the whole group: nothing published.

Made here:
- `tables_group`: a run over tables named with their files (wap run-tables, [runs.NAME], a group's approval);
- wapflow.pipeline.opengroup: a group filled as it goes, each table written when it comes and audited and
  published together at the end (wapflow.transaction, models, a source's batch with its models).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from wapflow.errors import ConfigError, UsageError, WapError
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.model import MODEL_INPUT_PROP_PREFIX, PIPELINE_RUN_PROP
from wapflow.pipeline import frames, lineage
from wapflow.pipeline.result import MultiRunResult
from wapflow.pipeline.state import HALTED, STEPS, GroupState, Step, new_run_id, new_state, validate_run_id
from wapflow.pipeline.steps import audit as audit_step
from wapflow.pipeline.steps import prepare as prepare_step
from wapflow.pipeline.steps import write as write_step
from wapflow.pipeline.steps.context import Run
from wapflow.pipeline.steps.publish import publish
from wapflow.pipeline.steps.record import fail, result_of
from wapflow.runs.store import RunRecord, current_owner
from wapflow.spark import errors as spark_errors
from wapflow.sql.identifiers import TableName, validate_branch
from wapflow.vocabulary import ENGINE_SDP, FAILED_WITH, run_branch

if TYPE_CHECKING:
    pass

# What each step does to one table of the run; publish is the group's (steps.publish.publish).
_MEMBER_STEPS = {"prepare": prepare_step.prepare, "write": write_step.write, "audit": audit_step.audit}
DOING = {"prepare": "preparing the run into", "write": "writing", "audit": "auditing", "publish": "publishing"}


class Group:
    """A GroupState hydrated for one step: a Run per member, each seeing the others (`siblings`: a foreign key
    or reconciliation against a table of the same run reads it staged)."""

    def __init__(self, lakehouse: Lakehouse, state: GroupState) -> None:
        self.lh = lakehouse
        self.run_id = state.run_id
        self.branch = state.branch
        self.members = [Run(lakehouse, m) for m in state.members]
        self.reapplied = state.reapplied
        self.created_branch = state.created_branch
        self.message = state.message
        self.empty_status = state.empty_status
        self.link()

    def link(self) -> None:
        if len(self.members) < 2:
            return
        names = [_dotted(r.table) for r in self.members]
        for r in self.members:
            r.siblings = {n: o for n, o in zip(names, self.members, strict=True) if o is not r}

    @property
    def several(self) -> bool:
        """Tables published in one atomic commit, whose records name the group (not a run of one table)."""
        return len(self.members) > 1 or (bool(self.members) and self.members[0].run_id != self.run_id)

    @property
    def status(self) -> str:
        return self.members[0].record.status if self.members else self.empty_status

    def freeze(self) -> GroupState:
        return GroupState(
            run_id=self.run_id,
            branch=self.branch,
            members=[r.freeze() for r in self.members],
            reapplied=self.reapplied,
            created_branch=self.created_branch,
            message=self.message,
            empty_status=self.empty_status,
        )

    def tables(self) -> list[TableName]:
        """Every table the run writes (each member's own and its quarantine table)."""
        return [t for r in self.members for t in r.run_tables()]

    def ordered(self) -> list[Run]:
        """Tables that others' foreign_key checks reference are written first, so the checks see them."""
        in_run = {_dotted(r.table) for r in self.members}
        referenced = {
            getattr(c, "table", None)
            for r in self.members
            for c in r.checks
            if c.check == "foreign_key" and getattr(c, "table", None) in in_run
        }
        return sorted(self.members, key=lambda r: _dotted(r.table) not in referenced)

    # --- the one step -------------------------------------------------------------------------

    def step(self, name: Step, only: Sequence[Run] | None = None) -> WapError | None:
        """Step `name` over every member (`only`: over these, the ones a filling group just added), publish once
        over all; the first failure fails the whole group (returned, and recorded on every member)."""
        members = list(only) if only is not None else (self.ordered() if name == "write" else self.members)
        current: Run | None = None
        try:
            if name == "publish":
                publish(self)
            else:
                if name == "write" and self.several and not all(r.already_published is not None for r in members):
                    self.created_branch = self.lh.iceberg.open(self.branch) or self.created_branch
                for r in members:
                    current = r
                    if name != "prepare":
                        r.record.owner = current_owner()  # this process runs the run now (prepare checks who did)
                    _MEMBER_STEPS[name](r)
                current = None
                if name == "prepare" and self.several:
                    for r in members:
                        r.record.group_id = self.run_id  # approved, rejected and diffed as one (wap approve ID)
                        r.save()
        except Exception as e:  # noqa: BLE001 - named conditions are classified, anything else is a bug
            err = self._error(e, name, current)
            self.fail(err, name, None if name == "publish" else current)
            return err
        if any(r.rewound for r in self.members):
            # A member's branch no longer holds what its state recorded, or publish met a moved main under a
            # merge: the whole group goes back to write (each member's write finds what its branch holds).
            for r in self.members:
                if not r.rewound:
                    r.back_to_write()
        else:
            for r in members:
                if name not in r.done:
                    r.done.append(name)
        if name == "prepare" and any(r.already_published is None for r in members):
            self.lineage("START", members)
        return None

    def _error(self, e: BaseException, name: Step, current: Run | None) -> WapError:
        table = current.table if current is not None else (self.members[0].table if not self.several else None)
        doing = f"{DOING[name]} {table}" if table is not None else f"{name} of run {self.run_id}"
        run_id = current.run_id if current is not None and not self.several else self.run_id
        if isinstance(e, WapError):
            return e.at(run_id=run_id, step=name)
        return spark_errors.named_or_bug(e, doing=doing, run_id=run_id, step=name).at(run_id=run_id, step=name)

    def fail(self, err: WapError, step: str, current: Run | None) -> None:
        """The run fails at `step`: `current` with `err` (every member when None), the others as not published
        because of it. A group's write that failed drops the sandbox it made (table branches are the run's own;
        a catalog-level branch only when this run created it)."""
        if not self.several:
            fail(self.members[0], err, step)
            self.end(self.members[0].message)
            return
        err.at(run_id=self.run_id, step=step)
        if step == "write" and (self.created_branch or not self.lh.iceberg.spans_catalog):
            with contextlib.suppress(WapError):
                self.lh.iceberg.discard(self.branch, self.tables())
        for r in self.members:
            if r is current or current is None:
                fail(r, err, step)
            else:
                why = f"not published: {current.target} failed at step {step}"
                fail(r, UsageError(why).at(run_id=r.run_id, step=step), step)
                assert r.record.error is not None
                r.record.error[FAILED_WITH] = current.target.dotted  # its own error says only "not published"
            r.record.status = "failed"
        self.end(str(err))

    def end(self, message: str, *, announce: bool | None = None) -> None:
        """The run has ended (every member's record holds the outcome): saved, and told to lineage (`announce`:
        unless the run was published before this call, which told it then)."""
        now = datetime.now(UTC)
        for r in self.members:
            r.record.finished_at = now
            r.save()
        self.message = message
        ended = lineage.ENDS.get(self.status)
        if announce is None:
            announce = any(r.already_published is None for r in self.members)
        if ended is not None and announce:
            self.lineage(ended, self.members)

    def lineage(self, event_type: lineage.EventType, members: Sequence[Run]) -> None:
        """Each table's record is an OpenLineage run of its own (the table is its job); a group's is its parent,
        and a model's inputs are its input datasets."""
        if self.lh.config.lineage is None:
            return
        for r in members:
            tables = [
                k.removeprefix(MODEL_INPUT_PROP_PREFIX) for k in r.properties if k.startswith(MODEL_INPUT_PROP_PREFIX)
            ]
            lineage.emit(
                self.lh.config,
                event_type,
                r.record,
                progress=self.lh.progress,
                parent=self.run_id if self.several else None,
                tables=tables,
            )


def _dotted(table: str) -> str:
    """A table as the caller named it, dotted; as given when it is not a valid name (prepare refuses it then)."""
    try:
        return TableName.parse(table).dotted
    except WapError:
        return table


def apply(lakehouse: Lakehouse, state: GroupState, name: Step) -> GroupState:
    """The step `name` of a run: GroupState -> GroupState. It needs the steps before it done; on a run that has
    ended it changes nothing (prepare excepted: a run id given again starts from prepare); it never raises for
    what happens to the run (a failure is recorded on every member, with its kind and whether a retry helps)."""
    if not state.members:
        return state
    needs = STEPS[: STEPS.index(name)]
    missing = [n for n in needs if n not in state.done]
    if missing:
        raise UsageError(f"step {name} of run {state.run_id} needs step {missing[0]} first")
    if state.status in HALTED and name != "prepare":
        return state  # the run has ended: a replayed later step changes nothing
    lakehouse.on_this_thread()
    group = Group(lakehouse, state)
    group.step(name)
    return group.freeze()


def group_result(lakehouse: Lakehouse, state: GroupState) -> MultiRunResult:
    """What the caller of a run over several tables sees: the run's outcome and each table's."""
    if not state.members:
        return MultiRunResult(state.run_id, state.branch, state.empty_status, [], state.message)
    tables = [result_of(Run(lakehouse, m)) for m in state.members]
    return MultiRunResult(state.run_id, state.branch, state.status, tables, state.message)


# --- a run over named tables ----------------------------------------------------------------------


def refuse_together(lakehouse: Lakehouse) -> None:
    """A run over several tables publishes them in one commit: refused (exit 2, before any write) where the
    catalog cannot."""
    why = lakehouse.iceberg.why_not_together()  # asks the catalog (a REST server's endpoints): before any write
    if why is not None:
        raise UsageError(
            f"a run over several tables publishes them in one commit, and {why}",
            hint='use the embedded catalog, catalog = "jdbc" (PostgreSQL, SQLite), a REST catalog that offers '
            'multi-table commits, or catalog = "nessie" (docs/guides/tables-together.md); or run one table '
            "at a time (`wap run`)",
        )


def tables_group(
    lakehouse: Lakehouse,
    specs: list[tuple[str, list[str]]],
    *,
    branch: str | None = None,
    run_id: str | None = None,
    no_checks: bool = False,
    once: bool = False,
) -> GroupState:
    """A run of several tables, each with its files (`no_checks`: a table without checks may publish without,
    --no-checks; `once`: a file a table published already is refused, as by `wap run` without --again).
    Refused before anything is written: no table, a table twice, a catalog that cannot commit them together,
    a check naming a table neither in the run nor in the catalog."""
    if not specs:
        raise UsageError("no tables given", hint="e.g. wap run-tables orders=orders.parquet items=items.parquet")
    names = [TableName.parse(t).dotted for t, _ in specs]
    if len(set(names)) != len(names):
        raise UsageError(f"a table appears twice in the run: {', '.join(names)}", hint="list each table once")
    refuse_together(lakehouse)
    refuse_unknown_tables(lakehouse, names)
    rid = validate_run_id(run_id) if run_id else new_run_id()
    where = validate_branch(branch) if branch else run_branch(rid)
    members = [
        new_state(t, srcs, branch=where, run_id=f"{rid}-{i + 1}", no_checks=no_checks, once=once)
        for i, (t, srcs) in enumerate(specs)
    ]
    return GroupState(run_id=rid, branch=where, members=members)


def held_group(lakehouse: Lakehouse, members: list[RunRecord], *, no_checks: bool = False) -> GroupState:
    """A multi-table run held for review, as its records say, to be audited again and published: each member
    with its files; one whose rows came as a DataFrame (a transaction, models) or from a pipeline engine (its
    branch's commits name the pipeline run: PIPELINE_RUN_PROP) resumes from what the branch holds."""
    first = members[0]
    assert first.group_id is not None and first.branch is not None
    states = []
    for rec in members:
        files = [f["uri"] for f in rec.file_ids] or list(rec.files)
        state = new_state(rec.table_name, files, branch=first.branch, run_id=rec.run_id, no_checks=no_checks)
        if not files:
            state = state.evolve(frame=True)
            table = TableName.parse(rec.table_name)
            tables = lakehouse.tables
            head = tables.head(table, first.branch) if tables.exists(table) else None
            snap = tables.snapshots(table).get(head) if head is not None else None
            if snap is not None and PIPELINE_RUN_PROP in snap.summary:
                state = state.evolve(written_by=ENGINE_SDP, base=rec.base_snapshot_id)
                frames.hold(rec.run_id, tables.read(table, first.branch))  # its batch: what the branch holds
        states.append(state)
    return GroupState(run_id=first.group_id, branch=first.branch, members=states)


def refuse_unknown_tables(lakehouse: Lakehouse, names: list[str]) -> None:
    """A check of a table of the run that names a table neither in the run nor in the catalog: refused before
    anything is written (a foreign key or reconciliation against a typo would read nothing, or fail late)."""
    in_run = set(names)
    for name in names:
        for c in lakehouse.config.table(name).checks:
            other = getattr(c, "table", None) or getattr(c, "against", None)
            if not isinstance(other, str) or other in in_run:
                continue
            if getattr(c, "check", None) == "reconcile" or not lakehouse.metadata.exists(TableName.parse(other)):
                raise ConfigError(
                    f'[tables."{name}"] check {c.check} names {other}, which is not a table of this run'
                    + ("" if getattr(c, "check", None) == "reconcile" else " nor of the catalog"),
                    hint=f"add {other} to the run (TABLE=SOURCE, or the [runs.NAME] section), or fix the name",
                )
