"""Structured Streaming into tables through WAP: each micro-batch (or each `publish_every` of them) one run.

    sink = wapflow.stream_to(lh, "silver.events")                 # the table's checks from wap.toml
    df.writeStream.foreachBatch(sink).option("checkpointLocation", "chk/events").start()
    # or: stream = wapflow.start_stream(lh, df, "silver.events", checkpoint="chk/events", trigger="1 second")
    # several tables per batch, one commit: foreachBatch(wapflow.streams.foreach_batch(lh, fn)), fn(tx, df, id)

Each batch is written to a branch, audited with the table's checks and published when they pass, like a file
run. Its run id is `s_<query id>_<batch id>`: the query id is Spark's, kept in the checkpoint, so a batch a
restarted query runs again (after a crash, a kill, a stop) has the run id it had, and a run id publishes at most
once. Main's snapshot of a batch carries the run id and, as Iceberg's own streaming writes do, the query id and
batch id (`spark.sql.streaming.queryId`, `spark.sql.streaming.epochId`).

`publish_every=N`: each batch is staged (its rows in `staging/<query id>/batch=<id>`, overwritten when Spark
runs it again), and the N-th is sealed with the ones before it into one run, `s_<query id>_<first batch id>`:
`window=A-B` is written before the run starts, `done=A-B` after it published, then the staged batches go. A
restart finishes a sealed window by its run id, skips a batch inside the last done one, and adds any other batch
to the open window. A query that ends without an error (Stream.stop, availableNow done) seals what is staged.

A blocked batch stops the query (`on_blocked="stop"`): its rows stay on the run's branch (unless the table's
`on_failure = "drop"`), the checkpoint does not pass it, and a restart runs it again, blocked until the checks
pass it. `on_blocked="skip"` leaves it blocked and goes on. A table with `on_row_failure = "quarantine"` sends
failing rows to its quarantine table and publishes the rest, as every run does. See docs/guides/streams.md.

Needs a classic Spark session: Spark Connect runs a foreachBatch function in a Python process of its server,
where the query id, this lakehouse and its run store cannot be had (refused up front, exit 2).
"""

from __future__ import annotations

import collections
import contextlib
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from wapflow.errors import EXIT_STOPPED, TerminalError, UsageError
from wapflow.lakehouse.model import BATCHES_PROP, EPOCH_ID_PROP, QUERY_ID_PROP, snapshot_property_confs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from wapflow.audit.spec import Check
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.pipeline.result import MultiRunResult, RunResult
    from wapflow.pipeline.transaction import Transaction

# Spark sets these on the thread that runs a streaming query's batches (StreamExecution.QUERY_ID_KEY: the query's
# id, kept in its checkpoint; MicroBatchExecution.BATCH_ID_KEY).
_QUERY_ID_KEY = "sql.streaming.queryId"

OnBlocked = Literal["stop", "skip"]
_ON_BLOCKED = ("stop", "skip")
_UUID = re.compile(r"^[0-9a-fA-F-]{32,36}$")


class StreamStopped(TerminalError):
    """A batch's run did not publish and the sink stopped its query: blocked by its checks (exit 1), or failed
    (the run's own exit code). `result` is the batch's RunResult."""

    kind = "input"

    def __init__(
        self, message: str, *, result: RunResult | MultiRunResult, batch_id: int, query_id: str, hint: str
    ) -> None:
        super().__init__(message, hint=hint, run_id=result.run_id)
        self.result = result
        self.batch_id = batch_id
        self.query_id = query_id
        self.exit_code = result.exit_code
        tables = getattr(result, "tables", [])  # a transaction's: the error of the table that failed it
        error: dict[str, Any] = getattr(result, "error", None) or next((r.error for r in tables if r.error), {})
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


class _BatchSink:
    """What every wapflow foreachBatch function shares: one batch at a time under a lock Stream.stop takes, the
    lakehouse on the query's own session, the last results and the error that stopped the query."""

    def __init__(self, lh: Lakehouse, on_blocked: OnBlocked) -> None:
        if on_blocked not in _ON_BLOCKED:
            raise UsageError(
                f"on_blocked={on_blocked!r} is not one of {', '.join(_ON_BLOCKED)}",
                hint='"stop" stops the query at a blocked batch (it runs again on restart); "skip" goes on',
            )
        refuse_connect(lh)
        self.lh = lh
        self.on_blocked = on_blocked
        self.results: collections.deque[Any] = collections.deque(maxlen=100)
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
        raise NotImplementedError

    def ended(self, query_id: str) -> None:
        """The query ended without an error (a graceful stop, or availableNow done): nothing by default."""

    def _lakehouse(self, session: SparkSession) -> Lakehouse:
        """The lakehouse on the query's own session: Spark runs a query's batches on a clone of the session that
        started it, and a batch's temporary views and settings live there (a merge reads the batch from one)."""
        from wapflow.lakehouse.lakehouse import Lakehouse

        ident = int(session._jsparkSession.hashCode())
        if self._session_lh is None or self._session_lh[0] != ident:
            self._session_lh = (ident, Lakehouse(self.lh.config, spark=session, progress=self.lh.progress))
        return self._session_lh[1]

    def _outcome(self, res: RunResult | MultiRunResult, batch_id: int, query_id: str, what: str) -> None:
        """Go on after a published, held or (with on_blocked="skip") blocked run; else stop the query."""
        self.results.append(res)
        if res.status in ("published", "awaiting_review"):
            return
        if res.status == "blocked" and self.on_blocked == "skip":
            return
        self.stopped_by = _stopped(res, batch_id, query_id, what)
        raise self.stopped_by


@contextlib.contextmanager
def _snapshot_properties(session: SparkSession, props: dict[str, str]) -> Iterator[None]:
    """Snapshot summary properties for every Iceberg commit of `session` inside the block (the stream's own
    session: a clone Spark makes per query, no one else's)."""
    conf, confs = session.conf, snapshot_property_confs(props)
    for k, v in confs.items():
        conf.set(k, v)
    try:
        yield
    finally:
        for k in confs:
            conf.unset(k)


class StreamSink(_BatchSink):
    """The function `df.writeStream.foreachBatch` calls with each micro-batch: one WAP run of `table` per batch,
    or per `publish_every` batches (see the module's docstring). `results` holds the last 100 runs' RunResults;
    `stopped_by` the error that stopped the query, if the sink did."""

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
        publish_every: int = 1,
        staging: str | None = None,
    ) -> None:
        from wapflow.sql.identifiers import TableName

        super().__init__(lh, on_blocked)
        TableName.parse(table)  # a bad name now, not at the first batch
        if not isinstance(publish_every, int) or isinstance(publish_every, bool) or publish_every < 1:  # type: ignore[redundant-expr]
            raise UsageError(
                f"publish_every={publish_every!r} is not a whole number of batches (1 or more)",
                hint="publish_every=1 publishes each batch; publish_every=10 one run per 10 batches",
            )
        if publish_every > 1 and not staging:
            raise UsageError(
                f"publish_every={publish_every} needs a staging folder for the batches of a run not yet published",
                hint='give staging="<a folder Spark can write, e.g. beside the checkpoint>" (start_stream puts it '
                "in the checkpoint)",
            )
        self.table = table
        self.mode = mode
        self.key = key
        self.delete_when = delete_when
        self.order_by = order_by
        self.checks = tuple(checks)
        self.no_checks = no_checks
        self.publish_every = publish_every
        self.staging = staging.rstrip("/") if staging else None

    def _batch(self, batch_df: DataFrame, batch_id: int) -> None:
        session = batch_df.sparkSession
        query_id = query_id_of(session)
        if self.publish_every > 1:
            self._stage(batch_df, batch_id, query_id)
            return
        run_id = batch_run_id(query_id, batch_id)
        lh = self._lakehouse(session)
        self._check_table(lh, run_id, batch_id, query_id)
        res = self._write(lh, batch_df, run_id, {QUERY_ID_PROP: query_id, EPOCH_ID_PROP: str(batch_id)})
        lh.progress(f"stream batch {batch_id}: {res.status} ({res.message})")
        self._outcome(res, batch_id, query_id, self.table)

    def _check_table(self, lh: Lakehouse, run_id: str, batch_id: int, query_id: str) -> None:
        earlier = lh.store.get(run_id)
        if earlier is not None and earlier.table_name != self.table:
            raise UsageError(
                f"run {run_id} (batch {batch_id} of query {query_id}) wrote {earlier.table_name}, not {self.table}",
                hint="one streaming query (one checkpoint) writes one table: give each table a query of its own",
            )

    def _write(self, lh: Lakehouse, df: DataFrame, run_id: str, props: dict[str, str]) -> RunResult:
        from wapflow.api import write

        with _snapshot_properties(df.sparkSession, props):
            return write(
                lh,
                self.table,
                df,
                mode=self.mode,
                key=self.key,
                delete_when=self.delete_when,
                order_by=self.order_by,
                checks=self.checks,
                run_id=run_id,
                no_checks=self.no_checks,
            )

    # --- publish_every: several batches, one run -------------------------------------------------------------

    def _stage(self, batch_df: DataFrame, batch_id: int, query_id: str) -> None:
        """One batch of a run of `publish_every` batches: written (overwritten: the same rows when Spark runs
        the batch again) to its staging folder; the window's run published when it holds `publish_every`."""
        session = batch_df.sparkSession
        staged = _Staged(session, f"{self.staging}/{query_id.lower()}")
        self._finish_sealed(session, staged, query_id, schema=batch_df.schema)
        done = staged.done()
        if done is not None and done[0] <= batch_id <= done[1]:
            self.lh.progress(f"stream batch {batch_id}: already published (run {batch_run_id(query_id, done[0])})")
            return
        batch_df.write.mode("overwrite").parquet(staged.batch_path(batch_id))
        batches = staged.batches()
        first = batch_run_id(query_id, min(batches))
        if len(batches) < self.publish_every:
            self.lh.progress(f"stream batch {batch_id}: staged ({len(batches)} of {self.publish_every} for {first})")
            return
        staged.seal(min(batches), max(batches))
        self._finish_sealed(session, staged, query_id, schema=batch_df.schema)

    def ended(self, query_id: str) -> None:
        """The query ended without an error: the batches staged for a run not yet full are published now, as one
        run (a later start begins a new run at its first batch)."""
        if self.publish_every == 1 or not query_id:
            return
        session = self.lh.spark
        staged = _Staged(session, f"{self.staging}/{query_id.lower()}")
        self._finish_sealed(session, staged, query_id)
        batches = staged.batches()
        if batches:
            staged.seal(min(batches), max(batches))
            self._finish_sealed(session, staged, query_id)

    def _finish_sealed(self, session: SparkSession, staged: _Staged, query_id: str, schema: Any = None) -> None:
        """The sealed window's run (its batches fixed by the seal): written, audited and published by its run id
        (at most once), then marked done and its staged batches removed. A blocked or failed run stops here
        (raised: the query stops, and the restart finishes the same window)."""
        window = staged.sealed()
        if window is None:
            return
        first, last = window
        run_id = batch_run_id(query_id, first)
        done = staged.done()
        if done != window:
            lh = self._lakehouse(session)
            self._check_table(lh, run_id, last, query_id)
            paths = [staged.batch_path(b) for b in range(first, last + 1) if staged.has(b)]
            reader = session.read if schema is None else session.read.schema(schema)
            df = reader.parquet(*paths)
            props = {QUERY_ID_PROP: query_id, EPOCH_ID_PROP: str(last), BATCHES_PROP: f"{first}-{last}"}
            res = self._write(lh, df, run_id, props)
            lh.progress(f"stream batches {first}-{last}: {res.status} ({res.message})")
            if res.status in ("published", "awaiting_review") or (
                res.status == "blocked" and self.on_blocked == "skip"
            ):
                staged.mark_done(first, last)
            self._outcome(res, last, query_id, self.table)
        staged.clear(first, last)


class _Staged:
    """The staging folder of one query (Hadoop's FileSystem, so any store Spark writes): `batch=N/` holds a
    batch's rows, `window=A-B` marks the batches A..B sealed into one run, `done=A-B` the last run done."""

    def __init__(self, session: SparkSession, root: str) -> None:
        jvm = session.sparkContext._jvm
        assert jvm is not None
        self._path = jvm.org.apache.hadoop.fs.Path
        self.root = root
        self._fs = self._path(root).getFileSystem(session.sparkContext._jsc.hadoopConfiguration())

    def _names(self, prefix: str) -> list[str]:
        root = self._path(self.root)
        if not self._fs.exists(root):
            return []
        names = (str(st.getPath().getName()) for st in self._fs.listStatus(root))
        return [n[len(prefix) :] for n in names if n.startswith(prefix)]

    def batch_path(self, batch_id: int) -> str:
        return f"{self.root}/batch={batch_id}"

    def has(self, batch_id: int) -> bool:
        return bool(self._fs.exists(self._path(f"{self.batch_path(batch_id)}/_SUCCESS")))

    def batches(self) -> list[int]:
        """The batches staged whole (Spark's _SUCCESS written)."""
        return sorted(b for b in (int(n) for n in self._names("batch=") if n.isdigit()) if self.has(b))

    @staticmethod
    def _window(text: str) -> tuple[int, int]:
        a, b = text.split("-")
        return int(a), int(b)

    def sealed(self) -> tuple[int, int] | None:
        windows = sorted(self._window(n) for n in self._names("window="))
        return windows[0] if windows else None

    def done(self) -> tuple[int, int] | None:
        windows = sorted(self._window(n) for n in self._names("done="))
        return windows[-1] if windows else None

    def seal(self, first: int, last: int) -> None:
        self._fs.mkdirs(self._path(f"{self.root}/window={first}-{last}"))

    def mark_done(self, first: int, last: int) -> None:
        self._fs.mkdirs(self._path(f"{self.root}/done={first}-{last}"))
        for a, b in (self._window(n) for n in self._names("done=")):
            if (a, b) != (first, last):
                self._fs.delete(self._path(f"{self.root}/done={a}-{b}"), True)

    def clear(self, first: int, last: int) -> None:
        """The sealed window's staged batches, then its seal (last: a crash in between finishes it again)."""
        for b in range(last, first - 1, -1):
            self._fs.delete(self._path(self.batch_path(b)), True)
        self._fs.delete(self._path(f"{self.root}/window={first}-{last}"), True)


class TransactionSink(_BatchSink):
    """`foreach_batch(lh, fn)`: each micro-batch one `wapflow.transaction`, `fn(tx, batch_df, batch_id)` writing
    any tables through `tx.write`; all published in one commit or none, exactly once by the batch's run id."""

    def __init__(
        self,
        lh: Lakehouse,
        fn: Callable[[Transaction, DataFrame, int], object],
        *,
        no_checks: bool = False,
        on_blocked: OnBlocked = "stop",
    ) -> None:
        if not callable(fn):
            raise UsageError(
                f"foreach_batch needs a function fn(tx, batch_df, batch_id), not {type(fn).__name__}",
                hint="def each(tx, df, batch_id): tx.write('silver.a', df); ...",
            )
        super().__init__(lh, on_blocked)
        self.fn = fn
        self.no_checks = no_checks

    def _batch(self, batch_df: DataFrame, batch_id: int) -> None:
        from wapflow.api import transaction

        session = batch_df.sparkSession
        query_id = query_id_of(session)
        run_id = batch_run_id(query_id, batch_id)
        lh = self._lakehouse(session)
        tx: Transaction | None = None
        try:
            with (
                _snapshot_properties(session, {QUERY_ID_PROP: query_id, EPOCH_ID_PROP: str(batch_id)}),
                transaction(lh, run_id=run_id, no_checks=self.no_checks) as tx,
            ):
                self.fn(tx, batch_df, batch_id)
        except Exception as e:
            if tx is None or tx.result is None:
                raise
            res = tx.result
            lh.progress(f"stream batch {batch_id}: {res.status} ({res.message})")
            self.results.append(res)
            self.stopped_by = _stopped(res, batch_id, query_id, "its tables")
            raise self.stopped_by from e
        out = tx.result
        assert out is not None
        lh.progress(f"stream batch {batch_id}: {out.status} ({out.message})")
        self._outcome(out, batch_id, query_id, ", ".join(r.table for r in out.tables) or "no table")


def refuse_connect(lh: Lakehouse, spark: Any = None) -> None:
    """Streams need a classic session: Spark Connect runs a foreachBatch function in a Python process of the
    server's, where neither this lakehouse nor the query's id can be had. One clear error (exit 2) up front."""
    from wapflow.spark.kind import is_connect

    session = spark if spark is not None else getattr(lh, "_spark", None)
    if lh.connect_client or (session is not None and is_connect(session)):
        raise UsageError(
            "wapflow streams need a classic Spark session, and this lakehouse uses Spark Connect (its "
            "foreachBatch function runs in a separate Python process on the server, out of wapflow's reach)",
            hint="run the streaming query on a classic session (master local[*], spark:// or yarn), or write "
            "each batch yourself with wapflow.write from a job that is not a stream",
        )


def _stopped(res: RunResult | MultiRunResult, batch_id: int, query_id: str, table: str) -> StreamStopped:
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
    if res.exit_code == EXIT_STOPPED:
        return StreamStopped(
            f"{where} was stopped while its run was under way (the query's stop() interrupted it); main is unchanged",
            result=res,
            batch_id=batch_id,
            query_id=query_id,
            hint=f"a restart from the checkpoint runs batch {batch_id} again, under the same run id "
            f"({res.run_id}); Stream.stop() waits for the batch in flight instead",
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
    publish_every: int = 1,
    staging: str | None = None,
) -> StreamSink:
    """A sink for `df.writeStream.foreachBatch(...)`: each micro-batch written to `table` by one WAP run (the
    table's checks from wap.toml plus `checks`; `mode` and its keys as for wapflow.write), exactly once across
    restarts from the query's checkpoint. A blocked batch stops the query (`on_blocked="stop"`) or is left on its
    branch (`"skip"`). `publish_every=N`: one run per N batches, each batch staged in `staging` until then (call
    `sink.ended(str(query.id))` after a graceful stop to publish a run not yet full; start_stream does)."""
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
        publish_every=publish_every,
        staging=staging,
    )


def foreach_batch(
    lh: Lakehouse,
    fn: Callable[[Transaction, DataFrame, int], object],
    *,
    no_checks: bool = False,
    on_blocked: OnBlocked = "stop",
) -> TransactionSink:
    """A sink for `df.writeStream.foreachBatch(...)` whose micro-batches write several tables: each batch is one
    `wapflow.transaction`, and `fn(tx, batch_df, batch_id)` writes through `tx.write(table, df)` (and reads
    through `tx.read`); every table written is audited, then all are published in one commit or none. The run
    id is the batch's (`s_<query id>_<batch id>`): a batch Spark runs again publishes at most once. `fn` must
    write the same tables in the same order whenever it runs a batch."""
    return TransactionSink(lh, fn, no_checks=no_checks, on_blocked=on_blocked)


@dataclass
class Stream:
    """A running query and its sink (wapflow.start_stream). `await_termination` raises the sink's
    StreamStopped (a WapError with the batch's exit code) in place of Spark's wrapped error when the sink
    stopped the query."""

    query: StreamingQuery
    sink: _BatchSink

    @property
    def results(self) -> list[Any]:
        return list(self.sink.results)

    def await_termination(self, timeout: int | None = None) -> bool | None:
        """Wait for the query to end (or `timeout` seconds). A query that ended without an error (availableNow
        done) publishes the batches a `publish_every` run had staged."""
        try:
            ended = self.query.awaitTermination(timeout) if timeout is not None else self.query.awaitTermination()
        except Exception as e:
            if self.sink.stopped_by is not None:
                raise self.sink.stopped_by from e
            raise
        if not self.query.isActive:
            self.sink.ended(str(self.query.id))
        return ended

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
        started its run yet is left to the next start, under the same run id. Batches a `publish_every` run had
        staged are then published, as one run."""
        self.sink._stopping = True
        try:
            with self.sink._lock:
                self.query.stop()
        finally:
            self.sink._stopping = False
        if self.query.exception() is None:
            self.sink.ended(str(self.query.id))


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
    (what is there now, then stop) or None (each batch as soon as the last ends). With `publish_every`, batches
    are staged in `<checkpoint>/wapflow-staged` unless `staging` names a folder."""
    refuse_connect(lh, df.sparkSession)
    if not df.isStreaming:
        raise UsageError(
            "start_stream needs a streaming DataFrame (spark.readStream...)",
            hint="for a DataFrame that is not a stream, use wapflow.write",
        )
    if sink.get("publish_every", 1) != 1 and not sink.get("staging"):
        sink["staging"] = f"{str(checkpoint).rstrip('/')}/wapflow-staged"
    fn = stream_to(lh, table, **sink)
    return _start(df, fn, checkpoint=checkpoint, trigger=trigger, query_name=query_name)


def start_stream_tables(
    lh: Lakehouse,
    df: DataFrame,
    fn: Callable[[Transaction, DataFrame, int], object],
    *,
    checkpoint: str,
    trigger: str | None = None,
    query_name: str | None = None,
    no_checks: bool = False,
    on_blocked: OnBlocked = "stop",
) -> Stream:
    """start_stream for foreach_batch: each micro-batch one transaction over the tables `fn` writes."""
    refuse_connect(lh, df.sparkSession)
    if not df.isStreaming:
        raise UsageError(
            "start_stream_tables needs a streaming DataFrame (spark.readStream...)",
            hint="for a DataFrame that is not a stream, use wapflow.transaction",
        )
    sink = foreach_batch(lh, fn, no_checks=no_checks, on_blocked=on_blocked)
    return _start(df, sink, checkpoint=checkpoint, trigger=trigger, query_name=query_name)


def _start(df: DataFrame, fn: _BatchSink, *, checkpoint: str, trigger: str | None, query_name: str | None) -> Stream:
    writer = df.writeStream.foreachBatch(fn).option("checkpointLocation", str(checkpoint))
    if trigger == "available_now":
        writer = writer.trigger(availableNow=True)
    elif trigger is not None:
        writer = writer.trigger(processingTime=trigger)
    if query_name is not None:
        writer = writer.queryName(query_name)
    return Stream(writer.start(), fn)
