"""wapflow.integrations.prefect against a real Prefect server (Prefect's test harness: a server process on a
temporary database) and real Spark + Iceberg: what a Prefect user sees in the flow's states, task runs and
artifacts, and what is left in the lakehouse (read back with PyIceberg)."""

from __future__ import annotations

import base64
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from support.cli_harness import LazyReader, write_config
from support.data import trips_file

pytestmark = pytest.mark.spark


_n = iter(range(1000))


@pytest.fixture
def setup(spark: Any, prefect_server: None, tmp_path: Path):
    """A wap.toml in tmp_path (own catalog, one not_null check) and its PyIceberg reader."""

    def make(on_failure: str = "keep", lakehouse: str = "") -> tuple[str, LazyReader, Path]:
        catalog = f"pf{next(_n)}_{os.getpid()}"
        cfg = write_config(
            tmp_path,
            f'[tables."nyc.trips"]\non_failure = "{on_failure}"\n'
            'checks = [{ check = "not_null", column = "passenger_count" }]\n\n'
            f'[sources.trips]\ntable = "nyc.trips"\nlocation = "{tmp_path / "landing"}"\nsettle_seconds = 0\n',
            lakehouse=lakehouse,
            catalog=catalog,
        )
        (tmp_path / "landing").mkdir(exist_ok=True)
        return str(cfg), LazyReader(tmp_path, catalog), tmp_path / "landing"

    return make


def _api(flow_state: Any, tasks: int = 0) -> tuple[Any, dict[str, Any], list[Any]]:
    """The flow run, its task runs by name, and its artifacts, as the Prefect API returns them. `tasks`: the task
    runs expected; Prefect records task runs from events, after the flow returned: read again until they are all
    there (at most 20 s)."""
    import time

    deadline = time.monotonic() + 20
    while True:
        got = _api_once(flow_state)
        if len(got[1]) >= tasks or time.monotonic() > deadline:
            return got
        time.sleep(0.25)


def _api_once(flow_state: Any) -> tuple[Any, dict[str, Any], list[Any]]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.client.schemas.sorting import TaskRunSort

    fid = flow_state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        fr = client.read_flow_run(fid)
        trs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[fid])),
            sort=TaskRunSort.EXPECTED_START_TIME_ASC,
            limit=100,
        )
    # The artifacts' filter endpoint, called directly (this fastapi rejects the nulls the client sends).
    import httpx
    from prefect.client.schemas.objects import Artifact
    from prefect.settings import PREFECT_API_URL

    body = {"artifacts": {"flow_run_id": {"any_": [str(fid)]}}, "sort": "CREATED_DESC", "limit": 100, "offset": 0}
    got = httpx.post(f"{PREFECT_API_URL.value()}/artifacts/filter", json=body, timeout=30)
    got.raise_for_status()
    arts = [Artifact.model_validate(a) for a in got.json()]
    return fr, {t.name.split("-")[0] + "-" + t.name.split("-")[1]: t for t in trs}, list(arts)


def _stored() -> dict[str, bytes]:
    """What Prefect's local result storage holds now (shared by every flow of the test session)."""
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH

    root = Path(PREFECT_LOCAL_STORAGE_PATH.value())
    return {p.name: p.read_bytes() for p in root.iterdir()} if root.exists() else {}


def test_published_through_a_transaction(setup):
    from wapflow.integrations.prefect import wap_flow

    cfg, reader, landing = setup()
    f = trips_file(landing, "a.parquet", 40)
    before = _stored()
    state = wap_flow("nyc.trips", [str(f)], config=cfg, return_state=True)
    assert state.is_completed(), state.message
    doc = state.result()
    assert doc["status"] == "published" and doc["rows_written"] == 40
    assert len(reader.rows("nyc.trips")) == 40 and reader.branches("nyc.trips") == []
    assert reader.main("nyc.trips") == doc["snapshot_id"]
    fr, tasks, _ = _api(state, tasks=3)
    assert fr.state.type.value == "COMPLETED"
    assert _stored() == before  # a completed flow persists nothing (no result, no pickled Lakehouse)
    assert {n: (t.state.type.value, t.run_count) for n, t in tasks.items()} == {
        "wap-write": ("COMPLETED", 1),
        "wap-audit": ("COMPLETED", 1),
        "wap-publish": ("COMPLETED", 1),
    }


@pytest.mark.parametrize("policy", ["keep", "drop"])
def test_blocked_rolls_back_per_policy_and_is_not_retried(setup, policy):
    """A dirty file: the audit blocks, the flow fails at once (no retry), the report is an artifact, main is
    untouched, and the branch is kept or dropped as the table's on_failure says."""
    from wapflow.integrations.prefect import wap_flow

    cfg, reader, landing = setup(on_failure=policy)
    clean = trips_file(landing, "clean.parquet", 20)
    assert wap_flow("nyc.trips", [str(clean)], config=cfg)["status"] == "published"
    head = reader.main("nyc.trips")
    dirty = trips_file(landing, "dirty.parquet", 30, null_rate=0.2, start_id=500)
    before = _stored()
    state = wap_flow("nyc.trips", [str(dirty)], config=cfg, return_state=True)
    assert state.is_failed()
    # Prefect's flow engine persists a failed flow's exception whatever persist_result says: here that is a
    # RunNotPublished holding the run's plain result, never a Lakehouse or a Spark session.
    new_files = {k: v for k, v in _stored().items() if k not in before}
    assert len(new_files) <= 1
    for blob in new_files.values():
        assert b"RunNotPublished" in base64.b64decode(blob) and b"Lakehouse" not in base64.b64decode(blob)
    assert "blocked" in str(state.message) or "blocked" in repr(state.result(raise_on_failure=False))
    assert reader.main("nyc.trips") == head and len(reader.rows("nyc.trips")) == 20
    branches = reader.branches("nyc.trips")
    assert (len(branches) == 1) if policy == "keep" else (branches == [])
    fr, tasks, arts = _api(state, tasks=2)
    assert fr.state.type.value == "FAILED"
    assert tasks["wap-audit"].state.type.value == "FAILED" and tasks["wap-audit"].run_count == 1
    assert "wap-publish" not in tasks
    (art,) = [a for a in arts if a.key and a.key.startswith("wap-")]
    assert "blocked" in art.data and "not_null" in art.data and "passenger_count" in art.data


def test_a_write_failing_part_way_leaves_no_branch(setup, monkeypatch):
    """A fault after the rows are on the branch (an exception wapflow does not name: a bug, terminal): the
    write task takes its branch away itself (Prefect never runs the rollback hook of a task that raised),
    and the flow fails without a retry."""
    from wapflow.integrations.prefect import wap_flow

    cfg, reader, landing = setup()
    base = trips_file(landing, "base.parquet", 10)
    assert wap_flow("nyc.trips", [str(base)], config=cfg)["status"] == "published"
    head = reader.main("nyc.trips")
    f = trips_file(landing, "b.parquet", 25, start_id=100)
    monkeypatch.setenv("WAP_RAISE_AT", "write:appended")
    state = wap_flow("nyc.trips", [str(f)], config=cfg, return_state=True)
    monkeypatch.delenv("WAP_RAISE_AT")
    assert state.is_failed()
    assert reader.branches("nyc.trips") == [] and reader.main("nyc.trips") == head
    _, tasks, _ = _api(state, tasks=1)
    assert tasks["wap-write"].state.type.value == "FAILED" and tasks["wap-write"].run_count == 1
    assert "wap-audit" not in tasks


def test_a_transient_error_is_retried_then_publishes(setup):
    """Another process holds the table's publish lock longer than publish_lock_timeout: the publish fails
    with a transient error, Prefect retries it (only it), and the retry publishes."""
    from wapflow import api
    from wapflow.integrations.prefect import wap_flow

    cfg, reader, landing = setup(lakehouse="publish_lock_timeout = 1\n")
    f = trips_file(landing, "a.parquet", 30)
    store = api.connect(cfg).store
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store.publish_lock("nyc.trips"):
            held.set()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # until the first publish attempt has timed out
                if any((r.error or {}).get("kind") == "transient" for r in store.list()):
                    break
                time.sleep(0.1)
        release.set()

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert held.wait(30)
    state = wap_flow("nyc.trips", [str(f)], config=cfg, return_state=True)
    t.join(30)
    assert release.is_set()
    assert state.is_completed(), state.message
    assert state.result()["status"] == "published" and len(reader.rows("nyc.trips")) == 30
    _, tasks, _ = _api(state, tasks=3)
    assert tasks["wap-publish"].run_count == 2 and tasks["wap-publish"].state.type.value == "COMPLETED"
    assert tasks["wap-write"].run_count == 1 and tasks["wap-audit"].run_count == 1


def test_ingest_flow_runs_a_source(setup):
    from wapflow.integrations.prefect import ingest_flow

    cfg, reader, landing = setup()
    for i in range(3):
        trips_file(landing, f"f{i}.parquet", 10, start_id=1 + 100 * i, seed=i)
    doc = ingest_flow("trips", config=cfg)
    assert doc["exit_code"] == 0 and {f["state"] for f in doc["files"]} == {"published"}
    assert len(reader.rows("nyc.trips")) == 30
    trips_file(landing, "bad.parquet", 10, null_rate=0.3, start_id=900)
    state = ingest_flow("trips", config=cfg, return_state=True)
    assert state.is_failed()
    _, _, arts = _api(state)
    assert any(a.key == "wap-ingest-trips" and "bad.parquet" in a.data and "blocked" in a.data for a in arts)
