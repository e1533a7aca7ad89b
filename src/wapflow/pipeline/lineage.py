"""Lineage out: OpenLineage run events of every run, built here and sent here ([lineage] in wap.toml).

One place sends them, as one place sends alerts: the driver (wapflow.pipeline.driver.drive), which every run
goes through, sends START once a run is prepared and COMPLETE (published) or FAIL (blocked or failed) when it
ends; `wap discard` sends ABORT for a run it discards. A multi-table run (`wap run-tables`) sends the same
events for each of its tables' records, each with the group as its parent run. The job is the table (in the
configured namespace); the OpenLineage run id is a UUID derived from wapflow's run id, so a resumed run keeps it;
the inputs are the
run's files, the output is the Iceberg table with the published snapshot (a `version` facet) and each
check's verdict (the `dataQualityAssertions` facet).

Events go through the `openlineage-python` client (imported here only, when [lineage] is set). Sending never
raises: a receiver that is down, slow or answers 5xx costs at most `max_attempts` x `timeout` seconds and one
warning line, never a run's outcome or exit code. The URL from `url_env` and the API key are never printed.
Delivery is at least once per event: a run resumed or replayed after a crash may send an event again, with
the same run id (receivers key on run id and event type). An event the receiver missed is kept in the run
store's outbox (wapflow.runs.outbox) and sent again by `resend` (`wap lineage resend`, `wap watch`).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlparse

from wapflow.config import LineageConfig, WapConfig
from wapflow.redact import redact
from wapflow.runs.store import RunRecord, RunStore
from wapflow.vocabulary import span_text

if TYPE_CHECKING:
    from openlineage.client.client import OpenLineageClient
    from openlineage.client.event_v2 import RunEvent

    from wapflow.runs.outbox import LineageOutbox

EventType = Literal["START", "COMPLETE", "FAIL", "ABORT"]
# The event of each way a run ends (a status not named here, e.g. one waiting for a person, sends nothing:
# whatever ends it later sends its event).
ENDS: dict[str, EventType] = {"published": "COMPLETE", "blocked": "FAIL", "failed": "FAIL"}

# The namespace of the run UUIDs: uuid5(RUN_UUID_NAMESPACE, wapflow run id), the same on every machine.
RUN_UUID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://pypi.org/project/wapflow/openlineage-run")
PRODUCER = "https://pypi.org/project/wapflow/"


# The orchestrator's run a run is part of (an Airflow task, a Dagster step): the parent of the events of every run
# started in the block of `parent_run`, unless the run is a table's part of a group (whose parent is the group).
_OUTER: ContextVar[tuple[str, str, str] | None] = ContextVar("wapflow_lineage_parent", default=None)


@contextmanager
def parent_run(namespace: str, job: str, run_id: str) -> Iterator[None]:
    """In the block, wapflow's own events name this OpenLineage run (an orchestrator's task: its namespace, job
    name and run UUID) as their parent."""
    token = _OUTER.set((namespace, job, run_id))
    try:
        yield
    finally:
        _OUTER.reset(token)


def run_uuid(run_id: str) -> str:
    """The OpenLineage run id of a wapflow run: deterministic, so every event of the run (and of its resumption,
    in any process) carries the same one."""
    return str(uuid.uuid5(RUN_UUID_NAMESPACE, run_id))


def file_dataset(uri: str) -> tuple[str, str]:
    """(namespace, name) of an input file, by OpenLineage's naming: s3://bucket + key, or file + the path."""
    parsed = urlparse(uri)
    if parsed.scheme in ("s3", "s3a", "s3n"):
        return f"s3://{parsed.netloc}", parsed.path.lstrip("/")
    if parsed.scheme == "file":
        return "file", parsed.path
    if parsed.scheme and parsed.netloc:
        return f"{parsed.scheme}://{parsed.netloc}", parsed.path
    return "file", os.path.abspath(uri)


def table_namespace(cfg: WapConfig) -> str:
    """The output dataset's namespace: the warehouse, as a URI (file:///abs/path or s3://bucket/prefix)."""
    wh = cfg.warehouse_location()
    if "://" in wh:
        return wh.rstrip("/")
    if wh.startswith("file:"):
        wh = wh[len("file:") :]
    return Path(wh).as_uri()


def assertions(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each check's verdict as an OpenLineage assertion: success only when it passed (a warned or quarantining
    check found issues), the column when the check has one."""
    out: list[dict[str, Any]] = []
    for c in checks:
        columns = [str(x) for x in c.get("columns") or []]
        out.append(
            {
                "assertion": str(c.get("check") or c.get("name")),
                "name": str(c.get("name")),
                "success": c.get("status") == "passed",
                "column": columns[0] if len(columns) == 1 else None,
                "severity": c.get("severity"),
                "expected": str(c["threshold"]) if c.get("threshold") not in (None, "") else None,
                "actual": str(c["observed"]) if c.get("observed") is not None else None,
            }
        )
    return out


def _message(event_type: EventType, rec: RunRecord) -> str | None:
    """Why a run did not complete: its error, or the checks that blocked it."""
    if event_type == "FAIL" and rec.status == "blocked":
        failed = [str(c.get("name")) for c in rec.checks if c.get("status") == "failed"]
        return "blocked by its audit" + (f": failed checks {', '.join(failed)}" if failed else "")
    if event_type == "FAIL":
        return str((rec.error or {}).get("message") or "failed")
    if event_type == "ABORT":
        return f"run {rec.status}: its branch was dropped, nothing was published"
    return None


def build_event(
    cfg: WapConfig,
    event_type: EventType,
    rec: RunRecord,
    *,
    now: datetime | None = None,
    parent: str | None = None,
    tables: Sequence[str] = (),
) -> RunEvent:
    """The OpenLineage RunEvent of `rec` at this transition (the client's own classes: it validates the shape).
    A table's part of a multi-table run carries the group's run id as `parent` (a parent run of job
    `run-tables`)."""
    from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
    from openlineage.client.facet_v2 import (
        data_quality_assertions_dataset,
        dataset_version_dataset,
        error_message_run,
        parent_run,
    )

    namespace = cfg.lineage.namespace if cfg.lineage is not None else "wapflow"
    run_facets: dict[str, Any] = {}
    if parent is not None:
        run_facets["parent"] = parent_run.ParentRunFacet(
            run=parent_run.Run(runId=run_uuid(parent)), job=parent_run.Job(namespace=namespace, name="run-tables")
        )
    elif (outer := _OUTER.get()) is not None:
        run_facets["parent"] = parent_run.ParentRunFacet(
            run=parent_run.Run(runId=outer[2]), job=parent_run.Job(namespace=outer[0], name=outer[1])
        )
    if (message := _message(event_type, rec)) is not None:
        run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=message, programmingLanguage="python"
        )
    output_facets: dict[str, Any] = {}
    if rec.checks and event_type != "START":
        output_facets["dataQualityAssertions"] = data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(
            assertions=[data_quality_assertions_dataset.Assertion(**a) for a in assertions(rec.checks)]
        )
    if event_type == "COMPLETE" and rec.snapshot_id is not None:
        output_facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
            datasetVersion=str(rec.snapshot_id)
        )
    inputs = [InputDataset(namespace=ns, name=name) for ns, name in (file_dataset(u) for u in rec.files)]
    inputs += [InputDataset(namespace=table_namespace(cfg), name=t) for t in tables]  # a model's input tables
    return RunEvent(
        eventType=RunState[event_type],
        eventTime=(now or datetime.now(UTC)).isoformat(),
        run=Run(runId=run_uuid(rec.run_id), facets=run_facets),
        job=Job(namespace=namespace, name=rec.table_name),
        inputs=inputs,
        outputs=[OutputDataset(namespace=table_namespace(cfg), name=rec.table_name, facets=output_facets)],
        producer=PRODUCER,
    )


def _secrets(lineage: LineageConfig, env: Mapping[str, str]) -> list[str]:
    """What must never be printed: the API key, and the URL from url_env with its path and query (an error of
    the HTTP library names the path alone)."""
    out = [env.get(lineage.api_key_env, "").strip()] if lineage.api_key_env else []
    if lineage.url_env and (url := env.get(lineage.url_env, "").strip()):
        parsed = urlparse(url)
        out += [url, parsed.path.rstrip("/"), parsed.query, parsed.password or ""]
    return sorted((s for s in out if len(s) > 1), key=len, reverse=True)


def client_for(cfg: WapConfig, env: Mapping[str, str] | None = None) -> OpenLineageClient:
    """The OpenLineage client of [lineage]: its transport given explicitly, so no openlineage.yml or
    OPENLINEAGE_* variable changes where wapflow's events go."""
    from openlineage.client.client import OpenLineageClient
    from openlineage.client.transport.file import FileConfig, FileTransport
    from openlineage.client.transport.http import ApiKeyTokenProvider, HttpConfig, HttpTransport, TokenProvider

    lineage = cfg.lineage
    if lineage is None:
        raise ValueError("no [lineage] section")
    env = os.environ if env is None else env
    if lineage.transport == "file":
        assert lineage.path is not None  # the config's validator requires it
        path = Path(lineage.path).expanduser()
        path = path if path.is_absolute() else cfg.base_dir / path
        path.parent.mkdir(parents=True, exist_ok=True)
        return OpenLineageClient(transport=FileTransport(FileConfig(log_file_path=str(path), append=True)))
    url = lineage.url or env.get(lineage.url_env or "", "").strip()
    if not url:
        raise ValueError(f"environment variable {lineage.url_env} (the receiver's URL) is not set")
    key = env.get(lineage.api_key_env, "").strip() if lineage.api_key_env else ""
    if lineage.api_key_env and not key:
        raise ValueError(f"environment variable {lineage.api_key_env} (the receiver's API key) is not set")
    retries = lineage.max_attempts - 1
    http = HttpConfig(
        url=url,
        endpoint=lineage.endpoint,
        timeout=lineage.timeout,
        auth=ApiKeyTokenProvider({"api_key": key}) if key else TokenProvider({}),
        retry={
            "total": retries,
            "read": retries,
            "connect": retries,
            "backoff_factor": 0.2,
            "status_forcelist": [500, 502, 503, 504],
            "allowed_methods": ["POST"],
        },
    )
    return OpenLineageClient(transport=HttpTransport(http))


# The loggers of the client and its HTTP library: their retry and error records name the URL's path (a secret
# from url_env may be in it) and would print beside wapflow's one warning line.
_LIBRARY_LOGGERS = ("openlineage", "urllib3", "requests")


@contextmanager
def _quiet_libraries() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in _LIBRARY_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def emit(
    cfg: WapConfig,
    event_type: EventType,
    rec: RunRecord,
    *,
    progress: Callable[[str], None],
    env: Mapping[str, str] | None = None,
    parent: str | None = None,
    tables: Sequence[str] = (),
) -> bool:
    """Send one event of `rec` to [lineage] (nothing without it). True when sent; a failure is one warning
    line through `progress`, never an exception."""
    lineage = cfg.lineage
    if lineage is None:
        return False
    env = os.environ if env is None else env
    event: RunEvent | None = None
    try:
        with _quiet_libraries():
            event = build_event(cfg, event_type, rec, parent=parent, tables=tables)
            client = client_for(cfg, env)
            client.emit(event)
            client.close(timeout=0)
    except Exception as e:  # noqa: BLE001 - lineage must never change, hide or delay a run's outcome
        text = redact(f"{type(e).__name__}: {e}", _secrets(lineage, env))
        where = lineage.path if lineage.transport == "file" else "the http receiver"
        kept = event is not None and _keep(cfg, rec.run_id, event_type, event, text)
        progress(
            f"warning: lineage event {event_type} of run {rec.run_id} not sent to {where}: {text[:300]}"
            + ("; kept to be sent again (wap lineage resend)" if kept else "")
        )
        return False
    return True


def _keep(cfg: WapConfig, run_id: str, event_type: str, event: RunEvent, error: str) -> bool:
    """A missed event into the run store's outbox (wapflow.runs.outbox); False if even that failed."""
    from openlineage.client.serde import Serde

    try:
        with _outbox(cfg) as outbox:
            outbox.add(run_id=run_id, event_type=event_type, event_json=Serde.to_json(event), error=error)
    except Exception:  # noqa: BLE001 - the warning already says the event was not sent
        return False
    return True


@contextmanager
def _outbox(cfg: WapConfig) -> Iterator[LineageOutbox]:
    """The run store's lineage outbox, on an engine of its own that is closed after (a watcher opens it every
    few minutes)."""
    from wapflow.runs.outbox import LineageOutbox

    engine = RunStore(cfg.run_store_url()).engine
    try:
        yield LineageOutbox(engine)
    finally:
        engine.dispose()


# Missed events one resend pass sends at most (the oldest first), and how long they are kept trying.
RESEND_LIMIT = 500
RESEND_WITHIN = timedelta(days=7)
# Missed events older than this (or than a pass's longer `within`) are dropped by the next pass: the outbox
# does not grow without end behind a receiver that is gone.
OUTBOX_KEEP = timedelta(days=30)


def resend(
    cfg: WapConfig,
    within: timedelta = RESEND_WITHIN,
    *,
    progress: Callable[[str], None],
    env: Mapping[str, str] | None = None,
) -> tuple[int, int | None]:
    """Send again, oldest first, the events [lineage]'s receiver missed in the last `within`: (sent, still
    waiting; None when the outbox could not be read). A pass stops at the first that fails again (the receiver
    is still down), said through `progress`; never an exception. Events older than OUTBOX_KEEP (or `within`,
    if longer) are dropped first, said as a warning."""
    lineage = cfg.lineage
    if lineage is None:
        return 0, 0
    import json

    env = os.environ if env is None else env
    sent = 0
    try:
        with _outbox(cfg) as outbox, _quiet_libraries():
            now = datetime.now(UTC)
            keep = max(within, OUTBOX_KEEP)
            dropped = outbox.forget(now - keep)
            if dropped:
                ago = span_text(keep.total_seconds())
                progress(f"warning: {dropped} lineage event(s) missed over {ago} ago dropped, never sent")
            rows = outbox.waiting(now - within, RESEND_LIMIT)
            if not rows:
                return 0, 0
            client = client_for(cfg, env)
            for row in rows:
                try:
                    client.transport.emit(json.loads(row["event_json"]))  # a dict: the transport serialises it
                except Exception as e:  # noqa: BLE001 - said below; the rest waits for the next pass
                    text = redact(f"{type(e).__name__}: {e}", _secrets(lineage, env))
                    outbox.failed_again(row["id"], text)
                    progress(
                        f"warning: lineage event {row['event_type']} of run {row['run_id']} still not sent "
                        f"({len(rows) - sent} waiting): {text[:300]}"
                    )
                    return sent, len(rows) - sent
                outbox.sent(row["id"])
                sent += 1
            client.close(timeout=0)
    except Exception as e:  # noqa: BLE001 - lineage never stops what sends it
        text = redact(f"{type(e).__name__}: {e}", _secrets(lineage, env))
        progress(f"warning: missed lineage events not sent again: {text[:300]}")
        return sent, None
    progress(f"{sent} missed lineage event(s) sent")
    return sent, 0
