"""One run over several tables in one sandbox: every table published by a single commit, or none.

Needs a branch backend that publishes tables together (Nessie); it goes through the same interface as a
one-table run, and each table's part is a LiveRun."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

from wapflow.errors import PublishConflict, UsageError, WapError, bug
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline.result import MultiRunResult
from wapflow.pipeline.steps import LiveRun, new_run_id, new_state, validate_run_id
from wapflow.spark import errors as spark_errors
from wapflow.sql.identifiers import TableName, validate_branch


class MultiWapRun:
    """Write every table to one branch, audit them all, publish them with a single commit, or none."""

    def __init__(
        self,
        lakehouse: Lakehouse,
        specs: list[tuple[str, list[str]]],
        *,
        branch: str | None = None,
        run_id: str | None = None,
    ) -> None:
        if not lakehouse.branches.publishes_tables_together:
            raise UsageError(
                "a run over several tables needs catalog-level branches",
                hint='set [lakehouse] catalog = "nessie" (see README "Nessie"), or run one table at a time',
            )
        if not specs:
            raise UsageError("no tables given", hint="e.g. wap run-tables orders=orders.parquet items=items.parquet")
        names = [TableName.parse(t).dotted for t, _ in specs]
        if len(set(names)) != len(names):
            raise UsageError(f"a table appears twice in the run: {', '.join(names)}", hint="list each table once")
        self.lh = lakehouse
        self.run_id = validate_run_id(run_id) if run_id else new_run_id()
        self.branch = validate_branch(branch) if branch else f"wap_{self.run_id}"
        # Per-table records need their own ids (the run store's key); the group id stays their prefix.
        self.runs = [
            LiveRun(lakehouse, new_state(t, srcs, branch=self.branch, run_id=f"{self.run_id}-{i + 1}"))
            for i, (t, srcs) in enumerate(specs)
        ]
        self.message = ""

    def _ordered(self) -> list[LiveRun]:
        """Tables that others' foreign_key checks reference are written first, so the checks see them."""
        in_run = {r.table.dotted for r in self.runs}
        referenced = {
            getattr(c, "table", None)
            for r in self.runs
            for c in r.checks
            if c.check == "foreign_key" and getattr(c, "table", None) in in_run
        }
        return sorted(self.runs, key=lambda r: r.table.dotted not in referenced)

    def run(self) -> MultiRunResult:
        step, current = "prepare", None
        created_branch = False
        try:
            for r in self.runs:
                current = r
                r.prepare()
            done = [r.already_published is not None for r in self.runs]
            if all(done):
                self.lh.branches.discard(self.branch, self._all_tables())
                for r in self.runs:
                    r.mark_published(r.already_published, "already")
                    r.message = f"run {r.run_id} was already published; nothing to do"
                return self._finish("published", f"run {self.run_id} was already published; nothing to do")
            if any(done):
                raise PublishConflict(
                    f"run {self.run_id} is published for some tables only, which one merge cannot produce",
                    hint="inspect `wap nessie log`; re-run the remaining tables under a new run id",
                )
            step = "write"
            created_branch = self.lh.branches.open(self.branch)
            for r in self._ordered():
                current = r
                r.write()
            step = "audit"
            for r in self.runs:
                current = r
                r.audit()
            step = "publish"
            current = None
            failing = [r for r in self.runs if r.report is None or not r.report.passed]
            if failing:
                return self._block(failing)
            where = self.lh.branches.describe(self.branch)
            self.lh.progress(f"publishing {where} ({len(self.runs)} tables) to main")
            moved = self.lh.branches.publish(self.branch, self.run_id, [sl for r in self.runs for sl in r.slices()])
            for r in self.runs:
                r.mark_published(moved.heads.get(r.table.dotted), moved.method)
            if moved.leftover:
                self.lh.progress(f"warning: published, but {moved.leftover}; drop it with `wap discard {self.branch}`")
            tables = ", ".join(r.table.dotted for r in self.runs)
            return self._finish("published", f"published {tables} in one commit")
        except WapError as e:
            err = e
        except Exception as e:  # noqa: BLE001 - named conditions are classified, anything else is a bug
            err = spark_errors.classify(e, doing=f"{step} of run {self.run_id}") or bug(
                e, run_id=self.run_id, step=step
            )
        err.at(run_id=self.run_id, step=step)
        if step == "write" and created_branch:
            with contextlib.suppress(WapError):
                self.lh.branches.discard(self.branch, self._all_tables())
        for r in self.runs:
            r.fail(err, step) if r is current or current is None else r.fail(
                UsageError(f"not published: {current.table} failed at step {step}").at(run_id=r.run_id, step=step), step
            )
            r.rec.status = "failed"
        return self._finish("failed", str(err))

    def _block(self, failing: list[LiveRun]) -> MultiRunResult:
        keep = any(r.table_cfg.on_failure != "drop" for r in self.runs)
        why = "; ".join(f"{r.table}: {', '.join(c.name for c in r.report.failed)}" for r in failing if r.report)
        if not keep:
            self.lh.branches.discard(self.branch, self._all_tables())
        for r in self.runs:
            r.rec.status, r.rec.snapshot_id, r.rec.branch_kept = "blocked", r.rec.branch_snapshot_id, keep
            own = ", ".join(c.name for c in r.report.failed) if r.report and r.report.failed else None
            r.message = f"blocked by {own}" if own else f"not published: blocked by {why}"
        sandbox = self.lh.branches.describe(self.branch)
        where = f"all rows kept on {sandbox}" if keep else f"{sandbox} dropped"
        return self._finish("blocked", f"blocked ({why}); no table changed on main; {where}")

    def _all_tables(self) -> list[TableName]:
        return [t for r in self.runs for t in r.run_tables()]

    def _finish(self, status: str, message: str) -> MultiRunResult:
        now = datetime.now(UTC)
        for r in self.runs:
            r.rec.finished_at = now
            r.save()
        return MultiRunResult(self.run_id, self.branch, status, [r.result() for r in self.runs], message)
