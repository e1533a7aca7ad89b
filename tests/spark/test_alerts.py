"""Alerts with real Spark: a blocked run, a broken sink that changes nothing, a failed file of an ingest
(the pure-Python alert tests are tests/unit/test_alerts.py).

Only Slack is replaced: by `Receiver` (tests/support/receiver.py), a threaded http.server on 127.0.0.1."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from support.receiver import SECRET, Receiver
from wapflow.runs.store import RunStore
from wapflow.service.alerts import recent_alerts

NOT_NULL = '{ check = "not_null", column = "passenger_count" }'


def _lake_config(tmp_path: Path, catalog: str, table: str, alerts: str) -> Path:
    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{tmp_path / "lakehouse"}"\ncatalog_name = "{catalog}"\nmaster = "local[2]"\n\n'
        f'[tables."nyc.trips"]\n{table}\n\n{alerts}'
    )
    return cfg


def _invoke(*args: str, **env: str) -> Any:
    from typer.testing import CliRunner

    from wapflow.cli import app

    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture
def second_receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.mark.spark
def test_a_blocked_run_alerts_slack_and_a_hanging_sink_changes_nothing(
    spark: Any, tmp_path: Path, landing: Path, receiver: Receiver, second_receiver: Receiver
) -> None:
    from support.cli_harness import Reader
    from support.data import trips_file

    second_receiver.default = "hang"
    cfg = _lake_config(
        tmp_path,
        "alerts_blk",
        f"checks = [{NOT_NULL}]",
        '[alerts.sinks.team]\ntype = "slack"\nurl_env = "WAP_T_SLACK"\n\n'
        '[alerts.sinks.ops]\ntype = "webhook"\nurl_env = "WAP_T_HOOK"\ntimeout = 1\nmax_attempts = 2\n',
    )
    env = {"WAP_T_SLACK": receiver.url, "WAP_T_HOOK": second_receiver.url}
    clean = _invoke("run", "nyc.trips", str(trips_file(landing, "clean.parquet", 50)), "-c", str(cfg), "--json", **env)
    assert clean.exit_code == 0, clean.output
    first = json.loads(clean.stdout)["snapshot_id"]
    assert receiver.count == second_receiver.count == 0  # a published run sends nothing

    dirty = trips_file(landing, "dirty.parquet", 50, null_rate=0.2, start_id=1000)
    t0 = time.monotonic()
    r = _invoke("run", "nyc.trips", str(dirty), "-c", str(cfg), "--json", **env)
    took = time.monotonic() - t0
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "blocked" and doc["exit_code"] == 1
    assert Reader(tmp_path, "alerts_blk").main("nyc.trips") == first  # main untouched

    (slack,) = receiver.bodies
    (check,) = [c for c in doc["checks"] if c["status"] == "failed"]
    fields = [f["text"] for f in slack["blocks"][1]["fields"]]
    assert fields[:4] == [
        "*Table*\nnyc.trips",
        f"*Run*\n{doc['run_id']}",
        f"*Branch*\n{doc['branch']}",
        "*Status*\nblocked",
    ]
    assert slack["blocks"][3]["text"]["text"] == (
        f"*Failed checks*\n• `not_null(passenger_count)`: observed *{check['observed']}*, threshold "
        f"{check['threshold'] or '-'} ({check['failing_rows']} failing row(s))"
    )
    assert '"passenger_count": null' in slack["blocks"][4]["text"]["text"]
    assert f"wap report {doc['run_id']}" in slack["blocks"][5]["text"]["text"]
    # The hanging sink: two attempts of one second, recorded failed; the run's outcome is as it was.
    assert second_receiver.count == 2 and took < 60
    rows = {r["sink"]: r for r in recent_alerts(RunStore(f"sqlite:///{tmp_path / 'lakehouse' / 'wapflow_runs.db'}"))}
    assert (rows["team"]["status"], rows["team"]["http_status"]) == ("sent", 200)
    assert (rows["ops"]["status"], rows["ops"]["attempts"]) == ("failed", 2)
    assert rows["ops"]["error"].startswith("no answer within 1s")
    assert SECRET not in r.output and SECRET not in json.dumps(list(rows.values()))

    again = _invoke("run", "nyc.trips", str(dirty), "-c", str(cfg), "--run-id", doc["run_id"], "--json", **env)
    assert again.exit_code == 1 and receiver.count == 1  # the same run again: no second alert


@pytest.mark.spark
def test_a_sink_that_fails_never_undoes_a_publish(
    spark: Any, tmp_path: Path, landing: Path, receiver: Receiver
) -> None:
    """A published run above the quarantine threshold alerts; the sink answers 500: still published."""
    from support.cli_harness import Reader
    from support.data import trips_file

    receiver.default = "500"
    cfg = _lake_config(
        tmp_path,
        "alerts_pub",
        f'checks = [{NOT_NULL}]\non_row_failure = "quarantine"',
        '[alerts]\nquarantine_rate_above = 0.05\n\n[alerts.sinks.ops]\ntype = "webhook"\nurl_env = "WAP_T_HOOK"\n'
        "timeout = 1\nmax_attempts = 2\n",
    )
    f = trips_file(landing, "some-nulls.parquet", 100, null_rate=0.2)
    r = _invoke("run", "nyc.trips", str(f), "-c", str(cfg), "--json", WAP_T_HOOK=receiver.url)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "published" and doc["quarantined_rows"] > 5
    assert Reader(tmp_path, "alerts_pub").main("nyc.trips") == doc["snapshot_id"]
    assert receiver.count == 2 and {b["event"] for b in receiver.bodies} == {"quarantine_rate"}
    (q,) = [c for c in receiver.bodies[0]["failed_checks"] if c["name"] == "quarantine_rate"]
    assert q["threshold"] == "<= 0.05" and q["observed"] == pytest.approx(doc["quarantined_rows"] / 100)
    store = RunStore(f"sqlite:///{tmp_path / 'lakehouse' / 'wapflow_runs.db'}")
    rec = store.get(doc["run_id"])
    assert rec is not None and rec.status == "published"
    (row,) = recent_alerts(store)
    assert (row["event"], row["status"], row["attempts"], row["http_status"]) == ("quarantine_rate", "failed", 2, 500)


@pytest.mark.spark
def test_ingest_alerts_a_corrupt_file(
    spark: Any, tmp_path: Path, landing: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`wap ingest`: the file that fails alone alerts once, the split batch before it sends nothing; then
    under `wap watch` the alert is a DBOS step after the settle step."""
    import os

    from support.data import trips_file

    cfg = _lake_config(
        tmp_path,
        "alerts_ing",
        f"checks = [{NOT_NULL}]",
        f'[sources.trips]\ntable = "nyc.trips"\nlocation = "{landing}"\nsettle_seconds = 0\n\n'
        '[watch]\ninterval = 0.5\nworker = "alerts"\n\n'
        '[alerts.sinks.ops]\ntype = "webhook"\nurl_env = "WAP_T_HOOK"\nevents = ["file_failed", "blocked"]\n',
    )
    trips_file(landing, "a.parquet", 30)
    (landing / "b.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
    for i, name in enumerate(("a.parquet", "b.parquet")):
        os.utime(landing / name, ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
    r = _invoke("ingest", "trips", "-c", str(cfg), "--json", WAP_T_HOOK=receiver.url)
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    states = {Path(f["uri"]).name: f for f in doc["files"]}
    assert states["a.parquet"]["state"] == "published" and states["b.parquet"]["state"] == "failed"
    (body,) = receiver.bodies  # the split batch sent nothing; the file that failed alone did
    assert body["event"] == "file_failed" and body["source"] == "trips" and body["status"] == "failed"
    assert body["files"] == [str(landing / "b.parquet")] and body["run_id"] == states["b.parquet"]["run_id"]
    assert body["error"]["kind"] == "input" and f"wap retry {body['run_id']}" in body["commands"]
    again = _invoke("ingest", "trips", "-c", str(cfg), "--json", WAP_T_HOOK=receiver.url)
    assert again.exit_code == 0 and receiver.count == 1

    # `wap watch`: the same alert is a DBOS step of the batch's workflow, after its settle step.
    from wapflow import api
    from wapflow.outer.durable import database_url
    from wapflow.outer.watch import Watcher

    (landing / "c.parquet").write_bytes(b"PAR1 not parquet either PAR1")
    monkeypatch.setenv("WAP_T_HOOK", receiver.url)
    lh = api.connect(str(cfg), spark=spark)
    res = Watcher(lh, ["trips"], once=True).run()
    assert res.exit_code == 3 and receiver.count == 2
    assert receiver.bodies[1]["event"] == "file_failed" and receiver.bodies[1]["files"] == [str(landing / "c.parquet")]
    engine = sa.create_engine(database_url(lh, None))
    with engine.connect() as conn:
        steps = [
            r[0] for r in conn.execute(sa.text("SELECT function_name FROM operation_outputs ORDER BY function_id"))
        ]
    engine.dispose()
    assert steps[-2:] == ["settle_step", "alert_step"], steps
