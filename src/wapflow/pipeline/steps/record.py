"""What is recorded of a run: a failure (in the run store and the state, with its kind and whether a retry
can help), and the result the caller sees."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

from wapflow.errors import WapError
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline.result import RunResult
from wapflow.pipeline.state import RunState
from wapflow.pipeline.steps.context import Run
from wapflow.spark import errors as spark_errors


def unexpected(e: BaseException, run_id: str, step: str, doing: str) -> WapError:
    """An exception no step named: a known condition of Spark, the catalog or storage, else a bug."""
    return spark_errors.named_or_bug(e, doing=doing, run_id=run_id, step=step).at(run_id=run_id, step=step)


def result(lakehouse: Lakehouse, state: RunState) -> RunResult:
    """What the caller sees of a run in this state."""
    return result_of(Run(lakehouse, state))


def fail(run: Run, e: WapError, step: str) -> None:
    run.record.status = "failed"
    if not e.hint and step in ("audit", "publish"):
        e.hint = f"the branch {run.branch} is kept; retry with `{run.record.resume_command()}`"
    run.record.error = e.to_dict()
    run.record.error["run_id"] = run.run_id
    if step in ("audit", "publish") and run.branch:
        # Recording the failure matters more than this detail.
        with contextlib.suppress(Exception):
            run.record.branch_kept = run.lh.branches.exists(run.target, run.branch)
    run.message = str(e)
    run.record.finished_at = datetime.now(UTC)
    run.save()


def result_of(run: Run) -> RunResult:
    return RunResult(
        run_id=run.run_id,
        table=run.table,
        status=run.record.status,
        branch=run.record.branch,
        rows_written=run.record.rows_written,
        snapshot_id=run.record.snapshot_id,
        base_snapshot_id=run.base,
        checks=run.record.checks,
        error=run.record.error,
        files=run.record.files,
        branch_kept=run.record.branch_kept,
        published_via=run.published_via,
        message=run.message + (f"; {run.skipped_note}" if run.skipped_note and run.message else ""),
        timings=dict(run.record.timings),
        quarantined_rows=run.report.quarantined_rows if run.report and run.quarantine else None,
        schema_changes=list(run.schema_changes),
        staging_table=run.staging.dotted if run.staging is not None else None,
        skipped=[f.to_dict() for f in run.skipped],
    )
