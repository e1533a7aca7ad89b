"""The file ledger as people look at it: `wap files`, `wap skip`, `wap retry` (no Spark needed)."""

from __future__ import annotations

import os
from typing import Any

from wapflow.config import WapConfig
from wapflow.errors import NotFound, UsageError
from wapflow.runs.ledger import FILE_STATES, Ledger, LedgerRow, file_key
from wapflow.storage.core import Storage
from wapflow.storage.files import FileIdentity
from wapflow.vocabulary import RETRYABLE


def list_files(
    ledger: Ledger, cfg: WapConfig, source: str | None = None, state: str | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    if source is not None:
        cfg.resolve_source(source)  # an unknown source is an error, not an empty list
    if state is not None and state not in FILE_STATES:
        raise UsageError(f"unknown state {state!r}", hint=f"one of: {', '.join(FILE_STATES)}")
    return [r.to_dict() for r in ledger.rows(source, state=state, limit=limit)]


def _uri(text: str) -> str:
    """How the ledger names a file: S3 URIs as given, local paths absolute (as a listing records them)."""
    return text if "://" in text else os.path.abspath(os.path.expanduser(text))


def _rows_for(ledger: Ledger, target: str) -> list[LedgerRow]:
    """A run id's files, or every identity recorded for a file."""
    rows = ledger.rows(run_id=target)
    return rows or ledger.rows(uri=_uri(target))


def retry(ledger: Ledger, target: str) -> list[dict[str, Any]]:
    """Put a blocked, failed, skipped or reverted file (or every file of a run) back in line."""
    rows = _rows_for(ledger, target)
    if not rows:
        raise NotFound(f"the ledger has no file or run {target!r}", hint="see `wap files` for what it has")
    todo = [r for r in rows if r.state in RETRYABLE]
    if not todo:
        states = ", ".join(sorted({r.state for r in rows}))
        raise UsageError(
            f"{target} is {states}: nothing to retry",
            hint=f"only {', '.join(RETRYABLE)} files go back in line; pending and claimed ones run anyway",
        )
    ledger.retry([r.key for r in todo], reason=f"wap retry {target}")
    return [r.to_dict() for r in ledger.rows(keys=[r.key for r in todo])]


def skip(
    ledger: Ledger, cfg: WapConfig, storage: Storage, target: str, reason: str, source: str | None
) -> dict[str, Any]:
    """Never ingest this version of a file: a known file is marked skipped; an unlisted one is recorded so."""
    if not reason.strip():
        raise UsageError("say why the file is skipped", hint='e.g. --reason "duplicate export of 2026-01-03"')
    uri = _uri(target)
    rows = [r for r in ledger.rows(uri=uri) if r.state not in ("published", "claimed")]
    if source is not None:
        rows = [r for r in rows if r.source == source]
    if not rows:
        if source is None:
            published = ledger.rows(uri=uri)
            if published:
                raise UsageError(
                    f"{uri} is already {published[-1].state} (run {published[-1].run_id})",
                    hint="a published file's rows come off main with `wap revert RUN_ID`",
                )
            raise UsageError(f"the ledger has not seen {uri} yet, so its source is unknown", hint="add --source NAME")
        src = cfg.resolve_source(source).cfg
        f: FileIdentity | None = next((x for x in storage.list(uri) if x.uri == uri), None)
        if f is None:
            raise NotFound(f"no file {uri}", hint="name the file as `wap files` or `wap storage ls` shows it")
        key = file_key(source, f, track_changes=src.on_change == "new_file")
        ledger.add(source, [(key, f)])
        rows = [r for r in ledger.rows(keys=[key]) if r.state != "published"]
        if not rows:
            raise UsageError(f"{uri} is already published", hint="`wap revert RUN_ID` takes a run's rows off main")
    ledger.settle([r.key for r in rows], "skipped", reason=reason)
    return {"uri": uri, "skipped": len(rows), "reason": reason}
