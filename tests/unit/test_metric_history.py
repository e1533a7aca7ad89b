"""The metric history in the run store (wapflow.runs.metrics), without Spark: what counts as a table's history
(its published runs, newest first), a run audited again replaces its rows, and `wap metrics` / the service
read it back with clear errors. Recorded by real runs: tests/spark/test_anomaly.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wapflow.cli import app
from wapflow.errors import NotFound, UsageError
from wapflow.runs.metrics import MetricHistory
from wapflow.runs.store import RunRecord, RunStore
from wapflow.service.metrics import metric_rows

runner = CliRunner()
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def store_with_runs(tmp_path: Path) -> RunStore:
    """Six runs of nyc.trips a day apart (the fifth blocked, the last still running) and one of another table."""
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    history = MetricHistory(store.engine)
    statuses = ["published", "published", "published", "published", "blocked", "running"]
    for i, status in enumerate(statuses):
        at = T0 + timedelta(days=i)
        store.save(RunRecord(run_id=f"r{i}", table_name="nyc.trips", status=status, started_at=at))
        history.record(
            f"r{i}",
            "nyc.trips",
            at,
            {("row_count", ""): 100.0 + i, ("null_fraction", "Fare"): i / 100, ("schema", ""): json.dumps({"c": i})},
        )
    store.save(RunRecord(run_id="z0", table_name="shop.orders", status="published", started_at=T0))
    history.record("z0", "shop.orders", T0, {("row_count", ""): 7.0})
    return store


def test_the_history_is_the_published_runs_newest_first(tmp_path: Path) -> None:
    store = store_with_runs(tmp_path)
    h = MetricHistory(store.engine)
    assert h.published("nyc.trips", "row_count", "", 10) == [103.0, 102.0, 101.0, 100.0]
    assert h.published("nyc.trips", "null_fraction", "fare", 2) == [0.03, 0.02]  # columns are lower-cased
    assert h.last_published_schema("nyc.trips") == {"c": 3}
    assert h.published("nyc.nothing", "row_count", "", 10) == []
    h.record("r3", "nyc.trips", T0 + timedelta(days=3), {("row_count", ""): 42.0})  # audited again
    assert h.published("nyc.trips", "row_count", "", 1) == [42.0]
    assert h.published("nyc.trips", "null_fraction", "fare", 1) == [0.02]  # its old rows are gone


def test_metric_rows_filter_limit_and_errors(tmp_path: Path) -> None:
    store = store_with_runs(tmp_path)
    rows = metric_rows(store, "nyc.trips", metric="row_count", limit=3)
    assert [(r["run_id"], r["status"], r["value"]) for r in rows] == [
        ("r5", "running", 105.0),
        ("r4", "blocked", 104.0),
        ("r3", "published", 103.0),
    ]
    assert {r["run_id"] for r in metric_rows(store, "nyc.trips", column="FARE", limit=2)} == {"r5", "r4"}
    with pytest.raises(UsageError, match="did you mean 'null_fraction'"):
        metric_rows(store, "nyc.trips", metric="null_fractoin")
    with pytest.raises(NotFound, match=r"did you mean 'nyc\.trips'"):
        metric_rows(store, "nyc.trip")


def test_wap_metrics_shows_rows_and_json(tmp_path: Path) -> None:
    store_with_runs(tmp_path)
    cfg = tmp_path / "wap.toml"
    cfg.write_text(f'[lakehouse]\nwarehouse = "{tmp_path / "lake"}"\nrun_store = "sqlite:///{tmp_path / "runs.db"}"\n')
    res = runner.invoke(app, ["metrics", "nyc.trips", "--metric", "row_count", "--limit", "2", "--config", str(cfg)])
    assert res.exit_code == 0, res.output
    assert "r5" in res.output and "r4" in res.output and "r3" not in res.output and "104" in res.output
    res = runner.invoke(app, ["metrics", "nyc.trips", "--column", "fare", "--json", "--config", str(cfg)])
    doc = json.loads(res.output)
    assert {(m["run_id"], m["metric"], m["column"]) for m in doc["metrics"]} >= {("r0", "null_fraction", "fare")}
    bad = runner.invoke(app, ["metrics", "nyc.trips", "--metric", "avg", "--config", str(cfg)])
    assert bad.exit_code == 2 and "unknown metric" in bad.output and "Traceback" not in bad.output
