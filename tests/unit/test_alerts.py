"""Alerts: payloads field by field, delivery against a local HTTP receiver (200, 429 + Retry-After, 500,
404, a hang, nothing listening), at most once per occurrence, no URL anywhere, config errors; and with
real Spark, a blocked run, a broken sink that changes nothing, a failed file of an ingest.

Only Slack is replaced: by `Receiver`, a threaded http.server on 127.0.0.1 told per request how to answer.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from support.cli_harness import wap, write_config
from support.receiver import SECRET, Receiver
from wapflow.alerts import kept_branch_events, notify
from wapflow.alerts.deliver import dispatch, post
from wapflow.alerts.event import events_for_run, from_run
from wapflow.alerts.payload import SCHEMA, slack_payload, webhook_payload
from wapflow.config import AlertsConfig, parse_config
from wapflow.errors import ConfigError
from wapflow.lakehouse.processes import free_port
from wapflow.pipeline.result import RunResult
from wapflow.runs.ledger import Ledger
from wapflow.runs.store import RunRecord, RunStore
from wapflow.service.alerts import recent_alerts
from wapflow.storage.files import FileIdentity


def _blocked_result(**kw: Any) -> RunResult:
    checks = [
        {"name": "row_count(min=1)", "check": "row_count", "status": "passed", "observed": 200, "threshold": ">= 1"},
        {
            "name": "not_null(passenger_count)",
            "check": "not_null",
            "status": "failed",
            "observed": 7,
            "failing_rows": 7,
            "threshold": "= 0",
            "samples": [{"trip_id": i, "passenger_count": None} for i in range(1, 6)],
        },
    ]
    args: dict[str, Any] = {
        "run_id": "r1",
        "table": "nyc.trips",
        "status": "blocked",
        "branch": "wap_r1",
        "branch_kept": True,
        "checks": checks,
        "files": ["landing/a.parquet"],
        "message": "audit failed: not_null(passenger_count); branch wap_r1 kept",
    }
    return RunResult(**(args | kw))


def _alerts(*sinks: tuple[str, str, str], **kw: Any) -> AlertsConfig:
    """(name, type, env var) per sink."""
    return AlertsConfig.model_validate(
        {"sinks": {n: {"type": t, "url_env": e, "timeout": 1, **kw} for n, t, e in sinks}}
    )


def _store(tmp_path: Path) -> RunStore:
    return RunStore(f"sqlite:///{tmp_path / 'runs.db'}")


# --- payloads ----------------------------------------------------------------------------------


def test_slack_payload_field_by_field() -> None:
    ev = from_run(_blocked_result(), "blocked")
    p = slack_payload(ev)
    header, fields, message, checks, samples, commands, context = p["blocks"]
    assert header == {
        "type": "header",
        "text": {"type": "plain_text", "text": "Run blocked by its audit: nyc.trips", "emoji": False},
    }
    assert [f["text"] for f in fields["fields"]] == [
        "*Table*\nnyc.trips",
        "*Run*\nr1",
        "*Branch*\nwap_r1",
        "*Status*\nblocked",
        "*Event*\nblocked",
    ]
    assert message["text"]["text"] == "audit failed: not_null(passenger_count); branch wap_r1 kept"
    assert checks["text"]["text"] == (
        "*Failed checks*\n• `not_null(passenger_count)`: observed *7*, threshold = 0 (7 failing row(s))"
    )
    assert "row_count" not in json.dumps(p)  # a passed check is not in the alert
    assert samples["text"]["text"] == (
        '*Sample values*\n```{"trip_id": 1, "passenger_count": null}\n{"trip_id": 2, "passenger_count": null}\n'
        '{"trip_id": 3, "passenger_count": null}```'
    )
    assert commands["text"]["text"] == (
        "*Inspect*\n```wap report r1\nwap query 'SELECT * FROM nyc.trips LIMIT 20' --branch wap_r1\n"
        "wap discard wap_r1 --table nyc.trips```"
    )
    assert context["type"] == "context"
    assert p["text"] == (
        "wapflow: Run blocked by its audit: nyc.trips run r1 (blocked): audit failed: not_null(passenger_count); "
        "branch wap_r1 kept"
    )


def test_slack_limits_hold_for_long_names_and_text() -> None:
    ev = from_run(_blocked_result(table="n." + "t" * 400, message="x<y & " * 2000), "blocked")
    ev.source = "s" * 5000
    p = slack_payload(ev)
    assert len(p["blocks"][0]["text"]["text"]) <= 150
    for block in p["blocks"]:
        if block["type"] == "section":
            assert len(block.get("fields", [])) <= 10
            for f in block.get("fields", []):
                assert len(f["text"]) <= 2000
            if "text" in block:
                assert len(block["text"]["text"]) <= 3000
    assert "x&lt;y &amp; " in p["blocks"][2]["text"]["text"]  # mrkdwn control characters escaped
    assert len(p["text"]) <= 3000


def test_webhook_payload_v1() -> None:
    ev = from_run(_blocked_result(), "blocked", source="trips", key="r1.c1")
    p = webhook_payload(ev)
    assert p["schema"] == SCHEMA == "wapflow.alert/v1"
    # v1 only ever gains fields: warned_checks, diff and link came with awaiting_review.
    assert set(p) == {
        "schema", "event", "title", "table", "run_id", "branch", "status", "message", "source", "files",
        "failed_checks", "warned_checks", "diff", "link", "samples", "commands", "error", "occurred_at",
        "wapflow_version",
    }  # fmt: skip
    assert (p["warned_checks"], p["diff"], p["link"]) == ([], None, None)
    assert (p["event"], p["table"], p["run_id"], p["branch"], p["status"], p["source"]) == (
        "blocked", "nyc.trips", "r1", "wap_r1", "blocked", "trips"
    )  # fmt: skip
    assert p["failed_checks"] == [
        {"name": "not_null(passenger_count)", "observed": 7, "threshold": "= 0", "failing_rows": 7}
    ]
    assert p["samples"] == [{"trip_id": i, "passenger_count": None} for i in (1, 2, 3)]
    assert p["commands"][0] == "wap report r1" and "wap retry r1" in p["commands"]
    assert p["files"] == ["landing/a.parquet"]
    datetime.fromisoformat(p["occurred_at"])


def test_which_run_outcomes_alert() -> None:
    assert [e.event for e in events_for_run(_blocked_result(), quarantine_rate_above=None)] == ["blocked"]
    terminal = _blocked_result(status="failed", error={"kind": "input", "message": "bad", "retryable": False})
    assert [e.event for e in events_for_run(terminal, quarantine_rate_above=None)] == ["failed"]
    transient = _blocked_result(status="failed", error={"kind": "transient", "message": "x", "retryable": True})
    assert events_for_run(transient, quarantine_rate_above=None) == []  # the caller retries it
    published = _blocked_result(status="published", checks=[], rows_written=90, quarantined_rows=10)
    assert events_for_run(published, quarantine_rate_above=0.1) == []  # 10 % is not above 10 %
    (ev,) = events_for_run(published, quarantine_rate_above=0.05)
    assert ev.event == "quarantine_rate" and ev.failed_checks[-1].observed == 0.1
    assert ev.failed_checks[-1].threshold == "<= 0.05" and "10 of 100 row(s) quarantined" in ev.message
    assert "(10.00%), above 5.00%" in ev.message


def test_alert_texts_print_figures_with_the_one_formatter_and_the_json_keeps_the_values() -> None:
    """Counts grouped (12,001, not 12001.0 or 1.2e+04), ratios to 4 significant digits, in Slack's text and the
    quarantine message; the webhook's JSON carries the values as measured."""
    checks = [
        {"name": "row_count", "check": "row_count", "status": "failed", "observed": 12001.0, "threshold": ">= 20000"},
        {"name": "volume", "check": "volume", "status": "failed", "observed": 0.16666666666, "threshold": ">= 0.5"},
        {"name": "not_null(x)", "check": "not_null", "status": "failed", "observed": 123456, "threshold": "= 0",
         "failing_rows": 123456},
    ]  # fmt: skip
    ev = from_run(_blocked_result(checks=checks), "blocked")
    texts = [b["text"]["text"] for b in slack_payload(ev)["blocks"] if "text" in b and "text" in b["text"]]
    text = next(t for t in texts if t.startswith("*Failed checks*"))
    assert "`row_count`: observed *12,001*, threshold &gt;= 20000" in text
    assert "`volume`: observed *0.1667*" in text
    assert "observed *123,456*, threshold = 0 (123,456 failing row(s))" in text
    body = webhook_payload(ev)
    assert [c["observed"] for c in body["failed_checks"]] == [12001.0, 0.16666666666, 123456]
    big = _blocked_result(status="published", checks=[], rows_written=1_000_000, quarantined_rows=234_567)
    (q,) = events_for_run(big, quarantine_rate_above=0.05)
    assert q.message.startswith("234,567 of 1,234,567 row(s) quarantined (19.00%), above 5.00%"), q.message


# --- delivery ----------------------------------------------------------------------------------


def test_200_is_sent_once(receiver: Receiver) -> None:
    body = {"text": "hello"}
    assert post(receiver.url, body, timeout=1, max_attempts=3) == ("sent", 1, 200, None)
    assert receiver.bodies == [body]


def test_429_waits_retry_after_then_sends(receiver: Receiver) -> None:
    receiver.plan = ["429"]
    t0 = time.monotonic()
    status, attempts, http, _ = post(receiver.url, {"text": "x"}, timeout=1, max_attempts=3)
    assert (status, attempts, http, receiver.count) == ("sent", 2, 200, 2)
    gap = receiver.times[1] - receiver.times[0]
    assert 0.9 <= gap < 2.5 and time.monotonic() - t0 < 3


def test_500_retries_with_backoff_then_fails_and_is_recorded(receiver: Receiver, tmp_path: Path) -> None:
    receiver.default = "500"
    waits: list[float] = []
    store = _store(tmp_path)
    cfg = _alerts(("ops", "webhook", "WAP_TEST_HOOK"), max_attempts=3)
    ev = from_run(_blocked_result(), "blocked")
    (d,) = dispatch(cfg, store.engine, ev, env={"WAP_TEST_HOOK": receiver.url}, sleep=waits.append)
    assert (d.status, d.attempts, d.http_status, d.error) == ("failed", 3, 500, "HTTP 500: internal_error")
    assert receiver.count == 3 and waits == [0.5, 1.0]
    (row,) = recent_alerts(store)
    assert {k: row[k] for k in ("run_id", "event", "sink", "table_name", "status", "attempts", "http_status")} == {
        "run_id": "r1", "event": "blocked", "sink": "ops", "table_name": "nyc.trips", "status": "failed",
        "attempts": 3, "http_status": 500,
    }  # fmt: skip
    assert row["sent_at"] is None and row["error"] == "HTTP 500: internal_error"
    assert SECRET not in json.dumps(row) and "127.0.0.1" not in json.dumps(row)


def test_a_hanging_sink_costs_its_timeout_per_attempt(receiver: Receiver) -> None:
    receiver.default = "hang"
    t0 = time.monotonic()
    status, attempts, http, error = post(receiver.url, {"text": "x"}, timeout=0.5, max_attempts=2)
    took = time.monotonic() - t0
    assert (status, attempts, http) == ("failed", 2, None) and receiver.count == 2
    assert error is not None and error.startswith("no answer within 0.5s")
    assert took < 0.5 * 2 + 0.5 + 1.0  # two timeouts, one backoff, and slack for a slow machine


def test_404_is_not_retried(receiver: Receiver) -> None:
    receiver.default = "404"
    assert post(receiver.url, {"text": "x"}, timeout=1, max_attempts=3) == ("failed", 1, 404, "HTTP 404: no_service")
    assert receiver.count == 1


def test_nothing_listening_fails_without_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}/services/{SECRET}"
    status, attempts, http, error = post(url, {"text": "x"}, timeout=1, max_attempts=2, sleep=lambda _: None)
    assert (status, attempts, http) == ("failed", 2, None)
    assert error and error.startswith("ConnectError") and SECRET not in error


def test_the_same_occurrence_is_sent_at_most_once(receiver: Receiver, tmp_path: Path) -> None:
    store = _store(tmp_path)
    cfg = _alerts(("team", "slack", "WAP_TEST_SLACK"), ("ops", "webhook", "WAP_TEST_HOOK"))
    env = {"WAP_TEST_SLACK": receiver.url, "WAP_TEST_HOOK": receiver.url}
    first = dispatch(cfg, store.engine, from_run(_blocked_result(), "blocked"), env=env)
    again = dispatch(cfg, store.engine, from_run(_blocked_result(), "blocked"), env=env)
    assert [(d.sink, d.status) for d in first] == [("team", "sent"), ("ops", "sent")]
    assert [(d.sink, d.status) for d in again] == [("team", "duplicate"), ("ops", "duplicate")]
    assert receiver.count == 2
    assert "blocks" in receiver.bodies[0] and receiver.bodies[1]["schema"] == SCHEMA
    # Another event of the same run, or another occurrence (a retried batch), is sent.
    other = from_run(_blocked_result(), "blocked", key="r1.c2")
    assert [d.status for d in dispatch(cfg, store.engine, other, env=env)] == ["sent", "sent"]
    rows = recent_alerts(store)
    assert [r["status"] for r in rows] == ["sent"] * 4 and all(r["sent_at"] for r in rows)


def test_events_are_switched_per_sink(receiver: Receiver, tmp_path: Path) -> None:
    cfg = AlertsConfig.model_validate(
        {
            "sinks": {
                "team": {"type": "slack", "url_env": "A", "events": ["failed"]},
                "ops": {"type": "webhook", "url_env": "B"},
            }
        }
    )
    out = dispatch(cfg, _store(tmp_path).engine, from_run(_blocked_result(), "blocked"), env={"B": receiver.url})
    assert [(d.sink, d.status) for d in out] == [("ops", "sent")] and receiver.count == 1


def test_notify_never_raises_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = parse_config({"alerts": {"sinks": {"team": {"type": "slack", "url_env": "WAP_TEST_UNSET"}}}})
    monkeypatch.delenv("WAP_TEST_UNSET", raising=False)
    said: list[str] = []
    store = _store(tmp_path)
    (d,) = notify(cfg, store.engine, [from_run(_blocked_result(), "blocked")], progress=said.append)
    assert d.status == "failed" and d.error == "environment variable WAP_TEST_UNSET is not set"
    assert said == [
        "warning: alert blocked to sink team not delivered after 0 attempt(s): environment variable "
        "WAP_TEST_UNSET is not set"
    ]
    store.engine.dispose()
    (tmp_path / "runs.db").unlink()
    (tmp_path / "runs.db").mkdir()  # the database is gone: a bug-like failure, still no exception
    said.clear()
    assert (
        notify(
            cfg,
            sa.create_engine(f"sqlite:///{tmp_path / 'runs.db'}"),
            [from_run(_blocked_result(), "blocked")],
            progress=said.append,
        )
        == []
    )
    assert len(said) == 1 and said[0].startswith("warning: alert blocked of r1 not sent (a bug in wapflow): ")


def test_ingest_gives_up_after_retries_and_fails_the_file(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outer loop's terminal states alert with the run id and claim as the occurrence (no Spark:
    the ledger is settled from a run result, as the durable workflow's settle step does)."""
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.outer.ingest import Ingest

    cfg = parse_config(
        {
            "lakehouse": {"warehouse": str(tmp_path / "lakehouse")},
            "sources": {"trips": {"table": "nyc.trips", "location": str(tmp_path / "landing"), "max_attempts": 2}},
            "alerts": {"sinks": {"ops": {"type": "webhook", "url_env": "WAP_TEST_HOOK", "timeout": 1}}},
        }
    )
    lh = Lakehouse(cfg)
    ing = Ingest(lh, lh.config.resolve_source("trips"))
    f = FileIdentity(uri=str(tmp_path / "landing" / "a.parquet"), size=10, version="1")
    key = ing.key(f)
    lh.ledger.add("trips", [(key, f)])
    assert lh.ledger.claim([key], "ing_trips_x") == [key]
    rows = lh.ledger.rows(keys=[key])
    error = {"kind": "transient", "message": "catalog unreachable", "retryable": True, "exit_code": 5}
    res = RunResult(run_id="ing_trips_x", table="nyc.trips", status="failed", branch=None, error=error)
    ing.settle(res, rows, retry=False)
    assert [e.event for e in ing.alerts] == ["retries_exhausted", "file_failed"]
    monkeypatch.setenv("WAP_TEST_HOOK", receiver.url)
    ing.flush_alerts()
    assert [b["event"] for b in receiver.bodies] == ["retries_exhausted", "file_failed"]
    body = receiver.bodies[0]
    assert body["message"] == "gave up after 2 attempts: catalog unreachable" and body["status"] == "failed"
    assert body["files"] == [f.uri] and body["source"] == "trips" and "wap retry ing_trips_x" in body["commands"]
    assert Ledger(lh.store.engine).rows(keys=[key])[0].state == "failed"
    assert {r["run_id"] for r in recent_alerts(lh.store)} == {"ing_trips_x"}


def test_kept_branches_alert_once_per_branch(tmp_path: Path) -> None:
    store = _store(tmp_path)
    old = datetime.now(UTC) - timedelta(days=10)
    for run_id, status, kept, started in [
        ("old", "blocked", True, old),
        ("new", "blocked", True, datetime.now(UTC)),
        ("gone", "discarded", False, old),
    ]:
        store.save(RunRecord(run_id=run_id, table_name="nyc.trips", status=status, branch=f"wap_{run_id}",
                             branch_kept=kept, started_at=started))  # fmt: skip
    (ev,) = kept_branch_events(store, 7)
    assert (ev.event, ev.branch, ev.run_id, ev.key) == ("branch_kept", "wap_old", "old", "branch:wap_old")
    assert ev.message.startswith("branch wap_old of blocked run old kept for 10 day(s), more than 7")
    assert kept_branch_events(store, 11) == []


# --- config and CLI ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sink", "expected"),
    [
        ({"type": "slack", "url_env": "X", "events": ["blockd"]}, "unknown event 'blockd' (did you mean 'blocked'?)"),
        ({"type": "slak", "url_env": "X"}, "unknown sink type 'slak' (did you mean 'slack'?)"),
        ({"type": "slack", "url_env": "X", "evnts": []}, "unknown key 'evnts' (did you mean 'events'?)"),
        ({"type": "slack", "url_env": f"https://hooks.slack.com/{SECRET}"}, "a value not shown, as it is a secret"),
    ],
)
def test_config_errors(sink: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config({"alerts": {"sinks": {"team": sink}}})
    assert expected in str(e.value) and "[alerts.sinks.team]" in str(e.value)
    assert SECRET not in str(e.value) and e.value.exit_code == 2


def _cli_config(tmp_path: Path, sinks: str, extra: str = "") -> Path:
    return write_config(tmp_path, tables=f"[alerts]\n{extra}\n{sinks}")


def test_cli_alerts_test_list_and_check(receiver: Receiver, tmp_path: Path) -> None:
    cfg = _cli_config(
        tmp_path,
        '[alerts.sinks.team]\ntype = "slack"\nurl_env = "WAP_TEST_SLACK"\n\n'
        '[alerts.sinks.ops]\ntype = "webhook"\nurl_env = "WAP_TEST_HOOK"\ntimeout = 1\nmax_attempts = 2\n',
        extra="branch_kept_days = 3",
    )
    missing = wap("alerts", "test", "-c", str(cfg), WAP_TEST_SLACK=receiver.url)
    assert missing.code == 2 and "WAP_TEST_HOOK is not set" in missing.text and receiver.count == 0

    receiver.plan = ["200", "500", "500"]
    p = wap("alerts", "test", "-c", str(cfg), WAP_TEST_SLACK=receiver.url, WAP_TEST_HOOK=receiver.url)
    assert p.code == 3, p.text
    assert "sink team (slack): sent (HTTP 200, 1 attempt(s))" in p.stdout
    assert "sink ops (webhook): failed (HTTP 500, 2 attempt(s)): HTTP 500: internal_error" in p.stdout
    assert receiver.count == 3 and receiver.bodies[0]["blocks"][0]["text"]["text"] == "Test alert: nyc.trips"

    ok = wap("alerts", "test", "--sink", "team", "-c", str(cfg), "--json", WAP_TEST_SLACK=receiver.url)
    assert ok.code == 0 and [d["status"] for d in ok.doc["deliveries"]] == ["sent"]

    listed = wap("alerts", "list", "-c", str(cfg), "--json")
    assert [(a["sink"], a["status"]) for a in listed.doc["alerts"]] == [
        ("team", "sent"),
        ("ops", "failed"),
        ("team", "sent"),
    ]

    store = RunStore(f"sqlite:///{tmp_path / 'lakehouse' / 'wapflow_runs.db'}")
    store.save(RunRecord(run_id="r9", table_name="nyc.trips", status="blocked", branch="wap_r9", branch_kept=True,
                         started_at=datetime.now(UTC) - timedelta(days=5)))  # fmt: skip
    env = {"WAP_TEST_SLACK": receiver.url, "WAP_TEST_HOOK": receiver.url}
    first = wap("alerts", "check", "-c", str(cfg), "--json", **env)
    again = wap("alerts", "check", "-c", str(cfg), "--json", **env)
    assert first.code == again.code == 0
    assert [b["branch"] for b in first.doc["kept"]] == ["wap_r9"]
    assert [d["status"] for d in first.doc["deliveries"]] == ["sent", "sent"]
    assert [d["status"] for d in again.doc["deliveries"]] == ["duplicate", "duplicate"]
    assert receiver.count == 6 and receiver.bodies[-1]["event"] == "branch_kept"

    for proc in (missing, p, ok, listed, first, again):
        assert SECRET not in proc.text and receiver.url not in proc.text
    unknown = wap("alerts", "test", "--sink", "tem", "-c", str(cfg), **env)
    assert unknown.code == 2 and "did you mean 'team'" in unknown.text


# --- with Spark: real runs, the CLI in-process on the shared session ---------------------------


def test_killed_after_the_claim_the_alert_is_not_sent_twice(receiver: Receiver, tmp_path: Path) -> None:
    """SIGKILL between claiming the delivery row and sending: the row stays pending, and the next check
    sends nothing for it (at most once: perhaps sent, never twice)."""
    cfg = _cli_config(
        tmp_path, '[alerts.sinks.ops]\ntype = "webhook"\nurl_env = "WAP_TEST_HOOK"\n', "branch_kept_days = 1"
    )
    store = RunStore(f"sqlite:///{tmp_path / 'lakehouse' / 'wapflow_runs.db'}")
    store.save(RunRecord(run_id="r7", table_name="nyc.trips", status="blocked", branch="wap_r7", branch_kept=True,
                         started_at=datetime.now(UTC) - timedelta(days=2)))  # fmt: skip
    killed = wap("alerts", "check", "-c", str(cfg), WAP_TEST_HOOK=receiver.url, WAP_CRASH_AT="alert:claimed")
    assert killed.code == -9 and receiver.count == 0
    (row,) = recent_alerts(store)
    assert (row["event"], row["status"], row["run_id"]) == ("branch_kept", "pending", "r7")
    again = wap("alerts", "check", "-c", str(cfg), "--json", WAP_TEST_HOOK=receiver.url)
    assert again.code == 0 and [d["status"] for d in again.doc["deliveries"]] == ["duplicate"]
    assert receiver.count == 0 and [r["status"] for r in recent_alerts(store)] == ["pending"]


# --- failed deliveries sent again ----------------------------------------------------------------


def test_a_delivery_that_failed_is_sent_again_once_the_sink_is_back(receiver: Receiver, tmp_path: Path) -> None:
    """A sink down (HTTP 500) while a run was blocked: the alert is sent again later, the same body, once; a
    second pass sends nothing; a sink that still fails is tried once per pass for all its rows."""
    from wapflow.alerts.deliver import resend
    from wapflow.runs.alerts import AlertLog

    store = _store(tmp_path)
    cfg = _alerts(("ops", "webhook", "WAP_TEST_HOOK"), max_attempts=2)
    env = {"WAP_TEST_HOOK": receiver.url}
    receiver.default = "500"
    for run in ("r1", "r2"):
        (d,) = dispatch(cfg, store.engine, from_run(_blocked_result(run_id=run), "blocked"), env=env, sleep=lambda _: 0)
        assert d.status == "failed"
    assert receiver.count == 4
    since = datetime.now(UTC) - timedelta(hours=1)
    again = resend(cfg, store.engine, since, env=env, sleep=lambda _: None)  # still down: r1 tried, r2 not
    assert [(d.status, d.attempts) for d in again] == [("failed", 4)] and receiver.count == 6

    receiver.default = "200"
    sent = resend(cfg, store.engine, since, env=env, sleep=lambda _: None)
    assert [(d.event, d.status) for d in sent] == [("blocked", "sent"), ("blocked", "sent")]
    assert receiver.bodies[-2] == receiver.bodies[0] and receiver.bodies[-1]["run_id"] == "r2"
    assert resend(cfg, store.engine, since, env=env) == [] and receiver.count == 8
    rows = {r["run_id"]: r for r in recent_alerts(store)}
    assert (rows["r1"]["status"], rows["r1"]["attempts"]) == ("sent", 5) and rows["r1"]["sent_at"] is not None
    assert resend(cfg, store.engine, datetime.now(UTC) + timedelta(seconds=1), env=env) == []  # outside the window
    assert AlertLog(store.engine).retake(1) is False  # sent: nothing to take back


def test_an_alert_that_may_have_arrived_is_never_sent_again(receiver: Receiver, tmp_path: Path) -> None:
    """At most once: a sink that answered nothing in time may have taken it; a 'pending' row (a process killed
    between claim and send) may have sent it. Neither is resent; nor a sink gone from wap.toml; and two resends
    at once take a row once."""
    from wapflow.alerts.deliver import resend
    from wapflow.runs.alerts import AlertLog

    store = _store(tmp_path)
    cfg = _alerts(("ops", "webhook", "WAP_TEST_HOOK"), max_attempts=1)
    env = {"WAP_TEST_HOOK": receiver.url}
    receiver.default, receiver.hang_seconds = "hang", 2.0
    (hung,) = dispatch(cfg, store.engine, from_run(_blocked_result(), "blocked"), env=env)
    assert hung.status == "failed" and hung.error is not None and hung.error.startswith("no answer within")
    log = AlertLog(store.engine)
    log.claim(key="r9", run_id="r9", event="blocked", sink="ops", table="nyc.trips", message="m", event_json="{}")
    receiver.default = "500"
    gone = _alerts(("team", "webhook", "WAP_TEST_HOOK"))
    (d,) = dispatch(gone, store.engine, from_run(_blocked_result(run_id="r3"), "blocked"), env=env)
    assert d.status == "failed"
    receiver.default = "200"
    before = receiver.count
    since = datetime.now(UTC) - timedelta(hours=1)
    assert resend(cfg, store.engine, since, env=env) == [] and receiver.count == before
    [row] = [r for r in log.failed_since(since, 10) if r["sink"] == "team"]
    assert log.retake(row["id"]) is True and log.retake(row["id"]) is False  # one of two resends wins


def test_cli_alerts_resend(receiver: Receiver, tmp_path: Path) -> None:
    cfg = _cli_config(
        tmp_path, '[alerts.sinks.ops]\ntype = "webhook"\nurl_env = "WAP_TEST_HOOK"\ntimeout = 1\nmax_attempts = 1\n'
    )
    store = RunStore(f"sqlite:///{tmp_path / 'lakehouse' / 'wapflow_runs.db'}")
    receiver.default = "500"
    config = parse_config(
        {"alerts": {"sinks": {"ops": {"type": "webhook", "url_env": "WAP_TEST_HOOK", "max_attempts": 1}}}}
    )
    dispatch(config.alerts, store.engine, from_run(_blocked_result(), "blocked"), env={"WAP_TEST_HOOK": receiver.url})
    bad = wap("alerts", "resend", "--within", "soon", "-c", str(cfg), WAP_TEST_HOOK=receiver.url)
    assert bad.code == 2 and "--within 'soon'" in bad.text and "Traceback" not in bad.text, bad.text
    still = wap("alerts", "resend", "-c", str(cfg), WAP_TEST_HOOK=receiver.url)
    assert still.code == 3 and "blocked to sink ops: failed (2 attempt(s) in all): HTTP 500" in still.stdout, still.text
    receiver.default = "200"
    p = wap("alerts", "resend", "--within", "6h", "-c", str(cfg), "--json", WAP_TEST_HOOK=receiver.url)
    assert p.code == 0 and [(d["sink"], d["status"]) for d in p.doc["deliveries"]] == [("ops", "sent")], p.text
    none = wap("alerts", "resend", "-c", str(cfg), WAP_TEST_HOOK=receiver.url)
    assert none.code == 0 and "no failed delivery within 1d to send again" in none.stdout
    assert SECRET not in p.text + still.text + none.text
