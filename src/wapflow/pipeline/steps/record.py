"""What is recorded of a run: a failure (in the run store and the state, with its kind and whether a retry
can help), and the result the caller sees."""

from __future__ import annotations

import contextlib
import os
from datetime import UTC, datetime
from pathlib import Path

from wapflow.errors import DiskFull, WapError
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


def full_places(places: dict[str, Path], *, below: int = 64 * 2**20) -> list[str]:
    """Which filesystems of these places have less than `below` bytes (or 1%) free, as
    "/mount/path (the warehouse, the run store: 60 KiB free)": what a disk-full error names, since the JVM's
    error does not say where."""
    found: dict[int, tuple[Path, list[str], int]] = {}
    for what, path in places.items():
        probe = next((p for p in (path, *path.parents) if p.exists()), None)
        if probe is None:
            continue
        try:
            st, dev = os.statvfs(probe), probe.stat().st_dev
        except OSError:
            continue
        free, size = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
        if free < below or (size and free < size // 100):
            found.setdefault(dev, (path, [], free))[1].append(what)
    return [f"{path} ({', '.join(whats)}: {free // 1024} KiB free)" for path, whats, free in found.values()]


def fail(run: Run, e: WapError, step: str) -> None:
    run.record.status = "failed"
    if isinstance(e, DiskFull):
        full = full_places(run.lh.config.local_places())
        if full and "full:" not in e.message:
            e.message += "; full: " + ", ".join(full)
    if not e.hint and step in ("audit", "publish"):
        e.hint = f"the branch {run.branch} is kept; retry with `{run.record.resume_command()}`"
    run.record.error = e.to_dict()
    run.record.error["run_id"] = run.run_id
    if step in ("audit", "publish") and run.branch:
        # Recording the failure matters more than this detail.
        with contextlib.suppress(Exception):
            run.record.branch_kept = run.lh.iceberg.exists(run.target, run.branch)
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
