"""Durable ingest on DBOS Transact: each claimed batch runs as one workflow whose steps are the core's steps.

Why DBOS on top of the ledger: the ledger makes a file run at most once at a time (one claim wins), and a
claim left by a dead process is taken over; DBOS makes the run itself resume where it stopped, step by
step, after a crash or a restart, with the retries and their waits recorded, and keeps at most one run per
table at a time (a partitioned queue) and a bounded number overall.

- The workflow id is `<run id>.c<claims>`: the run id comes from the source and its file identities, the
  claim count from the ledger (never reset). A duplicated trigger, event or enqueue of the same claim is
  the same workflow and runs once; a claim made after `wap retry` is a new one.
- Steps: adopt the claim (the process running the workflow holds it), the run's state, prepare, write,
  audit, publish (wapflow.outer.dbos_steps.wap_step: the core's functions on a JSON RunState, the same
  steps users put in workflows of their own), settle the ledger. Steps are at-least-once after
  a crash; each is idempotent (a run id's snapshots are found before anything is written again).
- A transient failure (named conditions only) runs the run again after a durable sleep, up to the source's
  max_attempts; then its files are `failed`. Terminal failures do not retry.
- Alerts ([alerts]) are the last step, after the ledger is settled: a replay after a crash finds the
  step's recorded output, and the alert log's unique row (wapflow.runs.alerts) holds even if the step
  itself is replayed, so an alert is sent at most once.
- The application version is pinned (wapflow's version and WORKFLOW_VERSION), not DBOS's hash of the code,
  so a restart after a crash resumes interrupted workflows; bump WORKFLOW_VERSION when the steps change.
- executor_id is the worker's name: a restarted worker with the same name resumes its own workflows.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from dbos import DBOS, Queue, SetEnqueueOptions, SetWorkflowID

from wapflow import __version__
from wapflow.config.urls import is_postgresql, password_of, redact_url
from wapflow.errors import BugError, ConfigError, WapError
from wapflow.faults import crash_point
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.outer.dbos_steps import as_dbos_step, use
from wapflow.outer.dbos_steps import lakehouse as _lh
from wapflow.pipeline import RunResult, RunState, drive, new_state
from wapflow.pipeline import result as run_result
from wapflow.pipeline.retry import RetryPolicy
from wapflow.redact import redact
from wapflow.runs.databases import connection_error, dbos_database_url, sqlite_pragmas
from wapflow.runs.ledger import LedgerRow

QUEUE = "wapflow_ingest"
WORKFLOW_VERSION = "3"  # 2: the core steps moved to wapflow.integrations.dbos; 3: alert step after settle
QUEUE_POLL_SECONDS = 0.05

_lock = threading.Lock()
_launched = False


def app_version() -> str:
    return f"wapflow-{__version__}-wf{WORKFLOW_VERSION}"


def workflow_id(run_id: str, rows: list[LedgerRow]) -> str:
    return f"{run_id}.c{max(r.claims for r in rows)}"


def database_url(lh: Lakehouse, url: str | None) -> str:
    """DBOS's system database: the one named, else beside the run store (a SQLite file of its own, or the
    run store's PostgreSQL database, where DBOS keeps to its own schema `dbos`)."""
    return dbos_database_url(lh.config, url)


# --- the workflow and its steps --------------------------------------------------------------------


@DBOS.step()
def adopt_step(source: str, run_id: str, keys: list[str]) -> list[str]:
    """This process holds the batch's claim from now on; files settled meanwhile (`wap skip`) drop out."""
    return _lh().ledger.adopt(keys, run_id)


@DBOS.step()
def state_step(source: str, run_id: str, keys: list[str]) -> str:
    lh = _lh()
    table = lh.config.resolve_source(source).table
    uris = [r.uri for r in lh.ledger.rows(keys=keys)]
    return new_state(table, uris, run_id=run_id, source=source).to_json()


@DBOS.step()
def batch_with_models_step(source: str, run_id: str, keys: list[str]) -> dict[str, Any]:
    """The batch and the models downstream of its table as one transaction (its own idempotence by run id: a
    replay after a crash resumes it, and a published one is not published again); the batch's table's result."""
    from wapflow.pipeline.models import run_batch

    lh = _lh()
    lh.on_this_thread()
    src = lh.config.resolve_source(source)
    uris = [r.uri for r in lh.ledger.rows(keys=keys)]
    group = run_batch(lh, src.table, uris, run_id=run_id, source=source)
    return group.for_table(src.table).to_dict()


@DBOS.step()
def settle_step(source: str, run_id: str, keys: list[str], state: str) -> dict[str, Any]:
    """Record the run in the ledger, once: only files still claimed by this run are settled (a replay
    after a crash finds them settled and leaves them alone). `state`: the run's state, or (a batch run with
    its models) the batch table's result."""
    crash_point("ingest:ran")
    from wapflow.outer.ingest import Ingest

    lh = _lh()
    doc = json.loads(state)
    res = RunResult.from_dict(doc) if "exit_code" in doc else run_result(lh, RunState.from_json(state))
    rows = [r for r in lh.ledger.rows(keys=keys) if r.state == "claimed" and r.run_id == run_id]
    alerts: list[dict[str, Any]] = []
    if rows:
        ing = Ingest(lh, lh.config.resolve_source(source))
        ing.settle(res, rows, retry=False)
        alerts = [ev.to_dict() for ev in ing.alerts]
    return {
        "run_id": run_id,
        "status": res.status,
        "files": len(keys),
        "snapshot_id": res.snapshot_id,
        "alerts": alerts,
    }


@DBOS.step()
def alert_step(events: list[dict[str, Any]]) -> list[dict[str, object]]:
    """Send the batch's alerts; never raises (a sink that is down does not fail the workflow)."""
    from wapflow.alerts import AlertEvent, notify

    lh = _lh()
    sent = notify(lh.config, lh.store.engine, [AlertEvent.from_dict(e) for e in events], progress=lh.progress)
    return [d.to_dict() for d in sent]


@DBOS.workflow()
def ingest_batch(source: str, run_id: str, keys: list[str]) -> dict[str, Any]:
    held = adopt_step(source, run_id, keys)
    if not held:
        return {"run_id": run_id, "status": "settled elsewhere", "files": 0, "snapshot_id": None}
    lh = _lh()
    # Outside a step, so it runs in every execution: a workflow resumed by another worker (or a restart) replays
    # adopt_step's recorded answer, and the claim would keep naming the dead process; another worker or an
    # ingest would then take over a batch a live process is running.
    lh.ledger.adopt(held, run_id)
    retry = RetryPolicy.of_source(lh.config.resolve_source(source).cfg, DBOS.sleep)
    from wapflow.outer.ingest import models_of

    with_models = bool(models_of(lh, lh.config.resolve_source(source)))
    attempt = 1
    while True:
        # Each attempt is the same run id again: it resumes where the failed one stopped.
        if with_models:
            done = batch_with_models_step(source, run_id, held)
            error, outcome = done.get("error"), json.dumps(done)
        else:
            state = drive(lh, RunState.from_json(state_step(source, run_id, held)), run_step=as_dbos_step)
            error, outcome = state.record.get("error"), state.to_json()
        if not retry.again(error, attempt):
            break
        retry.wait(attempt)  # a durable sleep: a recovered workflow does not wait again
        attempt += 1
    settled = settle_step(source, run_id, held, outcome)
    events = settled.pop("alerts", [])
    if events:
        settled["alerts"] = alert_step(events)
    return settled


@DBOS.step()
def maintain_step(table: str, pass_id: str) -> dict[str, Any]:
    """One table's maintenance pass (wapflow.maintain): each action recorded and alerted there. A replay
    after a crash runs the pass again under the same pass id; every action is idempotent."""
    from wapflow.maintain import maintain
    from wapflow.sql.identifiers import TableName

    lh = _lh()
    lh.on_this_thread()
    if not lh.tables.exists(TableName.parse(table)):
        return {"table": table, "status": "skipped", "message": f"no table {table} yet", "pass_id": pass_id}
    res = maintain(lh, table, pass_id=pass_id)
    (out,) = res.tables
    return {"table": table, "status": out.status, "message": out.message, "pass_id": pass_id}


@DBOS.workflow()
def maintain_table(table: str, pass_id: str) -> dict[str, Any]:
    """`wap watch`'s scheduled maintenance of one table: on the ingest queue, partitioned by table, so it
    never runs beside a run of the same table in this worker (and holds the publish lock only briefly)."""
    return maintain_step(table, pass_id)


def maintenance_workflow_id(table: str, slot: int) -> str:
    """One workflow per table and schedule slot: a slot enqueued twice (two ticks, two workers) runs once."""
    return f"maintain.{table}.s{slot}"


# --- the worker's side ----------------------------------------------------------------------------


class Durable:
    """DBOS launched in this process with wapflow's workflow registered, and the queue batches go to."""

    def __init__(self, lh: Lakehouse, *, worker: str, concurrency: int, database: str | None = None) -> None:
        global _launched
        with _lock:
            if _launched:
                raise BugError("one durable worker per process")
            _launched = True
        use(lh)
        self.lh = lh
        self.url = database_url(lh, database)
        config: Any = {
            "name": "wapflow",
            "system_database_url": self.url,
            "application_version": app_version(),
            "executor_id": worker,
            "log_level": "WARNING",
        }
        self._engine = _sqlite_engine(self.url) if self.url.startswith("sqlite") else None
        if self._engine is not None:
            config["system_database_engine"] = self._engine
        try:
            DBOS(config=config)
            DBOS.launch()  # resumes this worker's interrupted workflows (same executor id and version)
        except Exception as e:  # noqa: BLE001 - DBOS raises plain exceptions for an unusable database
            DBOS.destroy()
            self._dispose()
            _release()
            raise _open_error(e, self.url) from None
        # At most one run per table (publish order), `concurrency` runs in this worker. Polled every 0.05 s
        # rather than DBOS's 1 s: a landed file waited 0.5 s on average for its batch to start (bench_outer).
        self.queue: Queue = DBOS.register_queue(
            QUEUE, worker_concurrency=concurrency, partition_concurrency=1, polling_interval_sec=QUEUE_POLL_SECONDS
        )
        self.worker = worker
        self.alert_recovered()

    def alert_recovered(self) -> None:
        """`recovered` alerts for this worker's workflows that DBOS resumed at launch (PENDING: a previous
        process of this worker died inside them). The workflow id is the occurrence, so a claim alerts once
        however often it is resumed. Never raises: DBOS resumes them whether or not the alert goes out."""
        if not self.lh.config.alerts.sinks:
            return
        from wapflow.alerts import AlertEvent, notify
        from wapflow.alerts.event import commands_for

        try:
            pending = DBOS.list_workflows(
                status=["PENDING"], queue_name=QUEUE, executor_id=self.worker, load_input=True, load_output=False
            )
        except Exception as e:  # noqa: BLE001 - listing is for the alert only; the workflows resume regardless
            self.lh.progress(f"warning: cannot list resumed workflows for alerts: {type(e).__name__}")
            return
        events = []
        for wf in pending:
            args = wf.input["args"] if wf.input else ()
            if len(args) < 3:
                continue
            source, run_id, keys = str(args[0]), str(args[1]), list(args[2])
            rec = self.lh.store.get(run_id)
            table = (
                rec.table_name
                if rec
                else self.lh.config.sources[source].table
                if source in self.lh.config.sources
                else None
            )
            events.append(
                AlertEvent(
                    event="recovered",
                    table=table,
                    run_id=run_id,
                    status="resumed",
                    message=f"durable workflow {wf.workflow_id} of source {source} was interrupted (its worker "
                    f"stopped or died); worker {self.worker} resumed it at the step it was in",
                    source=source,
                    files=[r.uri for r in self.lh.ledger.rows(keys=keys)],
                    commands=commands_for(table, run_id, None),
                    key=wf.workflow_id,
                )
            )
        notify(self.lh.config, self.lh.store.engine, events, progress=self.lh.progress)

    def enqueue(self, source: str, table: str, run_id: str, rows: list[LedgerRow]) -> str:
        """Hand a claimed batch to its workflow; the same claim enqueued twice is one workflow."""
        wid = workflow_id(run_id, rows)
        with SetWorkflowID(wid), SetEnqueueOptions(queue_partition_key=table):
            self.queue.enqueue(ingest_batch, source, run_id, [r.key for r in rows])
        return wid

    def revive(self, run_id: str, rows: list[LedgerRow]) -> None:
        """A claimed batch whose process died (the ledger's claim names a process that is gone; a workflow's
        every execution adopts its claim): its workflow, still PENDING under the dead worker's executor id, goes
        back on the queue, so any worker resumes it at the step it was in. DBOS itself re-enqueues it only when a
        worker of that name starts again, which may be never."""
        wid = workflow_id(run_id, rows)
        status = DBOS.get_workflow_status(wid)
        if status is not None and status.status == "PENDING":
            DBOS.resume_workflow(wid, queue_name=QUEUE)

    def enqueue_maintenance(self, table: str, slot: int) -> str:
        """The table's maintenance for schedule slot `slot` (wall-clock time // every)."""
        wid = maintenance_workflow_id(table, slot)
        with SetWorkflowID(wid), SetEnqueueOptions(queue_partition_key=table):
            self.queue.enqueue(maintain_table, table, f"w{slot}_{table.replace('.', '_')}"[:60])
        return wid

    def active(self) -> int:
        """Workflows of this worker not finished yet (enqueued or running)."""
        found = DBOS.list_workflows(
            status=["ENQUEUED", "PENDING"], queue_name=QUEUE, load_input=False, load_output=False
        )
        return len(found)

    def stop(self, timeout: float) -> None:
        """Stop taking workflows and wait up to `timeout` for the running ones; one still running then
        stays PENDING and resumes at the next start (its steps are idempotent)."""
        try:
            DBOS.destroy(workflow_completion_timeout_sec=max(int(timeout), 0))
        finally:
            self._dispose()
            _release()

    def _dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()  # DBOS leaves an engine it was given to its owner


def _sqlite_engine(url: str) -> Any:
    """DBOS's SQLite system database as DBOS opens it (IMMEDIATE transactions, foreign keys), but with the run
    store's settings (runs.databases.sqlite_pragmas): DBOS's own rollback journal fsyncs each of the dozen commits
    a workflow makes (about 2 ms each here), most of them between a file landing and main moving. The steps a lost
    commit recorded are idempotent (replayed, they find their run's snapshots)."""
    import sqlalchemy as sa

    engine = sa.create_engine(url, pool_size=20, max_overflow=0, pool_timeout=30, pool_pre_ping=True)

    @sa.event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _rec: object) -> None:
        dbapi_conn.isolation_level = "IMMEDIATE"
        sqlite_pragmas(dbapi_conn)
        dbapi_conn.execute("PRAGMA foreign_keys=ON")

    return engine


def _open_error(e: Exception, url: str) -> WapError:
    """Why DBOS could not open its database, never with the URL's password: a PostgreSQL that cannot be
    reached is transient (as for the run store), anything else a configuration to fix."""
    import sqlalchemy as sa

    if isinstance(e, sa.exc.DBAPIError) and is_postgresql(url):
        return connection_error(e, url, what="DBOS's system database")
    first = (str(e).strip().splitlines() or [""])[0]
    return ConfigError(
        f"cannot open the durable-runs database {redact_url(url)}: "
        f"{type(e).__name__}: {redact(first, password_of(url))}",
        hint="check [watch] database (an SQLAlchemy URL: sqlite:///path or postgresql://user:pw@host:5432/db)",
    )


def _release() -> None:
    global _launched
    use(None)
    with _lock:
        _launched = False
