"""Structured Streaming into a table through WAP: each micro-batch is one `wapflow.write` run.

    sink = wapflow.stream_to(lh, "silver.events")                 # the table's checks from wap.toml
    df.writeStream.foreachBatch(sink).option("checkpointLocation", "chk/events").start()
    # or: stream = wapflow.start_stream(lh, df, "silver.events", checkpoint="chk/events", trigger="1 second")

Each batch is written to a branch, audited with the table's checks and published when they pass, like a file
run. Its run id is `s_<query id>_<batch id>`: the query id is Spark's, kept in the checkpoint, so a batch a
restarted query runs again (after a crash, a kill, a stop) has the run id it had, and a run id publishes at most
once. Main's snapshot of a batch carries the run id and, as Iceberg's own streaming writes do, the query id and
batch id (`spark.sql.streaming.queryId`, `spark.sql.streaming.epochId`).

A blocked batch stops the query (`on_blocked="stop"`): its rows stay on the run's branch (unless the table's
`on_failure = "drop"`), the checkpoint does not pass it, and a restart runs it again, blocked until the checks
pass it. `on_blocked="skip"` leaves it blocked and goes on. A table with `on_row_failure = "quarantine"` sends
failing rows to its quarantine table and publishes the rest, as every run does. See docs/guides/streams.md.

Needs a classic Spark session (the query id is a property of the streaming query's thread in the driver JVM).
"""

from __future__ import annotations

import collections
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from wapflow.errors import TerminalError, UsageError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from wapflow.audit.spec import Check
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.pipeline.result import RunResult

# Spark sets these on the thread that runs a streaming query's batches (StreamExecution.QUERY_ID_KEY: the query's
# id, kept in its checkpoint; MicroBatchExecution.BATCH_ID_KEY).
_QUERY_ID_KEY = "sql.streaming.queryId"
# What Iceberg's own streaming sink records in a batch's snapshot summary (SparkWrite.BaseStreamingWrite), through
# the session's snapshot-property settings (Iceberg's SparkWriteConf reads them).
_SNAPSHOT_PROPERTY = "spark.sql.iceberg.snapshot-property."
QUERY_ID_PROP = "spark.sql.streaming.queryId"
EPOCH_ID_PROP = "spark.sql.streaming.epochId"

OnBlocked = Literal["stop", "skip"]
_ON_BLOCKED = ("stop", "skip")
_UUID = re.compile(r"^[0-9a-fA-F-]{32,36}$")


class StreamStopped(TerminalError):
    """A batch's run did not publish and the sink stopped its query: blocked by its checks (exit 1), or failed
    (the run's own exit code). `result` is the batch's RunResult."""

    kind = "input"

    def __init__(self, message: str, *, result: RunResult, batch_id: int, query_id: str, hint: str) -> None:
        super().__init__(message, hint=hint, run_id=result.run_id)
        self.result = result
        self.batch_id = batch_id
        self.query_id = query_id
        self.exit_code = result.exit_code
        error = result.error or {}
        if result.status != "blocked":
            self.kind = str(error.get("kind", "bug"))
            self.retryable = bool(error.get("retryable", False))


def batch_run_id(query_id: str, batch_id: int) -> str:
    """The run id of a streaming query's batch: the same for the batch whenever the query runs it."""
    if not _UUID.match(query_id):
        raise UsageError(f"{query_id!r} is not a streaming query id", hint="query ids are UUIDs (query.id)")
    if batch_id < 0:
        raise UsageError(f"batch id {batch_id} is negative", hint="Spark numbers a query's batches from 0")
    return f"s_{query_id.replace('-', '').lower()}_{batch_id}"


def query_id_of(session: SparkSession) -> str:
    """The id of the streaming query whose batch this thread runs (Spark's thread-local property); UsageError
    outside one, and on Spark Connect (its foreachBatch runs where no query property is readable)."""
    try:
        qid = session.sparkContext.getLocalProperty(_QUERY_ID_KEY)
    except Exception as e:  # noqa: BLE001 - Spark Connect has no SparkContext: named below
        raise UsageError(
            f"a wapflow stream sink needs a classic Spark session ({type(e).__name__}: {e})",
            hint="run the streaming query on a classic session (not Spark Connect)",
        ) from None
    if not qid:
        raise UsageError(
            "a wapflow stream sink was called outside a streaming query's batch (no query id)",
            hint="give it to df.writeStream.foreachBatch(sink), or use wapflow.start_stream",
        )
    return str(qid)


class StreamSink:
    """The function `df.writeStream.foreachBatch` calls with each micro-batch: one WAP run of `table` per batch
    (see the module's docstring). `results` holds the last 100 batches' RunResults; `stopped_by` the error that
    stopped the query, if the sink did."""

    def __init__(
        self,
        lh: Lakehouse,
        table: str,
        *,
        mode: str | None = None,
        key: Sequence[str] | None = None,
        delete_when: str | None = None,
        order_by: Sequence[str] | None = None,
        checks: Sequence[Check] = (),
        no_checks: bool = False,
        on_blocked: OnBlocked = "stop",
    ) -> None:
        from wapflow.sql.identifiers import TableName

        if on_blocked not in _ON_BLOCKED:
            raise UsageError(
                f"on_blocked={on_blocked!r} is not one of {', '.join(_ON_BLOCKED)}",
                hint='"stop" stops the query at a blocked batch (it runs again on restart); "skip" goes on',
            )
        TableName.parse(table)  # a bad name now, not at the first batch
        self.lh = lh
        self.table = table
        self.mode = mode
        self.key = key
        self.delete_when = delete_when
        self.order_by = order_by
        self.checks = tuple(checks)
        self.no_checks = no_checks
        self.on_blocked = on_blocked
        self.results: collections.deque[RunResult] = collections.deque(maxlen=100)
        self.stopped_by: StreamStopped | None = None
        self._session_lh: tuple[int, Lakehouse] | None = None
        self._lock = threading.Lock()  # held while a batch's run runs
        self._stopping = False  # Stream.stop: no batch starts a run any more

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        # Waits for no lock while Stream.stop holds it to stop the query (that would wait for this batch forever).
        while not self._lock.acquire(timeout=0.05):
            if self._stopping:
                # Raised, not returned: a batch that returned would count as done in the checkpoint.
                raise UsageError(f"the stream is stopping: batch {batch_id} runs again when it restarts")
        try:
            if self._stopping:
                raise UsageError(f"the stream is stopping: batch {batch_id} runs again when it restarts")
            self._batch(batch_df, int(batch_id))
        finally:
            self._lock.release()

    def _batch(self, batch_df: DataFrame, batch_id: int) -> None:
        from wapflow.api import write

        session = batch_df.sparkSession
        query_id = query_id_of(session)
        run_id = batch_run_id(query_id, batch_id)
        lh = self._lakehouse(session)
        earlier = lh.store.get(run_id)
        if earlier is not None and earlier.table_name != self.table:
            raise UsageError(
                f"run {run_id} (batch {batch_id} of query {query_id}) wrote {earlier.table_name}, not {self.table}",
                hint="one streaming query (one checkpoint) writes one table: give each table a query of its own",
            )
        conf = session.conf
        props = {QUERY_ID_PROP: query_id, EPOCH_ID_PROP: str(batch_id)}
        for k, v in props.items():  # the stream's own session (a clone Spark makes per query): no one else's
            conf.set(_SNAPSHOT_PROPERTY + k, v)
        try:
            res = write(
                lh,
                self.table,
                batch_df,
                mode=self.mode,
                key=self.key,
                delete_when=self.delete_when,
                order_by=self.order_by,
                checks=self.checks,
                run_id=run_id,
                no_checks=self.no_checks,
            )
        finally:
            for k in props:
                conf.unset(_SNAPSHOT_PROPERTY + k)
        self.results.append(res)
        lh.progress(f"stream batch {batch_id}: {res.status} ({res.message})")
        if res.status in ("published", "awaiting_review"):
            return
        if res.status == "blocked" and self.on_blocked == "skip":
            return
        self.stopped_by = _stopped(res, batch_id, query_id, self.table)
        raise self.stopped_by

    def _lakehouse(self, session: SparkSession) -> Lakehouse:
        """The lakehouse on the query's own session: Spark runs a query's batches on a clone of the session that
        started it, and a batch's temporary views and settings live there (a merge reads the batch from one)."""
        from wapflow.lakehouse.lakehouse import Lakehouse

        ident = int(session._jsparkSession.hashCode())
        if self._session_lh is None or self._session_lh[0] != ident:
            self._session_lh = (ident, Lakehouse(self.lh.config, spark=session, progress=self.lh.progress))
        return self._session_lh[1]


def _stopped(res: RunResult, batch_id: int, query_id: str, table: str) -> StreamStopped:
    where = f"batch {batch_id} of streaming query {query_id} into {table}"
    if res.status == "blocked":
        return StreamStopped(
            f"{where} was blocked by its checks, and the query stopped: {res.message}",
            result=res,
            batch_id=batch_id,
            query_id=query_id,
            hint=f"`wap report {res.run_id}` shows the failures. A restart from the checkpoint runs batch "
            f"{batch_id} again (run {res.run_id}), blocked until it passes: fix the checks in wap.toml (or set "
            'on_row_failure = "quarantine"), or restart once with on_blocked="skip" to leave this batch off main',
        )
    return StreamStopped(
        f"{where} failed: {res.message}; main is unchanged, and the query stopped",
        result=res,
        batch_id=batch_id,
        query_id=query_id,
        hint=f"`wap report {res.run_id}` shows why; a restart from the checkpoint runs batch {batch_id} again "
        "(the same run id: what was published is not published twice)",
    )


def stream_to(
    lh: Lakehouse,
    table: str,
    *,
    mode: str | None = None,
    key: Sequence[str] | None = None,
    delete_when: str | None = None,
    order_by: Sequence[str] | None = None,
    checks: Sequence[Check] = (),
    no_checks: bool = False,
    on_blocked: OnBlocked = "stop",
) -> StreamSink:
    """A sink for `df.writeStream.foreachBatch(...)`: each micro-batch written to `table` by one WAP run (the
    table's checks from wap.toml plus `checks`; `mode` and its keys as for wapflow.write), exactly once across
    restarts from the query's checkpoint. A blocked batch stops the query (`on_blocked="stop"`) or is left on its
    branch (`"skip"`)."""
    return StreamSink(
        lh,
        table,
        mode=mode,
        key=key,
        delete_when=delete_when,
        order_by=order_by,
        checks=checks,
        no_checks=no_checks,
        on_blocked=on_blocked,
    )


@dataclass
class Stream:
    """A running query and its sink (wapflow.start_stream). `await_termination` raises the sink's
    StreamStopped (a WapError with the batch's exit code) in place of Spark's wrapped error when the sink
    stopped the query."""

    query: StreamingQuery
    sink: StreamSink

    @property
    def results(self) -> list[RunResult]:
        return list(self.sink.results)

    def await_termination(self, timeout: int | None = None) -> bool | None:
        try:
            return self.query.awaitTermination(timeout) if timeout is not None else self.query.awaitTermination()
        except Exception as e:
            if self.sink.stopped_by is not None:
                raise self.sink.stopped_by from e
            raise

    def process_all_available(self) -> None:
        """Wait until every row available now is processed (raises as await_termination does)."""
        try:
            self.query.processAllAvailable()
        except Exception as e:
            if self.sink.stopped_by is not None:
                raise self.sink.stopped_by from e
            raise

    def stop(self) -> None:
        """Stop the query once the batch in flight has ended (published, blocked or failed by its own run): a
        stop in the middle of a run would interrupt its Spark jobs and record it failed. A batch that has not
        started its run yet is left to the next start, under the same run id."""
        self.sink._stopping = True
        try:
            with self.sink._lock:
                self.query.stop()
        finally:
            self.sink._stopping = False


def start_stream(
    lh: Lakehouse,
    df: DataFrame,
    table: str,
    *,
    checkpoint: str,
    trigger: str | None = None,
    query_name: str | None = None,
    **sink: Any,
) -> Stream:
    """Start `df` (a streaming DataFrame) into `table` through stream_to's sink (`sink` takes its keywords),
    with its checkpoint at `checkpoint`. `trigger`: a processing time ("1 second", "10 seconds"), "available_now"
    (what is there now, then stop) or None (each batch as soon as the last ends)."""
    if not df.isStreaming:
        raise UsageError(
            "start_stream needs a streaming DataFrame (spark.readStream...)",
            hint="for a DataFrame that is not a stream, use wapflow.write",
        )
    fn = stream_to(lh, table, **sink)
    writer = df.writeStream.foreachBatch(fn).option("checkpointLocation", str(checkpoint))
    if trigger == "available_now":
        writer = writer.trigger(availableNow=True)
    elif trigger is not None:
        writer = writer.trigger(processingTime=trigger)
    if query_name is not None:
        writer = writer.queryName(query_name)
    return Stream(writer.start(), fn)
