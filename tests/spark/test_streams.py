"""Streams: `wapflow.stream_to` / `wapflow.start_stream`, each micro-batch one WAP run, on Spark's file and rate
sources, with the rows on main read back by PyIceberg's own client of the embedded catalog."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wapflow
from support.embedded_reader import reader
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.streams import batch_run_id

pytestmark = pytest.mark.spark

SCHEMA = "id long, fare double"
CHECKED = {"checks": [{"check": "not_null", "column": "fare"}, {"check": "unique", "columns": ["id"]}]}


def main_rows(lh: Lakehouse, table: str) -> list[dict[str, Any]]:
    ns, name = table.rsplit(".", 1)
    cat = reader(lh)
    if not cat.table_exists((ns, name)):
        return []
    tbl = cat.load_table((ns, name))
    return [] if tbl.current_snapshot() is None else tbl.scan().to_arrow().to_pylist()


def ids_on_main(lh: Lakehouse, table: str = "s.trips") -> list[int]:
    return sorted(r["id"] for r in main_rows(lh, table))


def drop(folder: Path, name: str, ids: range | list[int], *, null_fares: int = 0) -> None:
    """A parquet file landed atomically (written aside, then renamed in), as the file source needs."""
    ids = list(ids)
    fares = [None if i < null_fares else float(n) for i, n in enumerate(ids)]
    tmp = folder.parent / f".{name}"
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "fare": pa.array(fares, pa.float64())}), tmp)
    # One second apart, in the order landed: the file source takes files oldest first, and two files written in
    # the same millisecond once came in the other order (the blocked file first).
    when = _EPOCH + next(_LANDED)
    os.utime(tmp, (when, when))
    tmp.rename(folder / name)


_EPOCH = time.time() - 3600
_LANDED = itertools.count()


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    return d


def files(spark: Any, folder: Path) -> Any:
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(folder))


def test_each_file_batch_is_one_published_run_and_a_restart_goes_on_from_the_checkpoint(lakehouse_factory, landing):
    lh = lakehouse_factory({"s.trips": CHECKED})
    drop(landing, "a.parquet", range(1, 11))
    drop(landing, "b.parquet", range(11, 16))
    chk = str(landing.parent / "chk")
    st = wapflow.start_stream(lh, files(lh.spark, landing), "s.trips", checkpoint=chk, trigger="available_now")
    st.await_termination()
    qid = str(st.query.id)
    assert [(r.run_id, r.status) for r in st.results] == [
        (batch_run_id(qid, 0), "published"),
        (batch_run_id(qid, 1), "published"),
    ]
    assert ids_on_main(lh) == list(range(1, 16))
    # One run per batch in the run store, published, each batch's snapshot naming its query and batch.
    runs = {r.run_id: r for r in lh.store.list(table="s.trips")}
    assert {rid: r.status for rid, r in runs.items()} == {r.run_id: "published" for r in st.results}
    tbl = reader(lh).load_table(("s", "trips"))
    summary = tbl.current_snapshot().summary
    assert summary["wapflow.run-id"] == batch_run_id(qid, 1)
    assert summary["spark.sql.streaming.queryId"] == qid and summary["spark.sql.streaming.epochId"] == "1"

    # The same checkpoint later: the same query id, the next batch id, only the new file.
    drop(landing, "c.parquet", range(16, 19))
    again = wapflow.start_stream(lh, files(lh.spark, landing), "s.trips", checkpoint=chk, trigger="available_now")
    again.await_termination()
    assert str(again.query.id) == qid
    assert [r.run_id for r in again.results] == [batch_run_id(qid, 2)]
    assert ids_on_main(lh) == list(range(1, 19))


def test_a_batch_run_again_after_its_publish_is_not_published_twice(lakehouse_factory, landing):
    """The query died after the batch's publish and before Spark's commit log said so: on restart Spark runs the
    batch again, under the same run id, which is already published."""
    lh = lakehouse_factory({"s.trips": CHECKED})
    drop(landing, "a.parquet", range(1, 6))
    chk = landing.parent / "chk"
    st = wapflow.start_stream(lh, files(lh.spark, landing), "s.trips", checkpoint=str(chk), trigger="available_now")
    st.await_termination()
    (first,) = st.results
    for f in ("0", ".0.crc"):  # what a kill between the publish and the commit log's entry leaves
        (chk / "commits" / f).unlink(missing_ok=True)
    again = wapflow.start_stream(lh, files(lh.spark, landing), "s.trips", checkpoint=str(chk), trigger="available_now")
    again.await_termination()
    (replayed,) = again.results
    assert replayed.run_id == first.run_id and replayed.status == "published"
    assert "already published" in replayed.message
    assert ids_on_main(lh) == [1, 2, 3, 4, 5]
    snaps = reader(lh).load_table(("s", "trips")).snapshots()
    assert [s.summary.get("wapflow.run-id") for s in snaps].count(first.run_id) == 1


def test_a_blocked_batch_stops_the_query_and_blocks_again_on_restart_until_skipped(lakehouse_factory, landing):
    lh = lakehouse_factory({"s.trips": CHECKED})
    drop(landing, "a.parquet", range(1, 6))
    drop(landing, "b.parquet", range(6, 11), null_fares=2)
    chk = str(landing.parent / "chk")

    def start(**kw: Any) -> Any:
        return wapflow.start_stream(
            lh, files(lh.spark, landing), "s.trips", checkpoint=chk, trigger="available_now", **kw
        )

    st = start()
    with pytest.raises(wapflow.StreamStopped) as e:
        st.await_termination()
    qid = str(st.query.id)
    blocked = batch_run_id(qid, 1)
    assert e.value.exit_code == 1 and e.value.batch_id == 1 and e.value.result.status == "blocked"
    assert "batch 1 of streaming query" in str(e.value) and "not_null(fare)" in str(e.value)
    assert f"wap report {blocked}" in str(e.value) and 'on_blocked="skip"' in str(e.value)
    assert not st.query.isActive
    assert ids_on_main(lh) == [1, 2, 3, 4, 5]  # main unchanged by the blocked batch
    # Its rows are kept on the run's branch, for inspection.
    assert wapflow.read(lh, "s.trips", branch=f"wap_{blocked}").count() == 10
    assert lh.store.get(blocked).status == "blocked"

    # Restarted as it is: the same batch again, blocked again.
    st2 = start()
    with pytest.raises(wapflow.StreamStopped) as e2:
        st2.await_termination()
    assert e2.value.result.run_id == blocked
    assert ids_on_main(lh) == [1, 2, 3, 4, 5]

    # Skipped once: the batch stays off main (blocked, on its branch), the query goes on to the next file.
    drop(landing, "c.parquet", range(11, 14))
    st3 = start(on_blocked="skip")
    st3.await_termination()
    assert [(r.run_id, r.status) for r in st3.results] == [(blocked, "blocked"), (batch_run_id(qid, 2), "published")]
    assert ids_on_main(lh) == [1, 2, 3, 4, 5, 11, 12, 13]


def test_a_quarantining_table_publishes_the_batch_and_diverts_the_failing_rows(lakehouse_factory, landing):
    lh = lakehouse_factory({"s.trips": {**CHECKED, "on_row_failure": "quarantine"}})
    drop(landing, "a.parquet", range(1, 6), null_fares=2)
    st = wapflow.start_stream(
        lh, files(lh.spark, landing), "s.trips", checkpoint=str(landing.parent / "chk"), trigger="available_now"
    )
    st.await_termination()
    (res,) = st.results
    assert res.status == "published" and res.quarantined_rows == 2, res.message
    assert ids_on_main(lh) == [3, 4, 5]
    assert sorted(r["id"] for r in main_rows(lh, "s.trips__quarantine")) == [1, 2]


def test_the_rate_source_at_a_processing_time_trigger(lakehouse_factory, tmp_path):
    lh = lakehouse_factory({"s.ticks": {"checks": [{"check": "unique", "columns": ["value"]}]}})
    src = lh.spark.readStream.format("rate").option("rowsPerSecond", 20).load()
    st = wapflow.start_stream(lh, src, "s.ticks", checkpoint=str(tmp_path / "chk"), trigger="1 second")
    try:
        deadline = 60
        while len(st.results) < 3 and deadline > 0:
            st.query.awaitTermination(1)
            deadline -= 1
    finally:
        st.stop()
    results = st.results
    assert len(results) >= 3 and {r.status for r in results} == {"published"}, [r.message for r in results]
    values = sorted(r["value"] for r in main_rows(lh, "s.ticks"))
    assert len(values) == sum(r.rows_written or 0 for r in results) and len(values) == len(set(values))
    assert values == list(range(len(values)))  # the rate source counts from 0: no gap, no duplicate
    # Stopped between runs: no run interrupted (none recorded failed), each recorded one a published batch.
    assert {r.run_id: r.status for r in lh.store.list(table="s.ticks")} == {r.run_id: "published" for r in results}


def test_refusals_name_what_is_wrong(lakehouse_factory, spark, tmp_path):
    lh = lakehouse_factory({"s.trips": CHECKED})
    with pytest.raises(wapflow.UsageError, match="on_blocked='later'"):
        wapflow.stream_to(lh, "s.trips", on_blocked="later")  # type: ignore[arg-type]
    with pytest.raises(wapflow.ConfigError, match="needs a namespace"):
        wapflow.stream_to(lh, "trips")
    with pytest.raises(wapflow.UsageError, match="needs a streaming DataFrame"):
        wapflow.start_stream(lh, spark.range(3), "s.trips", checkpoint=str(tmp_path / "chk"))
    sink = wapflow.stream_to(lh, "s.trips")
    with pytest.raises(wapflow.UsageError, match="outside a streaming query's batch"):
        sink(spark.range(3), 0)
    assert lh.store.list(table="s.trips") == []  # no run was started


def test_the_stream_example_publishes_what_landed_and_stops_at_a_blocked_batch(spark, tmp_path, capsys):
    """examples/stream.py --once, as a user runs it: a clean file published; a dirty one stops it with exit 1
    (main unchanged); the same command again is blocked again at the same batch."""
    import runpy
    import sys

    from support.cli_harness import Reader, write_config
    from support.data import trips_file

    catalog = f"stream_ex_{os.getpid()}"
    cfg = write_config(
        tmp_path,
        '[tables."nyc.trips"]\nchecks = [{ check = "not_null", column = "passenger_count" }]\n',
        catalog=catalog,
    )
    landing, chk = tmp_path / "landing", tmp_path / "chk"
    trips_file(landing, "a.parquet", 30)
    example = str(Path(__file__).resolve().parents[2] / "examples" / "stream.py")

    def run() -> int:
        old = sys.argv
        sys.argv = [example, str(cfg), str(landing), str(chk), "--once"]
        try:
            runpy.run_path(example, run_name="__main__")
        except SystemExit as e:
            return int(e.code or 0)
        finally:
            sys.argv = old
        return 0

    assert run() == 0
    assert capsys.readouterr().out.startswith("published s_")
    reader = Reader(tmp_path, catalog)
    assert len(reader.rows("nyc.trips")) == 30
    trips_file(landing, "b.parquet", 30, null_rate=0.2, start_id=100)
    assert run() == 1
    assert "was blocked by its checks" in capsys.readouterr().err
    assert run() == 1  # the checkpoint did not pass the batch
    assert len(reader.rows("nyc.trips")) == 30


def test_a_stop_during_a_batch_waits_for_its_run_to_end(lakehouse_factory, tmp_path, monkeypatch):
    """Stream.stop while a batch's run is under way: the run ends published (a stop in the middle would interrupt
    its Spark jobs and record it failed), and no later batch starts a run."""
    import threading
    import time

    import wapflow.api

    lh = lakehouse_factory({"s.ticks": {"checks": [{"check": "unique", "columns": ["value"]}]}})
    entered, real_write = threading.Event(), wapflow.api.write

    def slow_write(*args: Any, **kw: Any) -> Any:  # the real write, started a moment after the stop is asked
        entered.set()
        time.sleep(1.0)
        return real_write(*args, **kw)

    monkeypatch.setattr(wapflow.api, "write", slow_write)
    src = lh.spark.readStream.format("rate").option("rowsPerSecond", 20).load()
    st = wapflow.start_stream(lh, src, "s.ticks", checkpoint=str(tmp_path / "chk"), trigger="1 second")
    assert entered.wait(60)
    st.stop()
    assert not st.query.isActive
    runs = {r.run_id: r.status for r in lh.store.list(table="s.ticks")}
    assert runs and set(runs.values()) == {"published"}, runs
    assert len(main_rows(lh, "s.ticks")) == sum(r.rows_written or 0 for r in st.results)


def test_a_users_query_stop_during_a_batch_is_a_clean_stop_and_the_batch_runs_again(
    lakehouse_factory, tmp_path, monkeypatch
):
    """The user's own `query.stop()` (not Stream.stop) while a batch's run is under way: Spark interrupts the
    query's thread, and the run's next Spark call raises Java's InterruptedException. That is a stop, not a bug
    of wapflow: the run is recorded failed with a stop's message and exit code (130, as a SIGINT), main is
    unchanged, and the restarted query runs the batch again under the same run id and publishes it."""
    import threading

    import wapflow.api
    from wapflow.errors import EXIT_STOPPED

    lh = lakehouse_factory({"s.ticks": {"checks": [{"check": "unique", "columns": ["value"]}]}})
    entered, stopped, real_write = threading.Event(), threading.Event(), wapflow.api.write

    def write_after_the_stop(*args: Any, **kw: Any) -> Any:  # the real write, once query.stop() interrupted it
        entered.set()
        stopped.wait(60)
        return real_write(*args, **kw)

    monkeypatch.setattr(wapflow.api, "write", write_after_the_stop)
    chk = str(tmp_path / "chk")
    src = lh.spark.readStream.format("rate").option("rowsPerSecond", 20).load()
    st = wapflow.start_stream(lh, src, "s.ticks", checkpoint=chk, trigger="1 second")
    assert entered.wait(60)
    stopper = threading.Thread(target=st.query.stop)
    stopper.start()
    time.sleep(1.0)  # query.stop() has interrupted the query's thread by now, and waits for the batch to end
    stopped.set()
    stopper.join(120)
    assert not stopper.is_alive() and not st.query.isActive
    (res,) = st.results
    assert res.status == "failed" and res.exit_code == EXIT_STOPPED, res.message
    assert "this is a bug" not in res.message and "stopped" in res.message, res.message
    assert res.error is not None and res.error["kind"] != "bug", res.error
    assert lh.store.get(res.run_id).status == "failed"
    assert main_rows(lh, "s.ticks") == []

    # Restarted from the checkpoint: the interrupted batch again, under its run id, published this time.
    monkeypatch.setattr(wapflow.api, "write", real_write)
    again = wapflow.start_stream(lh, src, "s.ticks", checkpoint=chk, trigger="1 second")
    try:
        # Until rows are on main: the rate source's first batch may hold none (the interrupted one, say).
        deadline = time.monotonic() + 60
        while (not again.results or not main_rows(lh, "s.ticks")) and time.monotonic() < deadline:
            again.query.awaitTermination(1)
    finally:
        again.stop()
    assert again.results[0].run_id == res.run_id and again.results[0].status == "published"
    values = sorted(r["value"] for r in main_rows(lh, "s.ticks"))
    assert values == list(range(len(values))) and values


def _foreach_batch_query(lh: Lakehouse, landing: Path, chk: Path, sink: Any) -> Any:
    """A query the user builds: the file source into `sink`, what has landed, then the query ends by itself
    (no graceful end handed to the sink: a kill, as far as a run not yet full is concerned)."""
    q = (
        files(lh.spark, landing)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    return q


def test_publish_every_three_batches_is_one_run_exactly_once_across_a_restart_mid_run(lakehouse_factory, landing):
    lh = lakehouse_factory({"s.trips": CHECKED})
    chk, staging = landing.parent / "chk", str(landing.parent / "staged")
    landed: list[int] = []

    def land(i: int) -> None:
        drop(landing, f"f{i}.parquet", range(i * 10, i * 10 + 5))
        landed.extend(range(i * 10, i * 10 + 5))

    def query() -> tuple[str, Any]:
        sink = wapflow.stream_to(lh, "s.trips", publish_every=3, staging=staging)
        return str(_foreach_batch_query(lh, landing, chk, sink).id), sink

    for i in range(4):
        land(i)
    qid, sink = query()  # batches 0-2: one run; batch 3 staged, and the query ends mid-run
    assert [(r.run_id, r.status) for r in sink.results] == [(batch_run_id(qid, 0), "published")]
    assert ids_on_main(lh) == landed[:15]
    summary = reader(lh).load_table(("s", "trips")).current_snapshot().summary
    assert summary["wapflow.run-id"] == batch_run_id(qid, 0)
    assert summary["spark.sql.streaming.epochId"] == "2" and summary["wapflow.stream.batches"] == "0-2"

    # Restarted mid-run: batch 3 (staged before) and batches 4 and 5 are the next run.
    land(4)
    land(5)
    again, sink2 = query()
    assert again == qid
    assert [(r.run_id, r.status) for r in sink2.results] == [(batch_run_id(qid, 3), "published")]
    assert ids_on_main(lh) == sorted(landed)

    # Batch 5 run again after its run's publish (killed before Spark's commit log said so): not written twice.
    for f in ("5", ".5.crc"):
        (chk / "commits" / f).unlink(missing_ok=True)
    _, sink3 = query()
    assert list(sink3.results) == []
    assert ids_on_main(lh) == sorted(landed)

    # A query that ends without an error through start_stream publishes the run not yet full.
    land(6)
    st = wapflow.start_stream(
        lh,
        files(lh.spark, landing),
        "s.trips",
        checkpoint=str(chk),
        trigger="available_now",
        publish_every=3,
        staging=staging,
    )
    st.await_termination()
    assert [(r.run_id, r.status) for r in st.results] == [(batch_run_id(qid, 6), "published")]
    ids = ids_on_main(lh)
    assert ids == sorted(landed) and len(ids) == len(set(ids)) == 35
    runs = {r.run_id: r.status for r in lh.store.list(table="s.trips")}
    assert runs == {batch_run_id(qid, b): "published" for b in (0, 3, 6)}
    snaps = reader(lh).load_table(("s", "trips")).snapshots()
    assert sorted(s.summary.get("wapflow.stream.batches", "") for s in snaps if s.summary.get("wapflow.run-id")) == [
        "0-2",
        "3-5",
        "6-6",
    ]


def test_foreach_batch_publishes_two_tables_together_once_per_batch(lakehouse_factory, landing):
    from pyspark.sql import functions as F

    lh = lakehouse_factory({"s.trips": CHECKED, "s.totals": {"checks": [{"check": "not_null", "column": "total"}]}})
    chk = landing.parent / "chk"

    def each(tx: Any, df: Any, batch_id: int) -> None:
        tx.write("s.trips", df)
        tx.write("s.totals", df.agg(F.sum("fare").alias("total")).withColumn("batch", F.lit(batch_id)))

    def query() -> tuple[str, Any]:
        sink = wapflow.streams.foreach_batch(lh, each)
        return str(_foreach_batch_query(lh, landing, chk, sink).id), sink

    drop(landing, "a.parquet", range(1, 6))
    qid, sink = query()
    (res,) = sink.results
    assert res.run_id == batch_run_id(qid, 0) and res.status == "published", res.message
    assert ids_on_main(lh) == [1, 2, 3, 4, 5]
    assert [(r["batch"], r["total"]) for r in main_rows(lh, "s.totals")] == [(0, 15.0)]
    for t in ("trips", "totals"):
        summary = reader(lh).load_table(("s", t)).current_snapshot().summary
        assert summary["spark.sql.streaming.queryId"] == qid and summary["spark.sql.streaming.epochId"] == "0"

    # The batch run again after its publish: the same transaction, already published, nothing written twice.
    for f in ("0", ".0.crc"):
        (chk / "commits" / f).unlink(missing_ok=True)
    _, sink2 = query()
    (replayed,) = sink2.results
    assert replayed.run_id == res.run_id and replayed.status == "published", replayed.message
    assert ids_on_main(lh) == [1, 2, 3, 4, 5] and len(main_rows(lh, "s.totals")) == 1

    # A batch one table of which fails its checks: neither table published, the query stopped (exit 1).
    drop(landing, "b.parquet", range(6, 11), null_fares=2)
    st = wapflow.streams.start_stream_tables(
        lh, files(lh.spark, landing), each, checkpoint=str(chk), trigger="available_now"
    )
    with pytest.raises(wapflow.StreamStopped) as e:
        st.await_termination()
    assert e.value.exit_code == 1 and e.value.batch_id == 1 and e.value.result.status == "blocked"
    assert "s.trips, s.totals" in str(e.value)
    assert ids_on_main(lh) == [1, 2, 3, 4, 5] and len(main_rows(lh, "s.totals")) == 1


def test_streams_refuse_spark_connect_with_one_clear_error(tmp_path):
    lh = wapflow.connect(warehouse=str(tmp_path / "wh"), master="sc://127.0.0.1:1", tables={"s.trips": CHECKED})
    makers = (
        lambda: wapflow.stream_to(lh, "s.trips"),
        lambda: wapflow.streams.foreach_batch(lh, lambda tx, df, b: None),
    )
    for make in makers:
        with pytest.raises(wapflow.UsageError) as e:
            make()
        assert e.value.exit_code == 2
        assert "need a classic Spark session" in str(e.value) and "Spark Connect" in str(e.value)
