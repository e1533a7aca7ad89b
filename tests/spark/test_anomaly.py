"""Issue 23's audits that remember: ten daily batches published through real runs build nyc.trips' metric
history, then a volume drop, a null spike, a shifted mean and a collapse of distinct trip ids are each blocked
with the band in the report, a normal next day publishes, and `wap metrics` reads the history back. Weekly
seasonality: a batch as small as the table's runs on the same weekday passes only with it. Real Spark, Iceberg
and run store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

from support.data import trips_file, write_parquet
from wapflow.audit.anomaly import DISTINCT_RSD, WEEKDAYS, history_of, weekday_of
from wapflow.cli import app
from wapflow.demo.generate import generate_trips
from wapflow.pipeline import run_wap
from wapflow.runs.metrics import MetricHistory
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
T = TableName.parse("nyc.trips")
CHECKS = [
    {"check": "volume"},  # the anomaly band on row_count; 3 runs of history needed
    {"check": "anomaly", "metric": "null_fraction", "column": "passenger_count", "min_history": 7},
    {"check": "anomaly", "metric": "mean", "column": "fare_amount", "min_history": 7},
    {"check": "anomaly", "metric": "distinct", "column": "trip_id", "min_history": 7},
    {"check": "anomaly", "metric": "duplicate_fraction", "min_history": 7},
    {"check": "schema_change"},
]
DAYS = 10


def by_check(res) -> dict[str, dict]:
    return {c["name"]: c for c in res.checks}


def test_anomalies_are_blocked_against_the_published_history(lakehouse_factory, landing: Path, tmp_path: Path):
    lh = lakehouse_factory({"nyc.trips": {"checks": CHECKS}})
    start = 1
    for day in range(DAYS):
        rows = 95 + (day * 7) % 11  # 95..105 rows a day
        f = trips_file(landing, f"day{day}.parquet", rows, start_id=start, seed=day)
        start += rows
        res = run_wap(lh, "nyc.trips", [str(f)])
        assert res.status == "published", res.message
        got = by_check(res)
        if day < 7:  # fewer than min_history published runs: warns (never a silent pass), publishes, says so
            nulls = got["anomaly(null_fraction(passenger_count))"]
            assert nulls["status"] == "warned"
            assert nulls["threshold"] == f"{day} of 7 runs of history: warns until then"
    on_main = lh.tables.row_count(T)

    def blocked_by(name: str, table: pa.Table, check: str) -> dict:
        res = run_wap(lh, "nyc.trips", [str(write_parquet(landing / name, table))])
        assert res.status == "blocked" and res.exit_code == 1, res.message
        failed = by_check(res)[check]
        assert failed["status"] == "failed", failed
        assert lh.tables.row_count(T) == on_main  # main unchanged
        report = lh.store.get(res.run_id)
        assert report is not None and report.status == "blocked"
        return failed

    drop = blocked_by(
        "drop.parquet", generate_trips(10, start_id=5000, seed=50), "volume(median ± 3 MAD of last 10 runs)"
    )
    lo, hi = drop["observed"]["band"]
    assert drop["observed"]["value"] == 10 and drop["observed"]["history"] == DAYS and 80 < lo < 95 and hi > 105
    assert drop["threshold"].startswith(f"[{lo:.4g}, {hi:.4g}]") and f"last {DAYS} published runs" in drop["threshold"]

    spike = blocked_by(
        "spike.parquet",
        generate_trips(100, null_rate=0.3, start_id=6000, seed=51),
        "anomaly(null_fraction(passenger_count))",
    )
    assert spike["observed"]["value"] == pytest.approx(0.3) and spike["observed"]["band"][1] < 0.05  # 2-point least
    assert spike["observed"]["history"] == DAYS and spike["source"] == "metadata"  # Iceberg's null counts

    shifted = generate_trips(100, start_id=7000, seed=52)
    shifted = shifted.set_column(
        shifted.schema.get_field_index("fare_amount"), "fare_amount", pc.multiply(shifted["fare_amount"], 10.0)
    )
    mean = blocked_by("shifted.parquet", shifted, "anomaly(mean(fare_amount))")
    lo, hi = mean["observed"]["band"]
    assert mean["observed"]["value"] > 10 * lo and lo < 12 < hi and mean["source"] == "write"  # observed by the write

    collapsed = generate_trips(100, start_id=9000, seed=54)  # 100 rows, as usual, but 10 trip ids repeated
    collapsed = collapsed.set_column(
        collapsed.schema.get_field_index("trip_id"), "trip_id", pc.divide(collapsed["trip_id"], 10)
    )
    assert len(pc.unique(collapsed["trip_id"])) == 10
    distinct = blocked_by("collapsed.parquet", collapsed, "anomaly(distinct(trip_id))")
    lo, hi = distinct["observed"]["band"]
    assert distinct["observed"]["value"] == 10 and 75 < lo < 95 and hi > 105 and distinct["source"] == "write"
    assert (
        distinct["threshold"].startswith(f"[{lo:.4g}, {hi:.4g}]")
        and f"last {DAYS} published runs" in (distinct["threshold"])
    )

    twice = generate_trips(80, start_id=9500, seed=55)  # 100 rows, 20 of them copies of others: a file sent twice
    twice = pa.concat_tables([twice, twice.slice(0, 20)])
    dups = blocked_by("twice.parquet", twice, "anomaly(duplicate_fraction)")
    # HyperLogLog++'s distinct rows: 80, estimated within a row or two.
    assert dups["observed"]["value"] == pytest.approx(0.2, abs=0.02) and dups["observed"]["model"] == "proportion"
    assert dups["source"] == "write" and dups["observed"]["band"][1] < 0.05  # observed by the write; 2-point least

    normal = run_wap(lh, "nyc.trips", [str(trips_file(landing, "normal.parquet", 100, start_id=8000, seed=53))])
    assert normal.status == "published", normal.message
    assert {c["status"] for c in normal.checks} == {"passed"}
    estimate = pytest.approx(100, rel=3 * DISTINCT_RSD)  # HyperLogLog++: 100 distinct ids, estimated
    assert by_check(normal)["anomaly(distinct(trip_id))"]["observed"]["value"] == estimate
    assert by_check(normal)["schema_change"]["observed"] == "no change"
    assert by_check(normal)["anomaly(duplicate_fraction)"]["observed"]["value"] < 0.03  # none, estimated

    # The history as `wap metrics` shows it: every audited run, blocked ones too, newest first.
    cfg = tmp_path / "wap.toml"
    cfg.write_text(f'[lakehouse]\nwarehouse = "{tmp_path / "elsewhere"}"\nrun_store = "{lh.config.run_store_url()}"\n')
    runner = CliRunner()
    res = runner.invoke(
        app, ["metrics", "nyc.trips", "--metric", "row_count", "--limit", "5", "--json", "--config", str(cfg)]
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["metrics"]
    assert [(r["status"], r["value"]) for r in rows] == [
        ("published", 100.0),
        ("blocked", 100.0),  # twice
        ("blocked", 100.0),
        ("blocked", 100.0),
        ("blocked", 100.0),
    ]
    res = runner.invoke(
        app, ["metrics", "nyc.trips", "--metric", "distinct", "--limit", "3", "--json", "--config", str(cfg)]
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["metrics"]
    assert [(r["status"], r["column"], r["value"]) for r in rows] == [
        ("published", "trip_id", estimate),
        ("blocked", "trip_id", pytest.approx(80, rel=3 * DISTINCT_RSD)),  # twice: 80 ids, 20 of them sent again
        ("blocked", "trip_id", 10.0),
    ]
    res = runner.invoke(app, ["metrics", "nyc.trips", "--column", "fare_amount", "--limit", "2", "--config", str(cfg)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    for metric in ("null_fraction", "min", "max", "mean"):
        assert metric in text
    assert "published" in text and "blocked" in text


@pytest.mark.parametrize(
    "check, words",
    [
        (
            {"check": "anomaly", "metric": "mean", "column": "fare_amonut"},
            ["'fare_amonut'", "did you mean 'fare_amount'"],
        ),
        ({"check": "anomaly", "metric": "mean", "column": "pickup_at"}, ["needs a numeric column", "timestamp"]),
        ({"check": "anomaly", "metric": "mean_length", "column": "fare_amount"}, ["needs a string column", "double"]),
    ],
)
def test_an_anomaly_check_that_cannot_fit_the_data_is_a_config_error_before_any_write(
    lakehouse_factory, landing: Path, check: dict, words: list[str]
):
    lh = lakehouse_factory({"nyc.trips": {"checks": [check]}})
    res = run_wap(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 20))])
    assert res.status == "failed" and res.exit_code == 2, res.message
    for w in words:
        assert w in res.message
    assert not lh.tables.exists(T)  # nothing written


def test_a_table_adopted_mid_life_gets_its_history_from_main_snapshots(lakehouse_factory, landing: Path):
    import wapflow

    nulls = {"check": "anomaly", "metric": "null_fraction", "column": "passenger_count", "min_history": 3}
    lh = lakehouse_factory(
        {"nyc.trips": {"checks": [{"check": "anomaly", "metric": "row_count", "min_history": 3}, nulls]}}
    )
    ident = lh.tables.ident(T)
    lh.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {T.namespace_sql(lh.catalog)}")
    for day, rows in enumerate([100, 104, 98]):  # another writer's appends, before wapflow
        df = lh.spark.read.parquet(
            str(trips_file(landing, f"old{day}.parquet", rows, start_id=1000 * day + 1, seed=day))
        )
        (df.writeTo(ident).using("iceberg").create() if day == 0 else df.writeTo(ident).append())

    blind = run_wap(lh, "nyc.trips", [str(trips_file(landing, "tiny.parquet", 10, start_id=90000))])
    assert blind.status == "published" and blind.checks[0]["threshold"].startswith("0 of 3 runs of history")

    got = wapflow.metrics(lh, "nyc.trips", metric="row_count", backfill=True)
    assert [(r["status"], r["value"]) for r in got] == [
        ("published", 10.0),
        ("published", 98.0),
        ("published", 104.0),
        ("published", 100.0),
    ]
    assert all(r["run_id"].startswith("snapshot-") for r in got[1:])
    # Per column too, from the files each append added (Iceberg metadata): what an audit records of its own.
    fares = wapflow.metrics(lh, "nyc.trips", metric="max", column="fare_amount")
    assert [r["run_id"] for r in fares] == [r["run_id"] for r in got]
    old = lh.spark.read.parquet(str(landing / "old1.parquet"))
    assert fares[2]["value"] == pytest.approx(old.agg({"fare_amount": "max"}).first()[0])
    again = CliRunner().invoke(
        app, ["metrics", "nyc.trips", "--backfill", "--json", "--config", str(write_config_for(lh, landing))]
    )
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["backfill"] == {"table": "nyc.trips", "recorded": 0, "already": 4, "columns": 0}

    drop = run_wap(lh, "nyc.trips", [str(trips_file(landing, "drop.parquet", 10, start_id=95000))])
    assert drop.status == "blocked", drop.message
    assert drop.checks[0]["observed"]["history"] == 4 and drop.checks[0]["observed"]["band"][0] > 10
    spike = run_wap(lh, "nyc.trips", [str(trips_file(landing, "spike.parquet", 100, null_rate=0.3, start_id=96000))])
    assert spike.status == "blocked", spike.message
    assert [c["status"] for c in spike.checks] == ["passed", "failed"]
    assert spike.checks[1]["observed"]["history"] == 4 and spike.checks[1]["observed"]["band"][1] < 0.1


def write_config_for(lh, folder: Path) -> Path:
    """A wap.toml on the lakehouse of `lh` (its warehouse, catalog and run store), for the CLI."""
    cfg = folder / "wap.toml"
    lake = lh.config.lakehouse
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{lake.warehouse}"\ncatalog_name = "{lh.catalog}"\nmaster = "local[2]"\n'
        f'run_store = "{lh.config.run_store_url()}"\n'
    )
    return cfg


def test_weekly_seasonality_judges_a_quiet_day_against_the_same_weekday(lakehouse_factory, landing: Path):
    """Five weeks of daily history (written as the run store keeps it): the weekday this run starts on is the
    table's quiet day (about 22 rows, as a weekend is for many tables), every other day about 100. A 22-row batch
    today passes the weekly band, made of the quiet days only; the band of all days passes it too, wider, as a
    heavy tail of its history; the default (seasonality "auto") finds the rhythm and judges by the quiet days'
    level: 22 passes, a weekday's 100 rows fail."""
    weekly = {"check": "anomaly", "metric": "row_count", "min_history": 4, "seasonality": "weekly"}
    plain = {"check": "anomaly", "metric": "row_count", "min_history": 4, "seasonality": "none"}
    auto = {"check": "anomaly", "metric": "row_count", "min_history": 4}
    lh = lakehouse_factory(
        {
            "nyc.trips": {"checks": [weekly]},
            "nyc.trips_plain": {"checks": [plain]},
            "nyc.trips_auto": {"checks": [auto]},
        }
    )
    now = datetime.now(UTC)
    quiet = weekday_of(now)
    history = MetricHistory(lh.store.engine)
    for table in ("nyc.trips", "nyc.trips_plain", "nyc.trips_auto"):
        for day in range(1, 36):
            at = now - timedelta(days=day)
            rows = 20.0 + day % 5 if weekday_of(at) == quiet else 95.0 + day % 11
            history.record(f"hist-{table}-{day}", table, at, {("row_count", ""): rows})

    res = run_wap(lh, "nyc.trips", [str(trips_file(landing, "quiet.parquet", 22, seed=7))])
    assert res.status == "published", res.message
    got = res.checks[0]
    assert got["name"] == "anomaly(row_count, weekly)" and got["status"] == "passed"
    assert got["observed"]["seasonality"] == f"same weekday: {history_of(5, quiet)}"
    assert got["observed"]["history"] == 5 and got["observed"]["band"][1] < 40
    assert f"same weekday: {history_of(5, quiet)}" in got["threshold"]

    # The band of all days: its 30 runs hold 4-5 quiet days, a heavy tail it reaches, far wider than the weekly one.
    res = run_wap(lh, "nyc.trips_plain", [str(trips_file(landing, "quiet2.parquet", 22, seed=7))])
    assert res.status == "published", res.message
    got = res.checks[0]
    assert got["status"] == "passed" and got["observed"]["value"] == 22 and got["observed"]["median"] > 80
    assert got["observed"]["history"] == 30 and "same weekday" not in got["threshold"]
    assert "heavy tail" in got["threshold"] and got["observed"]["band"][1] > 100

    rhythm = f"weekly rhythm: {WEEKDAYS[quiet]}s"
    res = run_wap(lh, "nyc.trips_auto", [str(trips_file(landing, "quiet3.parquet", 22, seed=7))])
    got = res.checks[0]
    assert res.status == "published" and got["status"] == "passed", res.message
    assert got["observed"]["seasonality"].startswith(rhythm) and rhythm in got["threshold"]
    assert got["observed"]["median"] < 30 and got["observed"]["band"][1] < 40 and got["observed"]["history"] == 30
    busy = run_wap(lh, "nyc.trips_auto", [str(trips_file(landing, "busy.parquet", 100, start_id=500, seed=8))])
    assert busy.status == "blocked" and busy.checks[0]["status"] == "failed", busy.message
