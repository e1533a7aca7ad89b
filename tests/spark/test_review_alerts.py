"""A run held for review asks for a decision (the `awaiting_review` alert, with its warned checks, what publishing
would change and the commands), and `review_timeout` ends a wait: alerted again once per period, or rejected
(by "wapflow"; `wap approve` refused). Real runs; Slack and the webhook are the local receiver
(tests/support/receiver.py); main is read back with PyIceberg. Time moves by a clock passed to expire_reviews, or
by writing the held run's times in the run store (a `wap` command has no clock to pass)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from support.data import trips_file
from support.receiver import Receiver
from support.typer_cli import wap
from wapflow.config import load_config
from wapflow.errors import EXIT_REVIEW, EXIT_USAGE
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.outer.review import expire_reviews
from wapflow.runs.store import RunStore

WARN = '{ check = "row_count", max = 150, severity = "warn" }'


def _config(tmp: Path, catalog: str, table: str, tail: str = "") -> Path:
    p = tmp / "wap.toml"
    p.write_text(
        f'[lakehouse]\nwarehouse = "{tmp / "lakehouse"}"\ncatalog_name = "{catalog}"\nmaster = "local[2]"\n\n'
        f'[tables."nyc.trips"]\nreview = "on_warn"\nchecks = [{WARN}]\n{table}\n{tail}'
    )
    return p


SINKS = (
    '[alerts]\ndashboard_url = "https://wap.example.com/"\n\n'
    '[alerts.sinks.team]\ntype = "slack"\nurl_env = "WAP_T_SLACK"\nevents = ["awaiting_review"]\n\n'
    '[alerts.sinks.ops]\ntype = "webhook"\nurl_env = "WAP_T_HOOK"\nevents = ["awaiting_review"]\n'
)


def _main(cfg: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    c = load_config(str(cfg))
    wh = Path(c.warehouse_location())
    catalog = SqlCatalog(c.lakehouse.catalog_name, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}")
    return catalog.load_table("nyc.trips")


def _run(cfg: Path, f: Path) -> tuple[int, dict[str, Any]]:
    r = wap("run", "nyc.trips", str(f), "--config", str(cfg), "--json")
    return r.exit_code, json.loads(r.stdout)


@pytest.fixture
def hook() -> Any:
    r = Receiver()
    yield r
    r.close()


@pytest.mark.spark
def test_a_held_run_alerts_with_its_warnings_diff_and_commands_then_again_once_per_timeout(
    spark: Any, tmp_path: Path, landing: Path, receiver: Receiver, hook: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WAP_T_SLACK", receiver.url)
    monkeypatch.setenv("WAP_T_HOOK", hook.url)
    cfg = _config(tmp_path, "rva_alert", 'review_timeout = "1h"\non_review_timeout = "alert"', SINKS)
    code, first = _run(cfg, trips_file(landing, "a.parquet", 100))
    assert code == 0 and first["status"] == "published" and receiver.count == hook.count == 0

    # 200 rows (the warning) with 30% of passenger_count null (main has none): held, and the alert says so.
    code, held = _run(cfg, trips_file(landing, "b.parquet", 200, null_rate=0.3, start_id=101))
    assert code == EXIT_REVIEW and held["status"] == "awaiting_review", held
    run = held["run_id"]
    (body,) = hook.bodies
    assert body["schema"] == "wapflow.alert/v1" and body["event"] == "awaiting_review"
    assert (body["table"], body["run_id"], body["branch"]) == ("nyc.trips", run, held["branch"])
    assert [(c["name"], c["observed"], c["threshold"]) for c in body["warned_checks"]] == [
        ("row_count(max=150)", 200, "<= 150")
    ]
    assert body["diff"]["rows"] == {"added": 200, "updated": 0, "deleted": 0, "replaced": 0, "main_rows": 100}
    nulls = [n for n in body["diff"]["notable"] if n.startswith("passenger_count: null fraction 0 → ")]
    assert len(nulls) == 1 and 0.2 < float(nulls[0].rsplit("→ ", 1)[1]) < 0.4, body["diff"]
    assert f'wap approve {run} --reason "..."' in body["commands"]
    assert f'wap reject {run} --reason "..."' in body["commands"] and f"wap diff {run}" in body["commands"]
    (slack,) = receiver.bodies
    texts = [b.get("text", {}).get("text", "") for b in slack["blocks"]]
    assert texts[0] == "Run awaiting review: nyc.trips"
    assert any(t.startswith("*Warned checks*\n• `row_count(max=150)`: observed *200*") for t in texts)
    changes = next(t for t in texts if t.startswith("*What publishing changes*"))
    assert "rows: 200 added (main has 100)" in changes and "passenger_count: null fraction 0 →" in changes
    assert any(t.startswith("*Decide*") and f"wap approve {run} --reason" in t for t in texts), texts
    assert slack["text"].startswith("wapflow: Run awaiting review: nyc.trips run")
    assert body["link"] == "https://wap.example.com/?page=Review"
    assert "<https://wap.example.com/?page=Review|Open the review queue> in the dashboard" in texts

    # The timeout: nothing before it; past it one alert per period, however often it is looked at.
    lh = Lakehouse(load_config(str(cfg)), spark=spark)
    now = datetime.now(UTC)
    assert expire_reviews(lh, now=now + timedelta(minutes=30)) == []
    (doc,) = expire_reviews(lh, now=now + timedelta(minutes=90))
    assert (doc["run_id"], doc["action"], doc["review_timeout"]) == (run, "alerted", "1h")
    assert [b["event"] for b in hook.bodies] == ["awaiting_review", "awaiting_review"]
    assert "has awaited review for 1h" in hook.bodies[1]["message"] and hook.bodies[1]["diff"]["rows"]["added"] == 200
    (again,) = expire_reviews(lh, now=now + timedelta(minutes=100))
    assert again["action"] == "alerted before" and hook.count == 2 and receiver.count == 2
    (later,) = expire_reviews(lh, now=now + timedelta(hours=2, minutes=30))
    assert later["action"] == "alerted" and hook.count == 3
    rec = RunStore(load_config(str(cfg)).run_store_url()).get(run)
    assert rec is not None and rec.status == "awaiting_review"  # "alert" never decides for anyone
    assert wap("approve", run, "--reason", "nulls explained", "--config", str(cfg)).exit_code == 0  # still allowed
    assert len(_main(cfg).scan().to_arrow()) == 300


@pytest.mark.spark
def test_review_timeout_reject_drops_the_run_and_refuses_its_approval(
    spark: Any, tmp_path: Path, landing: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "land"
    src.mkdir()
    trips_file(src, "a.parquet", 200)
    trips_file(src, "b.parquet", 200, start_id=201)
    source = f'[sources.trips]\ntable = "nyc.trips"\nlocation = "{src}"\nsettle_seconds = 0\nmax_files_per_run = 1\n'
    table_keys = 'review_timeout = "1h"\non_review_timeout = "reject"\nmaintenance = { enabled = false }'
    sink = '\n[alerts.sinks.ops]\ntype = "webhook"\nurl_env = "WAP_T_HOOK"\nevents = ["review_expired"]\n'
    monkeypatch.setenv("WAP_T_HOOK", receiver.url)
    cfg = _config(tmp_path, "rva_reject", table_keys, source + sink)
    r = wap("ingest", "trips", "--config", str(cfg), "--json")
    assert r.exit_code == EXIT_REVIEW, r.output
    runs = {Path(f["uri"]).name: f["run_id"] for f in json.loads(r.stdout)["files"]}
    run, other = runs["a.parquet"], runs["b.parquet"]
    store = RunStore(load_config(str(cfg)).run_store_url())
    rec = store.get(run)
    assert rec is not None and rec.branch_kept and rec.branch in _main(cfg).metadata.refs

    none = json.loads(wap("expire-reviews", "--config", str(cfg), "--json").stdout)
    assert none == {"runs": []}  # held moments ago
    # Held three hours ago: the run store's times written back (a `wap` process has no clock to move).
    then = datetime.now(UTC) - timedelta(hours=3)
    assert store.transition(run, "awaiting_review", started_at=then - timedelta(minutes=1), finished_at=then)

    r = wap("approve", run, "--reason", "looks fine", "--config", str(cfg))
    assert r.exit_code == EXIT_USAGE and "approval refused" in r.output and 'review_timeout = "1h"' in r.output
    dry = json.loads(wap("expire-reviews", "--dry-run", "--config", str(cfg), "--json").stdout)["runs"]
    assert [(d["run_id"], d["action"], d["waited"]) for d in dry] == [(run, "would reject", "3h")]
    assert store.get(run).status == "awaiting_review"  # type: ignore[union-attr]

    r = wap("expire-reviews", "--config", str(cfg), "--json")
    assert r.exit_code == 0, r.output
    (doc,) = json.loads(r.stdout)["runs"]
    assert doc["action"] == "rejected" and "rejected by wapflow (review timed out after 1h)" in doc["message"]
    rec = store.get(run)
    assert rec is not None and (rec.status, rec.review, rec.review_by, rec.review_reason) == (
        "rejected",
        "rejected",
        "wapflow",
        "review timed out after 1h",
    )
    table = _main(cfg)
    assert rec.branch not in table.metadata.refs and len(table.scan().to_arrow()) == 0  # main never had its rows
    files = json.loads(wap("files", "trips", "--config", str(cfg), "--json").stdout)["files"]
    assert {Path(fl["uri"]).name: fl["state"] for fl in files} == {
        "a.parquet": "rejected",
        "b.parquet": "awaiting_review",
    }
    assert json.loads(wap("expire-reviews", "--config", str(cfg), "--json").stdout) == {"runs": []}
    # Nobody saw it go: the sink that wants review_expired is told once (not on the second, empty pass).
    (body,) = receiver.bodies
    assert (body["event"], body["run_id"], body["status"]) == ("review_expired", run, "rejected"), body
    assert "review timed out after 1h" in body["message"] and body["commands"] == [f"wap report {run}"]
    assert [Path(u).name for u in body["files"]] == ["a.parquet"]

    # `wap watch` applies it on its ticks: the other run, once its wait is past the timeout too.
    from wapflow.outer.watch import Watcher

    said: list[str] = []
    watcher = Watcher(Lakehouse(load_config(str(cfg)), spark=spark), ["trips"], say=said.append)
    watcher.tick()
    assert store.get(other).status == "awaiting_review"  # type: ignore[union-attr]
    assert store.transition(other, "awaiting_review", finished_at=then)
    watcher.tick()
    rec = store.get(other)
    assert rec is not None and (rec.status, rec.review_by, rec.review_reason) == (
        "rejected",
        "wapflow",
        "review timed out after 1h",
    )
    assert any(f"run {other} rejected by wapflow (review timed out after 1h)" in m for m in said), said
    files = json.loads(wap("files", "trips", "--config", str(cfg), "--json").stdout)["files"]
    assert {fl["state"] for fl in files} == {"rejected"} and len(_main(cfg).scan().to_arrow()) == 0

    # An alert whose delivery failed (the sink down) is sent again by `wap watch`, every few minutes.
    from wapflow.alerts import AlertEvent, notify

    receiver.default = "500"
    down = AlertEvent(event="review_expired", table="nyc.trips", run_id="r-down", status="rejected", message="m")
    (failed,) = notify(watcher.lh.config, store.engine, [down])
    assert failed.status == "failed"
    receiver.default = "200"
    count = receiver.count
    watcher.tick()  # not due yet: the first pass comes one interval after the start
    assert receiver.count == count
    watcher.next_resend = 0.0
    watcher.tick()
    assert receiver.count == count + 1 and receiver.bodies[-1]["run_id"] == "r-down"
    assert any("alert review_expired to sink ops sent on a later try" in m for m in said), said
