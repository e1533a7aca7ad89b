"""WAP as Prefect tasks inside a Prefect transaction (`pip install 'wapflow[prefect]'`).

    from wapflow.integrations.prefect import wap_flow
    wap_flow("nyc.trips", ["landing/a.parquet"], config="wap.toml")      # a Prefect flow run

or, in a flow of your own:

    from prefect import flow
    from prefect.transactions import transaction
    from wapflow.integrations.prefect import audit_task, lakehouse, publish_task, start, write_task

    @flow
    def nightly(files: list[str]) -> None:
        lh = lakehouse("wap.toml")
        state = start("nyc.trips", files)
        with transaction():
            state = write_task(lh, state)      # rollback hook: clean up per the table's on_failure
            state = audit_task(lh, state)      # blocked: raises (report as an artifact), the transaction rolls back
            publish_task(lh, state)            # the transaction's last act: main moves

What the reference design gets wrong, and what happens here instead:
- A Prefect task that raises never runs its own rollback hook (its hooks are staged only when it
  completes), so a write that fails part-way leaked its branch. `write_task` compensates inside itself:
  before raising it takes its branch away. Later failures in the transaction run its rollback hook,
  which keeps or drops the branch as the table's `on_failure` says.
- Only errors wapflow classifies as retryable (commit conflict, throttling, unreachable, a publish lock
  held too long) are retried (`retry_condition_fn`); terminal ones (blocked, bad input, bugs) fail the
  flow at once, with the audit report as a markdown artifact.
- Results are not persisted (`persist_result=False`, no cache): a Lakehouse holds a Spark session,
  which must not be pickled into a result store by accident. (Prefect's flow engine still writes a
  failed flow's exception to its result store, whatever persist_result says: that is a RunNotPublished
  holding the run's plain result, never a Lakehouse.)
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.transactions import Transaction, get_transaction, transaction

from wapflow import api
from wapflow import steps as wap_steps
from wapflow.deprecation import renamed
from wapflow.pipeline.driver import drive
from wapflow.pipeline.retry import retryable
from wapflow.pipeline.state import RunState, report_from_data
from wapflow.sql.identifiers import TableName

if TYPE_CHECKING:
    from prefect.client.schemas.objects import State, TaskRun
    from prefect.tasks import Task

    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.pipeline.result import RunResult

__all__ = [
    "RunNotPublished",
    "audit_task",
    "ingest_flow",
    "ingest_task",
    "lakehouse",
    "publish_task",
    "start",
    "wap_flow",
    "write_task",
]

start = api.start


class RunNotPublished(Exception):
    """A WAP run that ended blocked or failed; `retryable` as the run's error says (blocked: never)."""

    def __init__(self, res: RunResult) -> None:
        super().__init__(f"run {res.run_id} on {res.table}: {res.status}: {res.message}")
        self.result = res
        self.retryable = retryable(res.error) and res.status == "failed"


def only_retryable(task: Task[Any, Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Prefect's retry_condition_fn: retry what wapflow says a retry can help, nothing else."""
    try:
        state.result()
    except Exception as e:  # noqa: BLE001 - the task's own exception, inspected, not handled
        return bool(getattr(e, "retryable", False))
    return False


_TASK: dict[str, Any] = {
    "persist_result": False,
    "cache_policy": NO_CACHE,
    "retries": 3,
    "retry_delay_seconds": [1, 4, 10],
    "retry_condition_fn": only_retryable,
}

_lakehouses: dict[str, Lakehouse] = {}  # by config file: one per process
_opened: dict[int, Lakehouse] = {}  # every lakehouse a write task ran on, for its rollback hook
_lock = threading.Lock()


def lakehouse(config: str | os.PathLike[str] | None = None) -> Lakehouse:
    """The lakehouse of a wap.toml, one per config and process (its Spark session is reused by later flows)."""
    key = str(api.config_path(config) or "")
    with _lock:
        if key not in _lakehouses:
            _lakehouses[key] = api.connect(config, progress=_log)
        return _lakehouses[key]


def _log(line: str) -> None:
    try:
        get_run_logger().info(line)
    except Exception:  # noqa: BLE001 - outside a Prefect run there is no run logger: progress is dropped
        return


def _raise_unless(lh: Lakehouse, state: RunState, *ok: str) -> None:
    if state.status in ok:
        return
    res = api.result(lh, state)
    _report_artifact(res)
    raise RunNotPublished(res)


def _report_artifact(res: RunResult) -> None:
    """The run's audit report where the Prefect UI shows it (key `wap-<run id>`)."""
    lines = [f"# WAP run `{res.run_id}` on `{res.table}`: **{res.status}**", "", res.message, ""]
    if res.checks:
        lines += ["| check | status | observed | threshold |", "|---|---|---|---|"]
        for c in res.checks:
            lines.append(f"| {c.get('name')} | {c.get('status')} | {c.get('observed')} | {c.get('threshold')} |")
    if res.error:
        lines += ["", f"error ({res.error.get('kind')}): {res.error.get('message')}", f"hint: {res.error.get('hint')}"]
    key = "wap-" + "".join(ch if ch.isalnum() else "-" for ch in res.run_id.lower())
    create_markdown_artifact(markdown="\n".join(lines), key=key, description=f"WAP run {res.run_id}: {res.status}")


def _clean_up(lh: Lakehouse, state: RunState) -> None:
    """Leave an unpublished run's branch as the table's on_failure says: kept (for inspection) or dropped."""
    rec = lh.store.get(state.run_id)
    branch = state.branch or (rec.branch if rec else None)
    if rec is None or branch is None or rec.status == "published":
        return
    table = TableName.parse(state.table)
    if not lh.tables.exists(table) or not lh.iceberg.exists(table, branch):
        return
    if lh.config.table(state.table).on_failure == "drop":
        lh.iceberg.discard(branch, [table])
        rec.branch_kept = False
        _log(f"run {state.run_id}: branch {branch} dropped (on_failure = drop)")
    else:
        rec.branch_kept = True
        _log(f"run {state.run_id}: branch {branch} kept for inspection (drop it: wap discard {branch})")
    lh.store.save(rec)


@task(name="wap-write", **_TASK)
def write_task(lh: Lakehouse, state: RunState) -> RunState:
    """Prepare and write the batch to the run's branch. A failure takes the branch away before raising:
    Prefect never runs the rollback hook of a task that raised."""
    state = drive(lh, state, steps=("prepare", "write"))
    if state.status == "failed":
        _discard_failed_write(lh, state)
        _raise_unless(lh, state)
    txn = get_transaction()
    if txn is not None:  # what the rollback hook needs: plain values (the transaction copies what it stores)
        with _lock:
            _opened[id(lh)] = lh
        txn.set("wap_state", state.to_json())
        txn.set("wap_lakehouse", id(lh))
    return state


def _discard_failed_write(lh: Lakehouse, state: RunState) -> None:
    table = TableName.parse(state.table)
    branch = state.branch
    if branch and lh.tables.exists(table) and lh.iceberg.exists(table, branch):
        lh.iceberg.discard(branch, [table])
        _log(f"run {state.run_id}: the write failed; branch {branch} dropped")


@write_task.on_rollback
def _rollback_write(txn: Transaction) -> None:
    text = txn.get("wap_state", None)
    if text is None:
        return
    with _lock:
        lh = _opened[txn.get("wap_lakehouse")]
    _clean_up(lh, RunState.from_json(text))


@task(name="wap-audit", **_TASK)
def audit_task(lh: Lakehouse, state: RunState) -> RunState:
    """Audit the new rows. Blocked or failed: the report becomes an artifact and the task raises."""
    state = wap_steps.audit(lh, state)
    if state.status == "running" and state.report is not None and not report_from_data(state.report).passed:
        # The core records a failed audit in its publish step (status blocked, the branch kept or dropped
        # per on_failure, nothing published): let it, then fail the task.
        state = wap_steps.publish(lh, state)
    _raise_unless(lh, state, "running")
    return state


@task(name="wap-publish", **_TASK)
def publish_task(lh: Lakehouse, state: RunState) -> RunState:
    """Move main to the audited branch (fast-forward, or the run's rows re-applied if main moved)."""
    state = wap_steps.publish(lh, state)
    if state.status == "running":
        # A merge or replace on a moved main went back to write: applied again, re-audited, published.
        state = drive(lh, state)
    _raise_unless(lh, state, "published")
    return state


@flow(name="wap", persist_result=False)
def wap_flow(
    table: str,
    files: list[str] | None = None,
    config: str | None = None,
    run_id: str | None = None,
    sources: list[str] | None = None,
) -> dict[str, Any]:
    """Write, audit and publish `files` into `table` in one Prefect transaction; the run's result.
    `sources` is the deprecated name of `files` (a deployment's parameters keep working for one release)."""
    lh = lakehouse(config)
    state = start(table, renamed(files, sources, old_name="sources", new_name="files", where="wap_flow"), run_id=run_id)
    with transaction():
        state = write_task(lh, state)
        state = audit_task(lh, state)
        state = publish_task(lh, state)
    return api.result(lh, state).to_dict()


@task(name="wap-ingest", persist_result=False, cache_policy=NO_CACHE)
def ingest_task(lh: Lakehouse, source: str) -> dict[str, Any]:
    """One pass over a [sources.NAME] entry (wapflow retries transient failures per batch itself)."""
    res = api.ingest(lh, source)
    doc = res.to_dict()
    if res.exit_code != 0:
        bad = [f for f in res.files if f.state in ("blocked", "failed")]
        lines = [f"# Ingest of `{source}`: {res.message()}", "", "| file | state | run | reason |", "|---|---|---|---|"]
        lines += [f"| {f.uri} | {f.state} | {f.run_id} | {f.reason or ''} |" for f in bad]
        create_markdown_artifact(markdown="\n".join(lines), key=f"wap-ingest-{source.lower().replace('_', '-')}")
        raise IngestNotClean(res.message(), doc)
    return doc


class IngestNotClean(Exception):
    """An ingest pass that blocked or failed files (the others were published); not retried."""

    retryable = False

    def __init__(self, message: str, doc: dict[str, Any]) -> None:
        super().__init__(message)
        self.doc = doc


@flow(name="wap-ingest", persist_result=False)
def ingest_flow(source: str, config: str | None = None) -> dict[str, Any]:
    """Ingest what landed in a [sources.NAME] location: each new file published exactly once."""
    return ingest_task(lakehouse(config), source)
