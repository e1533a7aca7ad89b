"""The prepare step: validate names, resolve the files, check the run id's idempotence. No data moves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wapflow.errors import ConfigError, RunInProgress, UsageError
from wapflow.faults import crash_point
from wapflow.files.resolve import resolve_files
from wapflow.lakehouse.lineage import files_fingerprint, find_published, origin
from wapflow.lakehouse.model import FILES_HASH_PROP, SOURCES_PROP
from wapflow.pipeline.steps.context import FRAME_FORMAT, Run
from wapflow.runs.store import REJECTED, RunRecord, current_owner, owner_alive
from wapflow.sql.identifiers import validate_branch
from wapflow.writing.read import detect_format

if TYPE_CHECKING:
    from wapflow.lakehouse.reads import TableMetadata


def _describe_files(ids: list[dict[str, Any]], limit: int = 5) -> str:
    shown = [f"{i['uri']} ({i.get('size')} bytes, {i.get('version')})" for i in ids[:limit]]
    more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
    return ", ".join(shown) + more


def prepare(run: Run) -> None:
    """Validate names, resolve files, check idempotence. No data moves."""
    with run.timer("prepare"):
        run.derive()
        previous = run.lh.store.get(run.run_id)
        try:
            # A table without checks publishes only on the user's word, and a misspelt section is no table
            # without checks: both refused here, before Spark starts or any file is read.
            run.unchecked()
        except ConfigError:
            run.record_owned = previous is None  # a refused call leaves an earlier attempt's record as it was
            raise
        # Nessie down, wrong URL or token: fail here, before any file is read or anything written.
        run.lh.iceberg.check()
        run.branch = validate_branch(run.branch)
        run.record.branch = run.branch
        if previous is not None:
            owner = previous.owner or {}
            if previous.status == "running" and owner_alive(owner) and owner.get("pid") != current_owner()["pid"]:
                run.record_owned = False
                raise RunInProgress(
                    f"run {run.run_id} is running right now (process {owner.get('pid')} on {owner.get('host')})",
                    hint="wait for it to finish; `wap report " + run.run_id + "` shows its outcome",
                )
            if previous.review == REJECTED:
                run.record_owned = False
                raise UsageError(
                    f"run {run.run_id} was rejected by {previous.review_by} ({previous.review_reason}); "
                    "its branch is gone and it does not run again",
                    hint="to ingest these files after all, start a new run (leave out --run-id)",
                )
            run.record.started_at = previous.started_at
            run.base = previous.base_snapshot_id
            # A person's decision goes on with the run: an approved run resumed after a crash publishes.
            rec = run.record
            rec.review, rec.review_by = previous.review, previous.review_by
            rec.review_reason, rec.reviewed_at = previous.review_reason, previous.reviewed_at
        run.record.status = "running"
        run.record.owner = current_owner()
        run.save()
        run.lh.progress(f"run {run.run_id}")
        if run.frame:
            run.files, run.fmt = [], FRAME_FORMAT  # a DataFrame given in this process: no files to resolve
            run.record.files, run.record.file_ids = [], []
        else:
            _resolve(run, previous)
            if run.once and previous is None:
                _refuse_published_files(run)
        meta = _view(run, previous)
        if meta.exists(run.target):
            run.already_published = find_published(meta, run.target, run.run_id)
            if run.already_published is not None and not run.frame and (previous is None or not previous.file_ids):
                _same_files_as_published(run, meta)
            if run.already_published is None and _expired_publish(meta, run, previous):
                assert previous is not None and previous.snapshot_id is not None
                run.already_published = previous.snapshot_id
        run.save()
        crash_point("prepare")


def _resolve(run: Run, previous: RunRecord | None) -> None:
    """The files the run's patterns name, their identities and format; the same files as before for a run id
    that ran already."""
    found = resolve_files(run.patterns, storage=run.lh.storage)
    run.files = list(found)
    run.skipped = list(found.skipped)
    run.skipped_note = found.skipped_message()
    if run.skipped_note is not None:
        run.lh.progress(run.skipped_note)
    run.record.files = [s.uri for s in run.files]
    run.record.file_ids = [f.to_dict() for f in run.files]
    if previous is not None and previous.file_ids and not _same_files(run, previous.file_ids):
        # Refused: the run id's record stays as it was (e.g. published), not this call's.
        run.lh.store.save(previous)
        run.record_owned = False
        _refuse_other_files(run, previous.file_ids)
    run.fmt = detect_format(run.files, run.table_cfg.format)


def _refuse_published_files(run: Run) -> None:
    """A new run of files this table published already (`wap run` of the same file twice): refused, naming the
    run that published each, unless the caller said --again. The run is recorded failed with this message."""
    found = run.lh.store.published_with(run.target.dotted, run.record.file_ids)
    if not found:
        return
    shown = [
        f"{f['uri']} by run {rec.run_id}"
        + (f" at {rec.finished_at:%Y-%m-%d %H:%M:%S}" if rec.finished_at else "")
        + (f" (snapshot {rec.snapshot_id})" if rec.snapshot_id is not None else "")
        for f, rec in found[:5]
    ]
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    raise UsageError(
        f"{len(found)} of these file(s) were published to {run.target} already, unchanged (same path, size and "
        f"version): {'; '.join(shown)}{more}",
        hint="main is unchanged; to publish them again, add --again (wapflow.run(..., again=True)); "
        f"`wap report {found[0][1].run_id}` shows that run",
    )


def _view(run: Run, previous: RunRecord | None) -> TableMetadata:
    """Where prepare looks for the run on main. A run with a record (a rerun, or the restart after a crash past
    main's move) may be published already: the catalog's metadata read directly, with no JVM, lets it end without
    starting Spark. A new run (it starts Spark to write anyway), a Spark Connect client (its catalog may answer
    its server only) and a direct read that fails get Spark's view, which names any problem as it always did."""
    if previous is None or run.lh.connect_client:
        return run.lh.tables
    direct = run.lh.iceberg.direct()
    if direct is None:
        return run.lh.tables
    try:
        direct.exists(run.target)  # the view loads the table's metadata once; later reads reuse it
    except Exception:  # noqa: BLE001 - Spark's view then reads it, and reports what is wrong
        return run.lh.tables
    return direct


def _expired_publish(meta: TableMetadata, run: Run, previous: RunRecord | None) -> bool:
    """The run store says published, and main's history no longer holds its snapshot: `wap maintain`
    expired it (outside the revert window). The record decides then, so the rows never land twice."""
    if previous is None or previous.status != "published" or previous.snapshot_id is None:
        return False
    return previous.snapshot_id not in meta.snapshots(run.target)


def _same_files(run: Run, before: list[dict[str, Any]]) -> bool:
    return files_fingerprint(before) == files_fingerprint(run.record.file_ids)


def _refuse_other_files(run: Run, before: list[dict[str, Any]]) -> None:
    """A run id stands for one set of files: resuming it with other (or changed) files is an error."""
    raise UsageError(
        f"run {run.run_id} was started with {len(before)} file(s): {_describe_files(before)}; "
        f"this call names {len(run.record.file_ids)} file(s): {_describe_files(run.record.file_ids)}",
        hint="a run id means one set of files: to resume the run, pass the same files unchanged; "
        "to ingest other files, start a new run (leave out --run-id)",
    )


def _same_files_as_published(run: Run, meta: TableMetadata) -> None:
    """No run record (another machine's store, or lost): compare with the fingerprint on main's snapshot."""
    snaps = meta.snapshots(run.target)
    published = snaps.get(run.already_published) if run.already_published is not None else None
    first = origin(snaps, published) if published else None
    recorded = first.summary.get(FILES_HASH_PROP) if first else None
    if recorded is None or recorded == files_fingerprint(run.record.file_ids):
        return
    files = first.summary.get(SOURCES_PROP, "?") if first else "?"
    raise UsageError(
        f"run {run.run_id} was already published (snapshot {run.already_published}) with other files "
        f"({files}); this call names {_describe_files(run.record.file_ids)}",
        hint="a run id means one set of files: to ingest these files, start a new run (leave out --run-id)",
    )
