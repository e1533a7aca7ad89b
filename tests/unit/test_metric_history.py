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


def test_blocked_runs_only_the_history_judged_are_learnt_from_once_the_next_is_blocked_too(tmp_path: Path) -> None:
    """Nobody approving, a storm week is learnt: a blocked run whose failed checks all judged the batch against
    the history enters it once the next run was blocked that way too (the level held). Not one a rule blocked,
    one a person decided on, one whose next run passed (a faulty delivery, then a good one), or one whose files
    a later run published (counted once, as that run)."""
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    h = MetricHistory(store.engine)
    band = [{"name": "anomaly(row_count)", "check": "anomaly", "status": "failed"}]
    rule = [*band, {"name": "not_null(id)", "check": "not_null", "status": "failed"}]
    runs: list[tuple[str, str, list[dict[str, str]], str | None]] = [
        ("p0", "published", [], None),
        ("b1", "blocked", band, None),  # learnt: b2 was blocked by the history too
        ("b2", "blocked", band, None),  # b3 was blocked by a rule
        ("b3", "blocked", rule, None),
        ("b4", "blocked", band, "rejected"),  # a person decided
        ("b5", "blocked", band, None),  # its files published by p7
        ("b6", "blocked", band, None),  # p7 passed
        ("p7", "published", [], None),
        ("h8", "awaiting_review", [], None),
    ]
    for i, (rid, status, checks, review) in enumerate(runs):
        at = T0 + timedelta(days=i)
        files = [{"path": "f5" if rid == "p7" else f"f{i}"}]
        store.save(
            RunRecord(
                run_id=rid, table_name="t.days", status=status, started_at=at, checks=checks, review=review,
                files=files,
            )
        )  # fmt: skip
        h.record(rid, "t.days", at, {("row_count", ""): float(i), ("values", "kind"): json.dumps({rid: 1})})
    got = h.published("t.days", "row_count", "", 10)
    assert got == [7.0, 1.0, 0.0] and got.runs == ("p7", "b1", "p0")
    assert got.left_out == {"blocked": 5, "awaiting_review": 1} and got.learnt == 1
    assert h.published("t.days", "row_count", "", 2).runs == ("p7", "b1")
    assert h.published_texts("t.days", "values", "kind", 10) == [json.dumps({r: 1}) for r in ("p7", "b1", "p0")]


def test_a_run_a_rule_blocked_between_two_the_history_blocked_does_not_break_the_series(tmp_path: Path) -> None:
    """A short delivery control_totals blocked (say a faulty copy, delivered again whole the next run) says
    nothing of the level: the blocked run before it is learnt once the run after it was blocked the same way."""
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    h = MetricHistory(store.engine)
    band = [{"name": "anomaly(row_count)", "check": "anomaly", "status": "failed"}]
    short = [{"name": "control_totals", "check": "control_totals", "status": "failed"}]
    runs = [("p0", "published", []), ("b1", "blocked", band), ("r2", "blocked", short), ("b3", "blocked", band),
            ("p4", "published", [])]  # fmt: skip
    for i, (rid, status, checks) in enumerate(runs):
        at = T0 + timedelta(days=i)
        store.save(RunRecord(run_id=rid, table_name="t.days", status=status, started_at=at, checks=checks,
                             files=[{"path": f"f{i}"}]))  # fmt: skip
        h.record(rid, "t.days", at, {("row_count", ""): float(i)})
    got = h.published("t.days", "row_count", "", 10)
    assert got.runs == ("p4", "b1", "p0") and got.learnt == 1  # r2 never; b3's next run (p4) passed


def test_a_run_only_the_history_blocked_whose_producers_totals_agreed_is_learnt_at_once(tmp_path: Path) -> None:
    """control_totals passed: the producer says the batch is what it sent, so a band's block of it is a real
    day's level, learnt with no next run to confirm it. Not where a rule failed it too, or a person decided."""
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    h = MetricHistory(store.engine)
    agreed = {"name": "control_totals", "check": "control_totals", "status": "passed", "columns": ["amount"]}
    band = {"name": "anomaly(row_count)", "check": "anomaly", "status": "failed"}
    rule = {"name": "not_null(id)", "check": "not_null", "status": "failed"}
    runs = [("p0", "published", [agreed], None), ("v1", "blocked", [agreed, band], None),
            ("v2", "blocked", [agreed, band, rule], None), ("v3", "blocked", [agreed, band], "rejected"),
            ("p4", "published", [agreed], None)]  # fmt: skip
    for i, (rid, status, checks, review) in enumerate(runs):
        at = T0 + timedelta(days=i)
        store.save(RunRecord(run_id=rid, table_name="t.days", status=status, started_at=at, checks=checks,
                             review=review, files=[{"path": f"f{i}"}]))  # fmt: skip
        h.record(rid, "t.days", at, {("row_count", ""): float(i), ("mean", "amount"): 1.0, ("mean", "fee"): 1.0,
                                     ("null_fraction", "amount"): 0.0})  # fmt: skip
    got = h.published("t.days", "row_count", "", 10)
    assert got.runs == ("p4", "v1", "p0") and got.learnt == 1
    assert h.published("t.days", "mean", "amount", 10).runs == ("p4", "v1", "p0")  # its sum was compared
    for metric, column in (("mean", "fee"), ("null_fraction", "amount")):  # what the producer did not declare
        assert h.published("t.days", metric, column, 10).runs == ("p4", "p0"), (metric, column)


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
