"""[lineage] without Spark: wap.toml validation, the run id -> OpenLineage run UUID mapping, the events as the
openlineage-python client serializes them, and sending to a file or to a port nobody listens on (the Spark
runs and the HTTP receiver are tests/spark/test_lineage.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from wapflow.config import parse_config
from wapflow.errors import ConfigError
from wapflow.pipeline.lineage import build_event, emit, file_dataset, run_uuid
from wapflow.runs.store import RunRecord

CHECKS = [
    {"name": "not_null(passenger_count)", "check": "not_null", "severity": "error", "status": "failed",
     "observed": 12, "failing_rows": 12, "threshold": "= 0", "columns": ["passenger_count"]},
    {"name": "row_count(min=1)", "check": "row_count", "severity": "error", "status": "passed",
     "observed": 40, "failing_rows": 0, "threshold": ">= 1", "columns": []},
    {"name": "between(fare, 0, 100)", "check": "between", "severity": "warn", "status": "warned",
     "observed": 2, "failing_rows": 2, "threshold": "[0, 100]", "columns": ["fare"]},
]  # fmt: skip


def _cfg(tmp_path: Path, lineage: dict[str, Any]) -> Any:
    cfg = parse_config({"lakehouse": {"warehouse": str(tmp_path / "lake")}, "lineage": lineage})
    cfg.base_dir = tmp_path
    return cfg


def _problem(lineage: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config({"lineage": lineage})
    return str(e.value)


def test_config_names_what_is_wrong() -> None:
    assert "unknown lineage transport 'htp' (did you mean 'http'?); known: http, file" in _problem(
        {"transport": "htp", "url": "http://x"}
    )
    assert "needs exactly one of url or url_env" in _problem({"transport": "http"})
    assert "needs exactly one of url or url_env" in _problem(
        {"transport": "http", "url": "http://x", "url_env": "OL_URL"}
    )
    assert "url must be an http:// or https:// URL" in _problem({"transport": "http", "url": "localhost:5000"})
    assert "needs path" in _problem({"transport": "file"})
    assert 'url, api_key_env: keys of transport = "http", not "file"' in _problem(
        {"transport": "file", "path": "e.jsonl", "url": "http://x", "api_key_env": "K"}
    )
    assert "unknown key 'timout' (did you mean 'timeout'?)" in _problem(
        {"transport": "http", "url": "http://x", "timout": 3}
    )
    assert "lineage.timeout" in _problem({"transport": "http", "url": "http://x", "timeout": 0})
    assert "lineage.url_env" in _problem({"transport": "http", "url_env": "not a name"})
    ok = parse_config({"lineage": {"transport": "http", "url": "http://127.0.0.1:5000"}}).lineage
    assert ok is not None and (ok.namespace, ok.endpoint, ok.timeout, ok.max_attempts) == (
        "wapflow",
        "api/v1/lineage",
        5.0,
        2,
    )
    assert parse_config({}).lineage is None


def test_a_url_in_a_config_error_is_not_shown() -> None:
    secret = "https://user:s3cret@ol.example/"
    text = _problem({"transport": "http", "url": secret, "timeout": -1})
    assert "s3cret" not in text


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_lineage_without_the_client_installed_is_a_config_error(tmp_path: Path) -> None:
    toml = tmp_path / "wap.toml"
    toml.write_text('[lineage]\ntransport = "file"\npath = "events.jsonl"\n')
    plain = tmp_path / "plain.toml"
    plain.write_text('[lakehouse]\nwarehouse = "lake"\n')
    p = _python(
        f"""
        import sys
        sys.modules["openlineage"] = None  # as if the `lineage` extra were not installed
        from wapflow.config import load_config
        from wapflow.errors import ConfigError
        print(load_config({str(plain)!r}).lineage)
        try:
            load_config({str(toml)!r})
        except ConfigError as e:
            print("ConfigError", e.exit_code, e)
        """
    )
    assert p.returncode == 0, p.stderr
    first, *rest = p.stdout.splitlines()
    assert first == "None"  # no [lineage]: the package is not needed
    err = "\n".join(rest)
    assert err.startswith(f"ConfigError {ConfigError.exit_code}")
    assert "needs the openlineage-python package" in err and "pip install 'wapflow[lineage]'" in err


def test_run_uuid_is_stable_and_distinct() -> None:
    a = run_uuid("20260101t000000_abc123")
    assert uuid.UUID(a).version == 5 and a == run_uuid("20260101t000000_abc123")
    assert a != run_uuid("20260101t000000_abc124")
    # Another process (a resumed run) derives the same one. The mapping is the documented one
    # (docs/guides/lineage.md), so anyone can find a run's events from its id; a changed mapping would give
    # every run already sent a new identity in the receivers.
    p = _python("from wapflow.pipeline.lineage import run_uuid; print(run_uuid('20260101t000000_abc123'))")
    namespace = uuid.uuid5(uuid.NAMESPACE_URL, "https://pypi.org/project/wapflow/openlineage-run")
    assert p.stdout.strip() == a == str(uuid.uuid5(namespace, "20260101t000000_abc123"))


def test_input_files_are_named_as_openlineage_names_them(tmp_path: Path) -> None:
    assert file_dataset("s3://landing/trips/2026/a.parquet") == ("s3://landing", "trips/2026/a.parquet")
    assert file_dataset("s3a://landing/a.csv") == ("s3://landing", "a.csv")
    assert file_dataset("file:///data/in/a.parquet") == ("file", "/data/in/a.parquet")
    assert file_dataset(str(tmp_path / "a.parquet")) == ("file", str(tmp_path / "a.parquet"))


def _event(cfg: Any, kind: Any, rec: RunRecord) -> dict[str, Any]:
    from openlineage.client.serde import Serde

    doc: dict[str, Any] = json.loads(Serde.to_json(build_event(cfg, kind, rec)))
    return doc


def test_events_carry_the_run_the_files_the_table_and_the_checks(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, {"transport": "file", "path": "ol.jsonl", "namespace": "etl"})
    files = ["s3://landing/a.parquet", str(tmp_path / "b.parquet")]
    rec = RunRecord("r1", "nyc.trips", "blocked", files=files, checks=CHECKS, snapshot_id=77)
    fail = _event(cfg, "FAIL", rec)
    assert (fail["eventType"], fail["run"]["runId"], fail["job"]) == (
        "FAIL",
        run_uuid("r1"),
        {"namespace": "etl", "name": "nyc.trips", "facets": {}},
    )
    assert [(i["namespace"], i["name"]) for i in fail["inputs"]] == [
        ("s3://landing", "a.parquet"),
        ("file", str(tmp_path / "b.parquet")),
    ]
    (out,) = fail["outputs"]
    assert (out["namespace"], out["name"]) == ((tmp_path / "lake").as_uri(), "nyc.trips")
    assert "version" not in out["facets"]  # nothing was published
    got = {a["name"]: a for a in out["facets"]["dataQualityAssertions"]["assertions"]}
    assert got["not_null(passenger_count)"] == {
        "assertion": "not_null",
        "name": "not_null(passenger_count)",
        "success": False,
        "column": "passenger_count",
        "severity": "error",
        "expected": "= 0",
        "actual": "12",
        "params": {},
    }
    assert got["row_count(min=1)"]["success"] is True and "column" not in got["row_count(min=1)"]
    assert (got["between(fare, 0, 100)"]["success"], got["between(fare, 0, 100)"]["severity"]) == (False, "warn")
    assert fail["run"]["facets"]["errorMessage"]["message"] == (
        "blocked by its audit: failed checks not_null(passenger_count)"
    )

    published = RunRecord("r2", "nyc.trips", "published", files=files, checks=CHECKS[1:2], snapshot_id=77)
    complete = _event(cfg, "COMPLETE", published)
    assert complete["outputs"][0]["facets"]["version"]["datasetVersion"] == "77"
    assert "errorMessage" not in complete["run"]["facets"]
    start = _event(cfg, "START", published)
    assert start["outputs"][0]["facets"] == {}  # no verdicts before the audit

    failed = RunRecord("r3", "nyc.trips", "failed", error={"message": "file b.parquet is not Parquet"})
    assert _event(cfg, "FAIL", failed)["run"]["facets"]["errorMessage"]["message"] == "file b.parquet is not Parquet"


def test_the_file_transport_appends_one_json_line_per_event(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, {"transport": "file", "path": "out/ol.jsonl"})
    rec = RunRecord("r1", "nyc.trips", "published", files=[str(tmp_path / "a.parquet")], snapshot_id=5)
    said: list[str] = []
    assert emit(cfg, "START", rec, progress=said.append) and emit(cfg, "COMPLETE", rec, progress=said.append)
    lines = (tmp_path / "out" / "ol.jsonl").read_text().splitlines()
    assert [json.loads(x)["eventType"] for x in lines] == ["START", "COMPLETE"] and said == []


def test_a_receiver_nobody_listens_on_costs_one_warning_and_no_secret(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = _cfg(
        tmp_path,
        {"transport": "http", "url_env": "T_OL_URL", "api_key_env": "T_OL_KEY", "timeout": 1, "max_attempts": 1},
    )
    env = {"T_OL_URL": f"http://127.0.0.1:{port}/hook/tok3n-path", "T_OL_KEY": "k3y-value"}
    said: list[str] = []
    assert not emit(cfg, "START", RunRecord("r1", "nyc.trips", "running"), progress=said.append, env=env)
    (line,) = said
    assert line.startswith("warning: lineage event START of run r1 not sent to the http receiver: ")
    assert "tok3n" not in line and "k3y-value" not in line
    missing: list[str] = []
    assert not emit(cfg, "START", RunRecord("r1", "nyc.trips", "running"), progress=missing.append, env={})
    assert "environment variable T_OL_URL (the receiver's URL) is not set" in missing[0]


def test_events_a_receiver_missed_are_kept_and_sent_again_in_order(tmp_path: Path, receiver: Any) -> None:
    """A receiver answering 500: each event is kept in the run store's outbox; a pass while it is still down
    stops at the first; once it answers, the same events (the same JSON) arrive oldest first, with the API key,
    and nothing is left to send."""
    from wapflow.pipeline.lineage import resend

    cfg = _cfg(
        tmp_path,
        {"transport": "http", "url_env": "T_OL_URL", "api_key_env": "T_OL_KEY", "timeout": 1, "max_attempts": 1},
    )
    env = {"T_OL_URL": receiver.base_url, "T_OL_KEY": "k3y-value"}
    receiver.default = "500"
    rec = RunRecord("r1", "nyc.trips", "published", snapshot_id=5)
    said: list[str] = []
    assert not emit(cfg, "START", rec, progress=said.append, env=env)
    assert not emit(cfg, "COMPLETE", rec, progress=said.append, env=env)
    assert len(said) == 2 and all(s.endswith("; kept to be sent again (wap lineage resend)") for s in said), said
    refused = list(receiver.bodies)
    assert [b["eventType"] for b in refused] == ["START", "COMPLETE"]

    down: list[str] = []
    assert resend(cfg, progress=down.append, env=env) == (0, 2) and receiver.count == 3  # stopped at the first
    assert "still not sent (2 waiting)" in down[0] and "k3y-value" not in down[0]
    receiver.default = "200"
    up: list[str] = []
    assert resend(cfg, progress=up.append, env=env) == (2, 0)
    assert receiver.bodies[3:] == refused and receiver.auth[-1] == "Bearer k3y-value"
    assert up == ["2 missed lineage event(s) sent"]
    assert resend(cfg, progress=up.append, env=env) == (0, 0) and receiver.count == 5


def test_events_missed_over_30_days_ago_are_dropped_and_said(tmp_path: Path, receiver: Any) -> None:
    """The outbox does not grow without end behind a receiver that is gone: a pass drops what was missed over
    30 days ago (or over its own longer --within ago), says how many, and sends the rest, oldest first."""
    from datetime import UTC, datetime, timedelta

    import sqlalchemy as sa

    from wapflow.pipeline.lineage import resend
    from wapflow.runs.outbox import outbox_table

    cfg = _cfg(tmp_path, {"transport": "http", "url_env": "T_OL_URL", "timeout": 1, "max_attempts": 1})
    env = {"T_OL_URL": receiver.base_url}
    engine = sa.create_engine(cfg.run_store_url())

    def missed(ages: dict[str, timedelta]) -> list[str]:
        """START events of these runs missed by a receiver answering 500, `age` ago; their run ids as sent."""
        receiver.default = "500"
        before = len(receiver.bodies)
        for run in ages:
            assert not emit(cfg, "START", RunRecord(run, "nyc.trips", "running"), progress=lambda _: None, env=env)
        now = datetime.now(UTC)
        with engine.begin() as conn:
            for run, age in ages.items():
                conn.execute(outbox_table.update().where(outbox_table.c.run_id == run).values(created_at=now - age))
        receiver.default = "200"
        return [b["run"]["runId"] for b in receiver.bodies[before:]]

    def sent_since(n: int) -> list[str]:
        return [b["run"]["runId"] for b in receiver.bodies[n:]]

    old, older, new = missed({"old": timedelta(days=31), "older": timedelta(days=45), "new": timedelta(hours=1)})
    said: list[str] = []
    n = len(receiver.bodies)
    # A pass reaching back 40 days sends the 31-day-old event with the new one; the 45-day-old one is dropped.
    assert resend(cfg, timedelta(days=40), progress=said.append, env=env) == (2, 0)
    assert said[0] == "warning: 1 lineage event(s) missed over 40d ago dropped, never sent", said
    assert sent_since(n) == [old, new]

    # At the default (7 days back), what is over 30 days old is dropped; between 7 and 30 days old is kept.
    (stale, kept) = missed({"stale": timedelta(days=31), "kept": timedelta(days=8)})
    said.clear()
    n = len(receiver.bodies)
    assert resend(cfg, progress=said.append, env=env) == (0, 0) and sent_since(n) == []
    assert said[0] == "warning: 1 lineage event(s) missed over 30d ago dropped, never sent", said
    with engine.connect() as conn:
        assert [r[0] for r in conn.execute(sa.select(outbox_table.c.run_id))] == ["kept"]
    assert resend(cfg, timedelta(days=9), progress=said.append, env=env) == (1, 0) and sent_since(n) == [kept]
    assert older not in sent_since(0)[3:] and stale not in sent_since(n)
    engine.dispose()


def test_cli_lineage_resend(tmp_path: Path, receiver: Any) -> None:
    from support.cli_harness import wap, write_config
    from wapflow.config import load_config

    path = write_config(tmp_path, tables='[lineage]\ntransport = "http"\nurl_env = "T_OL_URL"\nmax_attempts = 1\n')
    cfg = load_config(str(path))
    receiver.default = "500"
    assert not emit(
        cfg, "START", RunRecord("r1", "nyc.trips", "running"), progress=print, env={"T_OL_URL": receiver.base_url}
    )
    still = wap("lineage", "resend", "-c", str(path), T_OL_URL=receiver.base_url)
    assert still.code == 3 and "still not sent (1 waiting)" in still.stdout, still.text
    receiver.default = "200"
    done = wap("lineage", "resend", "--within", "1d", "-c", str(path), "--json", T_OL_URL=receiver.base_url)
    assert done.code == 0 and (done.doc["sent"], done.doc["waiting"]) == (1, 0), done.text
    none = wap("lineage", "resend", "-c", str(path), T_OL_URL=receiver.base_url)
    assert none.code == 0 and "no missed lineage event within 7d" in none.stdout, none.text
    bare = write_config(tmp_path / "bare")
    assert wap("lineage", "resend", "-c", str(bare)).code == 2
