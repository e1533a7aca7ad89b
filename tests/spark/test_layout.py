"""partition_by / sort_by in wap.toml on real Spark and Iceberg: tables created with the layout, existing tables
evolved to it, a layout that does not fit the batch refused before anything is written. main, its spec, sort
order and data files are read back by PyIceberg, the independent reader."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from support.cli_harness import Reader
from support.data import write_parquet
from wapflow.config import TableConfig
from wapflow.pipeline import run_wap
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
T = TableName.parse("ev.events")
START = datetime(2026, 1, 1)


def events(
    n: int, *, days: int = 30, start_id: int = 0, region: bool = True, extra: dict[str, Any] | None = None
) -> pa.Table:
    """`n` events spread evenly over `days` days (row i on day i % days)."""
    ids = list(range(start_id, start_id + n))
    cols: dict[str, Any] = {
        "id": pa.array(ids, pa.int64()),
        "ts": pa.array([START + timedelta(days=i % days, minutes=i % 997) for i in ids], pa.timestamp("us")),
        "amount": pa.array([float(i % 100) if i % 13 else None for i in ids], pa.float64()),
    }
    if region:
        cols["region"] = pa.array([f"r{i % 3}" for i in ids])
    cols.update(extra or {})
    return pa.table(cols)


def files_of(landing: Path, name: str, parts: int, n: int, start_id: int = 0, **kw: Any) -> list[str]:
    """`parts` files of n rows each, every one spanning all the days (so a write without a distribution
    would write one file per task per day)."""
    return [
        str(write_parquet(landing / f"{name}-{p}.parquet", events(n, start_id=start_id + p * n, **kw)))
        for p in range(parts)
    ]


def reader(lh: Any, tmp_path: Path) -> Reader:
    return Reader(tmp_path, lh.catalog)


def configure(lh: Any, **table: Any) -> None:
    """wap.toml's section of ev.events as it is now (each run reads it afresh); its checks = [] unless given:
    these tests are about the layout."""
    lh.config.tables[T.dotted] = TableConfig.model_validate({"checks": [], **table})


def spec_of(tbl: Any) -> list[tuple[str, str]]:
    schema = tbl.schema()
    return [(str(f.transform), schema.find_field(f.source_id).name) for f in tbl.spec().fields]


def sort_of(tbl: Any) -> list[tuple[str, str, str]]:
    schema = tbl.schema()
    return [
        (schema.find_field(f.source_id).name, str(f.direction.name), str(f.null_order.name))
        for f in tbl.sort_order().fields
    ]


def data_files(tbl: Any) -> list[dict[str, Any]]:
    return tbl.inspect.files().select(["file_path", "spec_id", "record_count"]).to_pylist()


def test_new_table_is_partitioned_and_writes_one_file_per_partition(lakehouse_factory, landing, tmp_path):
    progress: list[str] = []
    lh = lakehouse_factory({T.dotted: {"partition_by": ["days(ts)", "bucket(4, id)"], "checks": []}})
    lh.progress = progress.append
    res = run_wap(lh, T.dotted, files_of(landing, "a", 4, 300))
    assert res.status == "published", res.message
    tbl = reader(lh, tmp_path).cat.load_table(T.dotted)
    assert spec_of(tbl) == [("day", "ts"), ("bucket[4]", "id")]
    assert tbl.properties["write.distribution-mode"] == "hash"
    assert any("creating table ev.events (partitioned by day(ts), bucket(4, id))" in p for p in progress)
    rows = tbl.scan().to_arrow()
    assert rows.num_rows == 1200 and sorted(rows["id"].to_pylist()) == list(range(1200))
    # 30 days x 4 buckets = 120 partitions; 4 input files over 2 tasks would give up to 4x that without the
    # hash distribution. Every file holds one partition.
    files = data_files(tbl)
    partitions = {(r["day"], r["bucket"]) for r in _partitions(tbl)}
    assert len(partitions) == 120
    assert len(files) <= 120 * 1.25, len(files)
    # Rows of one day are all in files of that day (PyIceberg prunes by the partition).
    day3 = tbl.scan(row_filter="ts >= '2026-01-04T00:00:00' and ts < '2026-01-05T00:00:00'").to_arrow()
    assert day3.num_rows == 40 and {i % 30 for i in day3["id"].to_pylist()} == {3}


def test_identity_only_partitioning_is_kept_run_after_run(lakehouse_factory, landing, tmp_path):
    """Spark describes identity-only partitioning in another form than transforms ("# Partition Information"):
    a second run reads it as the declared layout and changes nothing (it once added the field again)."""
    lh = lakehouse_factory({T.dotted: {"partition_by": ["region"], "checks": []}})
    for name, start in (("a", 0), ("b", 1000)):
        res = run_wap(lh, T.dotted, files_of(landing, name, 1, 300, start_id=start))
        assert res.status == "published", res.message
    tbl = reader(lh, tmp_path).cat.load_table(T.dotted)
    assert spec_of(tbl) == [("identity", "region")] and len(tbl.metadata.partition_specs) == 1
    assert tbl.scan().to_arrow().num_rows == 600


def _partitions(tbl: Any) -> list[dict[str, Any]]:
    out = []
    for r in tbl.inspect.partitions().to_pylist():
        part = r["partition"]
        out.append({"day": part["ts_day"], "bucket": part["id_bucket"]})
    return out


def test_sorted_table_is_range_distributed_and_files_are_sorted(lakehouse_factory, landing, tmp_path):
    lh = lakehouse_factory({T.dotted: {"partition_by": ["month(ts)"], "sort_by": ["region", "id DESC"], "checks": []}})
    res = run_wap(lh, T.dotted, files_of(landing, "a", 3, 200))
    assert res.status == "published", res.message
    tbl = reader(lh, tmp_path).cat.load_table(T.dotted)
    assert spec_of(tbl) == [("month", "ts")]
    assert sort_of(tbl) == [("region", "ASC", "NULLS_FIRST"), ("id", "DESC", "NULLS_LAST")]
    assert tbl.properties["write.distribution-mode"] == "range"
    files = data_files(tbl)
    assert len(files) <= 2 * 2, files  # one month (Jan 2026, 30 days): a file or two, not one per task
    import pyarrow.parquet as pq

    for f in files:  # each file is sorted by region, then id descending
        t = pq.read_table(f["file_path"].removeprefix("file:"), columns=["region", "id"]).to_pylist()
        assert t == sorted(t, key=lambda r: (r["region"], -r["id"]))
    assert tbl.scan().to_arrow().num_rows == 600


def test_existing_table_spec_evolves_once_and_old_files_keep_theirs(lakehouse_factory, landing, tmp_path):
    progress: list[str] = []
    lh = lakehouse_factory({T.dotted: {"checks": []}})
    lh.progress = progress.append
    first = run_wap(lh, T.dotted, files_of(landing, "a", 1, 90))
    assert first.status == "published"
    read = reader(lh, tmp_path)
    assert read.cat.load_table(T.dotted).spec().is_unpartitioned()

    configure(lh, partition_by=["day(ts)"], sort_by=["id"])
    progress.clear()
    second = run_wap(lh, T.dotted, files_of(landing, "b", 1, 90, days=3), run_id="evolve1")
    assert second.status == "published", second.message
    tbl = read.cat.load_table(T.dotted)
    assert spec_of(tbl) == [("day", "ts")] and sort_of(tbl) == [("id", "ASC", "NULLS_FIRST")]
    changes = [p for p in progress if p.startswith("layout of ev.events")]
    assert changes == [
        "layout of ev.events: partition field day(ts) added",
        "layout of ev.events: sort order set to id ASC NULLS FIRST",
    ], progress
    by_spec: dict[int, int] = {}
    for f in data_files(tbl):
        by_spec[f["spec_id"]] = by_spec.get(f["spec_id"], 0) + 1
    assert by_spec[0] == 1 and by_spec[tbl.spec().spec_id] == 3  # the first file keeps the unpartitioned spec
    assert sorted(tbl.scan().to_arrow()["id"].to_pylist()) == sorted(list(range(90)) * 2)

    # The same wap.toml again (a new run, or a resumed one): nothing changes twice.
    specs, orders = len(tbl.metadata.partition_specs), len(tbl.metadata.sort_orders)
    progress.clear()
    third = run_wap(lh, T.dotted, files_of(landing, "c", 1, 30, days=1))
    assert third.status == "published"
    tbl = read.cat.load_table(T.dotted)
    assert (len(tbl.metadata.partition_specs), len(tbl.metadata.sort_orders)) == (specs, orders)
    assert not [p for p in progress if p.startswith("layout of")]

    # A finer time unit replaces the coarser one; sort_by = [] drops the sort order; hash distribution again.
    configure(lh, partition_by=["hour(ts)", "region"], sort_by=[])
    progress.clear()
    fourth = run_wap(lh, T.dotted, files_of(landing, "d", 1, 24, days=1))
    assert fourth.status == "published", fourth.message
    tbl = read.cat.load_table(T.dotted)
    assert spec_of(tbl) == [("hour", "ts"), ("identity", "region")]
    assert tbl.sort_order().is_unsorted and tbl.properties["write.distribution-mode"] == "hash"
    assert [p.removeprefix("layout of ev.events: ") for p in progress if p.startswith("layout of")] == [
        "partition field day(ts) dropped",
        "partition field hour(ts) added",
        "partition field region added",
        "sort order removed",
        "write.distribution-mode set to hash",
    ]
    assert tbl.scan().to_arrow().num_rows == 90 * 2 + 30 + 24


def test_evolution_skips_what_another_writer_already_changed(lakehouse_factory, landing, tmp_path):
    lh = lakehouse_factory({T.dotted: {"checks": []}})
    assert run_wap(lh, T.dotted, files_of(landing, "a", 1, 30)).status == "published"
    # Another writer (or an earlier attempt cut short) added one of the two fields already.
    lh.spark.sql(f"ALTER TABLE {lh.tables.ident(T)} ADD PARTITION FIELD days(ts)")
    progress: list[str] = []
    lh.progress = progress.append
    configure(lh, partition_by=["day(ts)", "truncate(2, region)"])
    res = run_wap(lh, T.dotted, files_of(landing, "b", 1, 30))
    assert res.status == "published", res.message
    assert [p for p in progress if p.startswith("layout of")] == [
        "layout of ev.events: partition field truncate(2, region) added",
        "layout of ev.events: write.distribution-mode set to hash",
    ]
    tbl = reader(lh, tmp_path).cat.load_table(T.dotted)
    assert spec_of(tbl) == [("day", "ts"), ("truncate[2]", "region")]


@pytest.mark.parametrize(
    ("layout", "words"),
    [
        ({"partition_by": ["day(region)"]}, ["day(region)", "column region is string", "date or timestamp"]),
        ({"partition_by": ["bucket(8, amount)"]}, ["bucket(8, amount)", "column amount is double"]),
        ({"partition_by": ["day(tss)"]}, ["no column 'tss' in the batch", "did you mean 'ts'"]),
        ({"partition_by": ["region"], "sort_by": ["info"]}, ["sort_by 'info ASC NULLS FIRST'", "struct"]),
    ],
)
def test_layout_that_does_not_fit_the_batch_fails_before_any_write(lakehouse_factory, landing, tmp_path, layout, words):
    lh = lakehouse_factory({T.dotted: {"checks": []}})
    seed = run_wap(
        lh, T.dotted, files_of(landing, "seed", 1, 30, extra={"info": pa.array([{"a": i} for i in range(30)])})
    )
    assert seed.status == "published"
    read = reader(lh, tmp_path)
    main_before = read.main(T.dotted)
    configure(lh, **layout)
    bad = files_of(landing, "bad", 1, 30, extra={"info": pa.array([{"a": i} for i in range(30)])})
    res = run_wap(lh, T.dotted, bad)
    assert res.status == "failed" and res.exit_code == 2, res.message
    for w in ["ev.events", *words]:
        assert w in res.message, (w, res.message)
    assert read.main(T.dotted) == main_before and read.branches(T.dotted) == []
    tbl = read.cat.load_table(T.dotted)
    assert tbl.spec().is_unpartitioned() and len(tbl.metadata.partition_specs) == 1  # nothing evolved
    assert all(Path(f).exists() for f in bad)
    rec = lh.store.get(res.run_id)
    assert rec is not None and rec.status == "failed" and rec.error["exit_code"] == 2


def test_bad_transform_on_a_new_table_creates_nothing(lakehouse_factory, landing, tmp_path):
    lh = lakehouse_factory({T.dotted: {"partition_by": ["hour(day)"], "checks": []}})
    f = write_parquet(landing / "d.parquet", pa.table({"id": [1, 2], "day": pa.array([START.date()] * 2)}))
    res = run_wap(lh, T.dotted, [str(f)])
    assert res.status == "failed" and res.exit_code == 2
    assert "hour(day)" in res.message and "column day is date" in res.message and "a timestamp column" in res.message
    assert not reader(lh, tmp_path).exists(T.dotted) and f.exists()


def test_quarantine_on_a_partitioned_table(lakehouse_factory, landing, tmp_path):
    lh = lakehouse_factory(
        {
            T.dotted: {
                "partition_by": ["day(ts)"],
                "on_row_failure": "quarantine",
                "checks": [{"check": "not_null", "column": "amount"}],
            }
        }
    )
    res = run_wap(lh, T.dotted, files_of(landing, "q", 2, 130))
    assert res.status == "published", res.message
    read = reader(lh, tmp_path)
    tbl = read.cat.load_table(T.dotted)
    assert spec_of(tbl) == [("day", "ts")]
    main = tbl.scan().to_arrow()
    assert main.num_rows == 240 and main["amount"].null_count == 0  # ids divisible by 13 went to quarantine
    quarantine = read.cat.load_table("ev.events__quarantine")
    assert quarantine.spec().is_unpartitioned()  # a few failing rows: kept in few files, read by run id
    assert quarantine.scan().to_arrow().num_rows == 20
    assert len(data_files(tbl)) <= 30 * 2


def test_new_column_in_partition_by_waits_for_the_staged_publish(lakehouse_factory, landing, tmp_path):
    lh = lakehouse_factory({T.dotted: {"partition_by": ["day(ts)"], "schema": "add_columns", "checks": []}})
    assert run_wap(lh, T.dotted, files_of(landing, "a", 1, 30)).status == "published"
    configure(lh, partition_by=["day(ts)", "channel"], schema="add_columns")
    progress: list[str] = []
    lh.progress = progress.append
    extra = {"channel": pa.array(["web", "app"] * 15)}
    res = run_wap(lh, T.dotted, files_of(landing, "b", 1, 30, start_id=100, extra=extra))
    assert res.status == "published", res.message
    assert any("waits for new column(s) channel" in p for p in progress), progress
    read = reader(lh, tmp_path)
    assert spec_of(read.cat.load_table(T.dotted)) == [("day", "ts")]
    # The next run finds the column on the table and adds its field.
    nxt = run_wap(lh, T.dotted, files_of(landing, "c", 1, 30, start_id=200, extra=extra))
    assert nxt.status == "published", nxt.message
    tbl = read.cat.load_table(T.dotted)
    assert spec_of(tbl) == [("day", "ts"), ("identity", "channel")]
    assert tbl.scan().to_arrow().num_rows == 90


def test_on_nessie_the_layout_changes_on_the_run_branch_and_reaches_main_with_its_merge(
    spark, tmp_path, landing, nessie_server
):
    from support.data import make_config
    from wapflow.lakehouse.lakehouse import Lakehouse

    table = f"lay{abs(hash(tmp_path)) % 10**6}.events"
    cfg = make_config(tmp_path, {table: {"checks": []}}, catalog="nessie", nessie_uri=nessie_server.url)
    lh = Lakehouse(cfg, spark=spark)
    assert run_wap(lh, table, files_of(landing, "a", 1, 30)).status == "published"
    name = TableName.parse(table)

    def partitioning() -> list[str]:
        lh.tables.refresh(name)
        rows = [tuple(r) for r in spark.sql(f"DESCRIBE TABLE {lh.tables.ident(name)}").collect()]
        if ("# Partitioning", "", "") not in rows:  # an unpartitioned table has no such section
            return []
        start = rows.index(("# Partitioning", "", ""))
        return [r[1] for r in rows[start + 1 :] if r[0].startswith("Part ")]

    # A blocked run's layout change stays on its branch: main keeps its spec.
    lh.config.tables[table] = TableConfig.model_validate(
        {"partition_by": ["day(ts)"], "checks": [{"check": "not_null", "column": "amount"}]}
    )
    blocked = run_wap(lh, table, files_of(landing, "b", 1, 30))
    assert blocked.status == "blocked"
    assert partitioning() == []
    lh.config.tables[table] = TableConfig.model_validate({"partition_by": ["day(ts)"], "checks": []})
    res = run_wap(lh, table, files_of(landing, "c", 1, 30, start_id=100))
    assert res.status == "published", res.message
    assert partitioning() == ["days(ts)"]
    assert lh.tables.row_count(name) == 60


def test_evolution_retries_a_commit_that_meets_another_writers(lakehouse_factory, landing, tmp_path):
    """Another writer (PyIceberg here) commits to the table after this session cached it: the first ALTER
    fails on the stale metadata (CommitFailedException), is planned again on the refreshed table and lands;
    the other writer's commit is kept."""
    lh = lakehouse_factory({T.dotted: {"checks": []}})
    assert run_wap(lh, T.dotted, files_of(landing, "a", 1, 30)).status == "published"
    assert lh.tables.snapshots(T)  # this session has the table cached now
    other = reader(lh, tmp_path).cat.load_table(T.dotted)
    with other.transaction() as tx:
        tx.set_properties({"owner.team": "events"})
    progress: list[str] = []
    lh.progress = progress.append
    configure(lh, partition_by=["day(ts)"])
    res = run_wap(lh, T.dotted, files_of(landing, "b", 1, 30, start_id=100))
    assert res.status == "published", res.message
    tbl = reader(lh, tmp_path).cat.load_table(T.dotted)
    assert spec_of(tbl) == [("day", "ts")] and tbl.properties["owner.team"] == "events"
    assert [p for p in progress if p.startswith("layout of")] == [
        "layout of ev.events: partition field day(ts) added",
        "layout of ev.events: write.distribution-mode set to hash",
    ]
    assert tbl.scan().to_arrow().num_rows == 60


def test_cli_exit_codes_for_layouts_that_do_not_parse_or_do_not_fit(spark, tmp_path, landing):
    import json

    from support.data import trips_file
    from support.typer_cli import wap

    catalog = f"cli_layout{abs(hash(tmp_path)) % 10**6}"
    cfg = tmp_path / "wap.toml"

    def config(layout: str) -> str:
        cfg.write_text(
            f'[lakehouse]\nwarehouse = "{tmp_path / "lakehouse"}"\ncatalog_name = "{catalog}"\nmaster = "local[2]"\n'
            f'[tables."nyc.trips"]\nchecks = []\n{layout}\n'
        )
        return str(cfg)

    f = str(trips_file(landing, "t.parquet", 50))
    r = wap("run", "nyc.trips", f, "--config", config('partition_by = ["days(pickup_at)"]'), "--json")
    assert r.exit_code == 0, r.output
    tbl = Reader(tmp_path, catalog).cat.load_table("nyc.trips")
    assert spec_of(tbl) == [("day", "pickup_at")]
    main_before = tbl.current_snapshot().snapshot_id

    r = wap("run", "nyc.trips", f, "--config", config('partition_by = ["dya(pickup_at)"]'))
    assert r.exit_code == 2
    assert '[tables."nyc.trips"] partition_by' in r.output and "did you mean 'day'" in r.output

    # The same file again (--again: not refused as published already), now under a layout that does not fit.
    r = wap("run", "nyc.trips", f, "--again", "--config", config('partition_by = ["day(passenger_count)"]'), "--json")
    assert r.exit_code == 2, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "failed" and doc["error"]["kind"] == "config"
    assert "column passenger_count is" in doc["error"]["message"]
    assert Reader(tmp_path, catalog).main("nyc.trips") == main_before
