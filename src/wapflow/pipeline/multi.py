"""One run over several tables in one sandbox: every table published by a single commit, or none.

Needs a catalog that commits several tables at once: a JDBC catalog (one database transaction), a REST
catalog offering multi-table commits, or Nessie (one merge); the branch backend answers which
(why_not_together) and publishes them (publish_together). The driver drives it like a one-table run
(wapflow.pipeline.driver.drive): each step is the one-table step's work (wapflow.pipeline.steps) over every
table, except publish, which is one commit for all of them."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from wapflow.errors import CommitConflict, ConfigError, PublishConflict, UsageError, WapError
from wapflow.faults import crash_point
from wapflow.lakehouse.branches import MainMoved
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.model import MODEL_INPUT_PROP_PREFIX
from wapflow.pipeline import frames, lineage
from wapflow.pipeline.driver import drive
from wapflow.pipeline.result import MultiRunResult
from wapflow.pipeline.state import AWAITING_REVIEW, RunState, Step, new_run_id, new_state, validate_run_id
from wapflow.pipeline.steps import audit, prepare, write
from wapflow.pipeline.steps.audit import recheck_main
from wapflow.pipeline.steps.context import Run
from wapflow.pipeline.steps.publish import MAX_REAPPLY, held_for_review, mark_published, record_approval, slices
from wapflow.pipeline.steps.record import fail, result_of
from wapflow.spark import errors as spark_errors
from wapflow.sql.identifiers import TableName, validate_branch
from wapflow.vocabulary import FAILED_WITH, run_branch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wapflow.config import Check


@dataclass
class _Group:
    """A multi-table run as the driver sees it: one status and one list of done steps for all its tables."""

    status: str = "running"
    done: list[str] = field(default_factory=list)


class MultiWapRun:
    """Write every table to one branch, audit them all, publish them with a single commit, or none."""

    def __init__(
        self,
        lakehouse: Lakehouse,
        specs: list[tuple[str, list[str]]],
        *,
        branch: str | None = None,
        run_id: str | None = None,
        no_checks: bool = False,
        transaction: bool = False,
    ) -> None:
        """`no_checks`: a table of the run that has no checks may publish without (--no-checks). `transaction`:
        the tables come one by one, each written when it comes (add), and `finish` audits and publishes them."""
        if not specs and not transaction:
            raise UsageError("no tables given", hint="e.g. wap run-tables orders=orders.parquet items=items.parquet")
        names = [TableName.parse(t).dotted for t, _ in specs]
        if len(set(names)) != len(names):
            raise UsageError(f"a table appears twice in the run: {', '.join(names)}", hint="list each table once")
        why = lakehouse.why_not_together()  # asks the catalog (a REST server's endpoints): before any write
        if why is not None:
            raise UsageError(
                f"a run over several tables publishes them in one commit, and {why}",
                hint='use the embedded catalog, catalog = "jdbc" (PostgreSQL, SQLite), a REST catalog that offers '
                'multi-table commits, or catalog = "nessie" (docs/guides/tables-together.md); or run one table '
                "at a time (`wap run`)",
            )
        _refuse_unknown_tables(lakehouse, names)
        self.lh = lakehouse
        self.run_id = validate_run_id(run_id) if run_id else new_run_id()
        self.branch = validate_branch(branch) if branch else run_branch(self.run_id)
        # Per-table records need their own ids (the run store's key); the group id stays their prefix.
        self.runs = [
            Run(lakehouse, new_state(t, srcs, branch=self.branch, run_id=f"{self.run_id}-{i + 1}", no_checks=no_checks))
            for i, (t, srcs) in enumerate(specs)
        ]
        for r in self.runs:
            r.siblings = {other: o for other, o in zip(names, self.runs, strict=True) if o is not r}
        self.message = ""
        self.created_branch = False
        self.reapplied = 0
        self.no_checks = no_checks
        self.outcome: MultiRunResult | None = None

    def add(
        self,
        table: str,
        df: DataFrame,
        write_settings: Mapping[str, Any] | None = None,
        *,
        checks: Sequence[Check] = (),
        properties: Mapping[str, str] | None = None,
    ) -> Run:
        """A transaction's table: its DataFrame prepared and written to the run's branch now (so the transaction
        reads it staged); audited and published with the others by `finish`. A failure fails the whole run."""
        rid = self._member_id(table)
        frames.hold(rid, df)
        state = new_state(
            table,
            [],
            branch=self.branch,
            run_id=rid,
            no_checks=self.no_checks,
            frame=True,
            write_settings=dict(write_settings or {}),
            extra_checks=list(checks),
            properties=dict(properties or {}),
        )
        return self._write_member(state)

    def add_files(self, table: str, uris: Sequence[str], *, source: str | None = None) -> Run:
        """A transaction's table read from files (a source's landed batch, with the source's write settings):
        prepared and written now, like `add`, so what runs after it in the transaction reads it staged."""
        state = new_state(
            table,
            list(uris),
            branch=self.branch,
            run_id=self._member_id(table),
            source=source,
            no_checks=self.no_checks,
        )
        return self._write_member(state)

    def _member_id(self, table: str) -> str:
        name = TableName.parse(table).dotted
        if any(TableName.parse(r.table).dotted == name for r in self.runs):
            raise UsageError(f"{name} is written twice in transaction {self.run_id}", hint="write each table once")
        return f"{self.run_id}-{len(self.runs) + 1}"

    def _write_member(self, state: RunState) -> Run:
        r = Run(self.lh, state)
        self.runs.append(r)
        for o in self.runs:
            o.siblings = {TableName.parse(x.table).dotted: x for x in self.runs if x is not o}
        step = "prepare"
        try:
            prepare.prepare(r)
            r.record.group_id = self.run_id
            r.save()
            if r.already_published is None:
                step = "write"
                if not self.created_branch:
                    self.created_branch = self.lh.branches.open(self.branch)
                write.write(r)
        except WapError as e:
            self._fail(e.at(run_id=self.run_id, step=step), step, r)
            raise
        except Exception as e:
            err = spark_errors.named_or_bug(e, doing=f"{step} of {r.target}", run_id=self.run_id, step=step)
            self._fail(err, step, r)
            raise err from e
        return r

    def finish(self) -> MultiRunResult:
        """A transaction's end: every table written by `add` is audited, then all are published in one commit."""
        if self.outcome is not None:
            return self.outcome
        if not self.runs:
            self.outcome = MultiRunResult(self.run_id, self.branch, "published", [], "nothing was written")
            return self.outcome
        try:
            _refuse_unknown_tables(self.lh, [r.target.dotted for r in self.runs])
        except WapError as e:
            self._fail(e.at(run_id=self.run_id, step="audit"), "audit", None)
            return self.outcome  # type: ignore[return-value]  # _fail ends in _finish
        self._already_published()
        if self.outcome is None:
            self._lineage("START")
            drive(self.lh, _Group(done=["prepare", "write"]), run_step=self._step)
        for r in self.runs:
            frames.release(r.run_id)
        assert self.outcome is not None
        return self.outcome

    def fail_table(self, table: str, error: WapError, step: str = "write") -> MultiRunResult:
        """A transaction's table that failed before it was written (its model did not run): recorded failed with
        `error`, and the whole run with it; nothing published."""
        if self.outcome is None:
            rid = f"{self.run_id}-{len(self.runs) + 1}"
            r = Run(self.lh, new_state(table, [], branch=self.branch, run_id=rid, frame=True))
            r.derive()
            r.record.group_id = self.run_id
            self.runs.append(r)
            self._fail(error.at(run_id=self.run_id, step=step), step, r)
        for r in self.runs:
            frames.release(r.run_id)
        assert self.outcome is not None
        return self.outcome

    def abandon(self, error: BaseException) -> MultiRunResult:
        """A transaction whose block raised: nothing is published, every table's run is failed with the error
        (a WapError as it is: what it says and its exit code)."""
        if self.outcome is None:
            if isinstance(error, WapError):
                err = error
            else:
                why = f"the transaction's code raised {type(error).__name__}: {error}"
                err = UsageError(why, hint="fix the job and run it again (the same run id never publishes twice)")
            self._fail(err.at(run_id=self.run_id, step="write"), "write", None)
        for r in self.runs:
            frames.release(r.run_id)
        assert self.outcome is not None
        return self.outcome

    def _ordered(self) -> list[Run]:
        """Tables that others' foreign_key checks reference are written first, so the checks see them."""
        in_run = {r.target.dotted for r in self.runs}
        referenced = {
            getattr(c, "table", None)
            for r in self.runs
            for c in r.checks
            if c.check == "foreign_key" and getattr(c, "table", None) in in_run
        }
        return sorted(self.runs, key=lambda r: r.target.dotted not in referenced)

    def run(self) -> MultiRunResult:
        drive(self.lh, _Group(), run_step=self._step)
        assert self.outcome is not None  # every path through the steps ends in _finish
        return self.outcome

    def _step(self, name: Step, group: _Group) -> _Group:
        """One step over every table; a failure of any fails them all (the others: not published)."""
        current: Run | None = None
        try:
            if name == "publish":
                if self._publish() == "rewound":
                    group.done = ["prepare"]  # write, audit and publish again on fresh branches of the new mains
                    return group
            else:
                if name == "write":
                    self.created_branch = self.lh.branches.open(self.branch)
                for r in self._ordered() if name == "write" else self.runs:
                    current = r
                    {"prepare": prepare.prepare, "write": write.write, "audit": audit.audit}[name](r)
                if name == "prepare":
                    for r in self.runs:
                        r.record.group_id = self.run_id  # approved, rejected and diffed as one (wap approve ID)
                        r.save()
                    self._already_published()
                    if self.outcome is None:
                        self._lineage("START")
        except WapError as e:
            err = e
        except Exception as e:  # noqa: BLE001 - named conditions are classified, anything else is a bug
            err = spark_errors.named_or_bug(e, doing=f"{name} of run {self.run_id}", run_id=self.run_id, step=name)
        else:
            group.done.append(name)
            group.status = self.outcome.status if self.outcome is not None else "running"
            return group
        self._fail(err, name, None if name == "publish" else current)
        group.status = "failed"
        return group

    def _already_published(self) -> None:
        """After prepare: a run published before only cleans up; one published for some tables cannot go on."""
        done = [r.already_published is not None for r in self.runs]
        if all(done):
            self.lh.branches.discard(self.branch, self._all_tables())
            for r in self.runs:
                mark_published(r, r.already_published, "already")
                r.message = f"run {r.run_id} was already published; nothing to do"
            self._finish("published", f"run {self.run_id} was already published; nothing to do")
        elif any(done):
            raise PublishConflict(
                f"run {self.run_id} is published for some tables only, which one merge cannot produce",
                hint="inspect `wap nessie log`; re-run the remaining tables under a new run id",
            )

    def _publish(self) -> str:
        failing = [r for r in self.runs if r.report is None or not r.report.passed]
        if failing:
            self._block(failing)
            return "blocked"
        staged = [r for r in self.runs if r.staging is not None]
        if staged:
            # New columns wait in a staging table until main's schema changes (table branches share a schema):
            # that schema change and the rows would be two commits, which a group cannot make one.
            raise UsageError(
                f"{staged[0].target} adds new column(s), which a commit of several tables cannot carry on table "
                "branches; no table changed on main",
                hint=f"run {staged[0].target} on its own first (`wap run`: its columns reach main), then the group "
                'again; or use catalog = "nessie", whose branches hold new columns',
            )
        held = [r for r in self.runs if held_for_review(r)]
        if held:
            self._hold(held)
            return "held"
        where = self.lh.branches.describe(self.branch)
        timeout = self.lh.config.lakehouse.publish_lock_timeout
        with contextlib.ExitStack() as locks:
            # Every table's publish lock, in one order (no two groups wait on each other): one-table runs and
            # other groups publish to these tables before or after this commit, never inside it.
            for name in sorted({t.dotted for t in self._all_tables()}):
                locks.enter_context(self.lh.store.publish_lock(name, timeout=timeout))
            crash_point("publish:locked")
            for r in self.runs:
                recheck_main(r)  # checks that read main, on a main that moved since the audit
            failing = [r for r in self.runs if r.report is None or not r.report.passed]
            if failing:
                self._block(failing)
                return "blocked"
            self.lh.progress(f"publishing {where} ({len(self.runs)} tables) to main")
            for r in self.runs:
                record_approval(r)  # an approved group's snapshots say who approved it and why
            try:
                moved = self.lh.branches.publish_together(
                    self.branch, self.run_id, [sl for r in self.runs for sl in slices(r)]
                )
            except MainMoved as e:
                return self._rewind(e)
        crash_point("publish:moved")
        for r in self.runs:
            mark_published(r, moved.heads.get(r.target.dotted), moved.method)
        if moved.leftover:
            self.lh.progress(f"warning: published, but {moved.leftover}; drop it with `wap discard {self.branch}`")
        tables = ", ".join(r.target.dotted for r in self.runs)
        again = f" (applied again {self.reapplied} time(s): main moved)" if self.reapplied else ""
        self._finish("published", f"published {tables} in one commit{again}")
        return "published"

    def _rewind(self, moved: MainMoved) -> str:
        """A merge or replace of the group met a moved main: every table's branch goes and the group is written,
        audited and published again on fresh branches (bounded, as for one table: steps.publish.MAX_REAPPLY)."""
        if self.reapplied >= MAX_REAPPLY:
            raise CommitConflict(
                f"{moved.message}, during each of {self.reapplied + 1} attempts to publish run {self.run_id}",
                hint=f"every main is unchanged by this run; run it again (--run-id {self.run_id}) when fewer runs "
                "publish to these tables",
            )
        self.lh.progress(f"{moved.message}: applying the group's changes again on fresh branches of main")
        self.lh.branches.discard(self.branch, self._all_tables())
        self.reapplied += 1
        for r in self.runs:
            r.reapplied = self.reapplied
            r.back_to_write()
            r.rewound = False
        return "rewound"

    def _fail(self, err: WapError, step: str, current: Run | None) -> None:
        err.at(run_id=self.run_id, step=step)
        # Table branches are the run's own: dropped; a catalog-level branch only when this run created it.
        own = self.created_branch or self.lh.config.lakehouse.catalog != "nessie"
        if step == "write" and own:
            with contextlib.suppress(WapError):
                self.lh.branches.discard(self.branch, self._all_tables())
        for r in self.runs:
            if r is current or current is None:
                fail(r, err, step)
            else:
                why = f"not published: {current.target} failed at step {step}"
                fail(r, UsageError(why).at(run_id=r.run_id, step=step), step)
                assert r.record.error is not None
                r.record.error[FAILED_WITH] = current.target.dotted  # its own error says only "not published"
            r.record.status = "failed"
        self._finish("failed", str(err))

    def _hold(self, held: list[Run]) -> None:
        """Every table of the group awaits review (a table's `review` asks for a person): branches kept, no main
        changed. `wap approve <group id>` audits them all again and publishes them in one commit."""
        why = "; ".join(
            f"{r.target}: warning(s) {', '.join(c.name for c in r.report.warned)}"
            if r.report is not None and r.report.warned
            else f'{r.target}: review = "{r.table_cfg.review}"'
            for r in held
        )
        for r in self.runs:
            r.record.status, r.record.snapshot_id, r.record.branch_kept = AWAITING_REVIEW, None, r.written()
            r.message = f"awaiting review with run {self.run_id} ({why})"
        sandbox = self.lh.branches.describe(self.branch)
        self._finish(
            AWAITING_REVIEW,
            f"awaiting review ({why}); no table changed on main; rows kept on {sandbox} (diff: wap diff "
            f"{self.run_id}; publish every table: wap approve {self.run_id} --reason ...; drop them: wap reject "
            f"{self.run_id} --reason ...)",
        )

    def _block(self, failing: list[Run]) -> None:
        keep = any(r.table_cfg.on_failure != "drop" for r in self.runs)
        why = "; ".join(f"{r.target}: {_failed_checks(r)}" for r in failing if r.report)
        if not keep:
            self.lh.branches.discard(self.branch, self._all_tables())
        for r in self.runs:
            r.record.status, r.record.snapshot_id, r.record.branch_kept = "blocked", r.record.branch_snapshot_id, keep
            own = ", ".join(c.name for c in r.report.failed) if r.report and r.report.failed else None
            r.message = f"blocked by {own}" if own else f"not published: blocked by {why}"
        sandbox = self.lh.branches.describe(self.branch)
        where = f"all rows kept on {sandbox}" if keep else f"{sandbox} dropped"
        self._finish("blocked", f"blocked ({why}); no table changed on main; {where}")

    def _all_tables(self) -> list[TableName]:
        return [t for r in self.runs for t in r.run_tables()]

    def _finish(self, status: str, message: str) -> None:
        now = datetime.now(UTC)
        for r in self.runs:
            r.record.finished_at = now
            r.save()
        self.outcome = MultiRunResult(self.run_id, self.branch, status, [result_of(r) for r in self.runs], message)
        if (ended := lineage.ENDS.get(status)) is not None and any(r.already_published is None for r in self.runs):
            self._lineage(ended)

    def _lineage(self, event_type: lineage.EventType) -> None:
        """Each table's record is an OpenLineage run of its own (the table is its job), the group its parent."""
        if self.lh.config.lineage is None:
            return
        for r in self.runs:
            tables = [
                k.removeprefix(MODEL_INPUT_PROP_PREFIX) for k in r.properties if k.startswith(MODEL_INPUT_PROP_PREFIX)
            ]
            lineage.emit(
                self.lh.config, event_type, r.record, progress=self.lh.progress, parent=self.run_id, tables=tables
            )


def _failed_checks(r: Run) -> str:
    """A table's failed checks by name; the schema contract's with what differs (the column a model added)."""
    assert r.report is not None
    return ", ".join(f"{c.name} ({c.observed})" if c.check == "schema" else c.name for c in r.report.failed)


def _refuse_unknown_tables(lakehouse: Lakehouse, names: list[str]) -> None:
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
