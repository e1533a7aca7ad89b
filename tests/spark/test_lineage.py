"""Lineage out ([lineage]) with real runs: OpenLineage events of a published, a blocked, a discarded and a
failed run, received by a local HTTP receiver (tests/support/receiver.py: an http.server thread on 127.0.0.1
that this test starts and stops) or written by the file transport; a receiver that is down or answers 500
changes nothing of a run but one warning line. The events are the openlineage-python client's own JSON."""

from __future__ import annotations

import json
import socket
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from support.receiver import Receiver
from wapflow.pipeline.lineage import run_uuid

CHECKS = '[{ check = "not_null", column = "passenger_count" }, { check = "row_count", min = 1 }]'
API_KEY = "ol-key-not-to-be-printed-123"


def _config(tmp_path: Path, catalog: str, lineage: str) -> Path:
    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{tmp_path / "lakehouse"}"\ncatalog_name = "{catalog}"\nmaster = "local[2]"\n\n'
        f'[tables."nyc.trips"]\nchecks = {CHECKS}\n\n[lineage]\n{lineage}\n'
    )
    return cfg


def _invoke(*args: str, **env: str) -> Any:
    from typer.testing import CliRunner

    from wapflow.cli import app

    return CliRunner().invoke(app, list(args), env=env)


def _shape(ev: dict[str, Any]) -> dict[str, Any]:
    """The OpenLineage RunEvent shape (spec 2-0-2) of one received event: what every consumer reads."""
    assert ev["eventType"] in ("START", "COMPLETE", "FAIL", "ABORT")
    datetime.fromisoformat(ev["eventTime"])
    assert uuid.UUID(ev["run"]["runId"]).version == 5
    assert set(ev["job"]) >= {"namespace", "name"}
    assert ev["schemaURL"].startswith("https://openlineage.io/spec/") and ev["producer"]
    for d in ev["inputs"] + ev["outputs"]:
        assert isinstance(d["namespace"], str) and isinstance(d["name"], str)
    return ev


def _assertions(ev: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (out,) = ev["outputs"]
    facet = out["facets"]["dataQualityAssertions"]
    assert facet["_schemaURL"].endswith("DataQualityAssertionsDatasetFacet")
    return {a["name"]: a for a in facet["assertions"]}


@pytest.mark.spark
def test_published_blocked_and_discarded_runs_send_their_events(
    spark: Any, tmp_path: Path, landing: Path, receiver: Receiver
) -> None:
    from support.cli_harness import Reader
    from support.data import trips_file

    cfg = _config(
        tmp_path,
        "ol_pub",
        f'transport = "http"\nurl = "{receiver.base_url}"\napi_key_env = "WAP_T_OL_KEY"\nnamespace = "etl"',
    )
    clean = trips_file(landing, "clean.parquet", 40)
    r = _invoke("run", "nyc.trips", str(clean), "-c", str(cfg), "--json", WAP_T_OL_KEY=API_KEY)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    main = Reader(tmp_path, "ol_pub").main("nyc.trips")
    assert doc["status"] == "published" and main == doc["snapshot_id"]

    start, complete = (_shape(b) for b in receiver.bodies)
    assert [start["eventType"], complete["eventType"]] == ["START", "COMPLETE"]
    assert receiver.paths == ["/api/v1/lineage"] * 2 and receiver.auth == [f"Bearer {API_KEY}"] * 2
    assert start["run"]["runId"] == complete["run"]["runId"] == run_uuid(doc["run_id"])
    assert start["job"]["namespace"] == "etl" and complete["job"]["name"] == "nyc.trips"
    assert complete["inputs"] == [{"namespace": "file", "name": str(clean), "facets": {}, "inputFacets": {}}]
    (out,) = complete["outputs"]
    assert (out["namespace"], out["name"]) == ((tmp_path / "lakehouse").as_uri(), "nyc.trips")
    assert out["facets"]["version"]["datasetVersion"] == str(main)
    checks = _assertions(complete)
    assert set(checks) == {c["name"] for c in doc["checks"]} and len(checks) == 2
    assert checks["not_null(passenger_count)"]["success"] is True
    assert checks["not_null(passenger_count)"]["column"] == "passenger_count"
    assert [a.get("column") for n, a in checks.items() if n.startswith("row_count")] == [None]
    assert "dataQualityAssertions" not in start["outputs"][0]["facets"]
    assert API_KEY not in r.output

    # A blocked run: FAIL, the failing check false, the failed check named; nothing published.
    dirty = trips_file(landing, "dirty.parquet", 40, null_rate=0.3, start_id=1000)
    b = _invoke("run", "nyc.trips", str(dirty), "-c", str(cfg), "--json", WAP_T_OL_KEY=API_KEY)
    assert b.exit_code == 1, b.output
    blocked = json.loads(b.stdout)
    _, fail = (_shape(x) for x in receiver.bodies[2:])
    assert fail["eventType"] == "FAIL" and fail["run"]["runId"] == run_uuid(blocked["run_id"])
    assert _assertions(fail)["not_null(passenger_count)"]["success"] is False
    assert "not_null(passenger_count)" in fail["run"]["facets"]["errorMessage"]["message"]
    assert "version" not in fail["outputs"][0]["facets"]
    assert Reader(tmp_path, "ol_pub").main("nyc.trips") == main

    # The same run resumed by its id (another attempt, as after a crash) keeps its OpenLineage run id.
    again = _invoke("run", "nyc.trips", str(dirty), "-c", str(cfg), "--run-id", blocked["run_id"], WAP_T_OL_KEY=API_KEY)
    assert again.exit_code == 1, again.output
    resumed = [_shape(x) for x in receiver.bodies[4:]]
    assert [(e["eventType"], e["run"]["runId"]) for e in resumed] == [
        ("START", fail["run"]["runId"]),
        ("FAIL", fail["run"]["runId"]),
    ]

    # Discarding its branch ends it: ABORT, the same run id.
    d = _invoke("discard", blocked["branch"], "-c", str(cfg), WAP_T_OL_KEY=API_KEY)
    assert d.exit_code == 0, d.output
    (abort,) = (_shape(x) for x in receiver.bodies[6:])
    assert abort["eventType"] == "ABORT" and abort["run"]["runId"] == fail["run"]["runId"]


@pytest.mark.spark
def test_a_failed_run_sends_fail_with_its_error(spark: Any, tmp_path: Path, landing: Path, receiver: Receiver) -> None:
    cfg = _config(tmp_path, "ol_fail", f'transport = "http"\nurl = "{receiver.base_url}"')
    bad = landing / "broken.parquet"
    bad.write_bytes(b"PAR1 this is not a parquet file PAR1")
    r = _invoke("run", "nyc.trips", str(bad), "-c", str(cfg), "--json")
    doc = json.loads(r.stdout)
    assert doc["status"] == "failed" and r.exit_code == doc["exit_code"] != 0, r.output
    events = [_shape(b) for b in receiver.bodies]
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    fail = events[-1]
    assert fail["run"]["runId"] == run_uuid(doc["run_id"])
    assert fail["run"]["facets"]["errorMessage"]["message"] == doc["error"]["message"]
    assert fail["inputs"] == [{"namespace": "file", "name": str(bad), "facets": {}, "inputFacets": {}}]


@pytest.mark.spark
def test_the_file_transport_writes_one_json_event_per_line(spark: Any, tmp_path: Path, landing: Path) -> None:
    from support.data import trips_file

    cfg = _config(tmp_path, "ol_file", 'transport = "file"\npath = "lineage/events.jsonl"')
    first = _invoke("run", "nyc.trips", str(trips_file(landing, "a.parquet", 20)), "-c", str(cfg), "--json")
    second = _invoke("run", "nyc.trips", str(trips_file(landing, "b.parquet", 20, start_id=100)), "-c", str(cfg))
    assert first.exit_code == second.exit_code == 0, first.output + second.output
    lines = (tmp_path / "lineage" / "events.jsonl").read_text().splitlines()
    events = [_shape(json.loads(line)) for line in lines]
    assert [e["eventType"] for e in events] == ["START", "COMPLETE", "START", "COMPLETE"]
    assert events[0]["run"]["runId"] == run_uuid(json.loads(first.stdout)["run_id"]) != events[2]["run"]["runId"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.spark
@pytest.mark.parametrize("receiver_state", ["down", "500"])
def test_a_receiver_down_or_failing_changes_nothing_but_a_warning(
    spark: Any,
    tmp_path: Path,
    landing: Path,
    receiver: Receiver,
    receiver_state: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from support.cli_harness import Reader
    from support.data import trips_file

    secret_path = "/hooks/t0ken-in-the-path"
    if receiver_state == "down":
        url = f"http://127.0.0.1:{_closed_port()}{secret_path}/"
    else:
        receiver.default = "500"
        url = receiver.base_url + secret_path + "/"
    catalog = f"ol_{receiver_state}"
    cfg = _config(tmp_path, catalog, 'transport = "http"\nurl_env = "WAP_T_OL_URL"\ntimeout = 2\nmax_attempts = 2')
    t0 = time.monotonic()
    r = _invoke(
        "run", "nyc.trips", str(trips_file(landing, "a.parquet", 30)), "-c", str(cfg), "--json", WAP_T_OL_URL=url
    )
    took = time.monotonic() - t0
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "published" and doc["rows_written"] == 30
    assert Reader(tmp_path, catalog).main("nyc.trips") == doc["snapshot_id"]
    warnings = [line.split("warning: ", 1)[1] for line in r.output.splitlines() if "lineage event" in line]
    assert [w.split(" of run ")[0] for w in warnings] == ["lineage event START", "lineage event COMPLETE"]
    assert all("not sent to the http receiver" in w for w in warnings)
    assert "t0ken" not in r.output and "Retrying" not in r.output and not caplog.records
    if receiver_state == "500":
        assert receiver.count == 4  # two attempts of each event
    assert took < 120


@pytest.mark.spark
def test_an_ingest_batch_is_one_run_with_its_files_as_inputs(
    spark: Any, tmp_path: Path, landing: Path, receiver: Receiver
) -> None:
    """`wap ingest` runs go through the same driver: one batch, one OpenLineage run, every file an input."""
    from support.cli_harness import Reader
    from support.data import trips_file

    cfg = _config(
        tmp_path,
        "ol_ingest",
        f'transport = "http"\nurl = "{receiver.base_url}"\n\n'
        f'[sources.trips]\ntable = "nyc.trips"\nlocation = "{landing}"\nsettle_seconds = 0',
    )
    files = [trips_file(landing, "a.parquet", 20), trips_file(landing, "b.parquet", 20, start_id=100)]
    r = _invoke("ingest", "trips", "-c", str(cfg), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    (run_id,) = {f["run_id"] for f in doc["files"]}
    start, complete = (_shape(b) for b in receiver.bodies)
    assert [start["eventType"], complete["eventType"]] == ["START", "COMPLETE"]
    assert complete["run"]["runId"] == run_uuid(run_id)
    assert sorted(i["name"] for i in complete["inputs"]) == sorted(str(f) for f in files)
    version = complete["outputs"][0]["facets"]["version"]["datasetVersion"]
    assert version == str(Reader(tmp_path, "ol_ingest").main("nyc.trips"))
