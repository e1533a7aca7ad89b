"""wapflow's Airflow provider against a real Airflow 3 (in its own venv: `make airflow-venv`, see pyproject's
`airflow` extra): `airflow dags test` for the plain paths, and a standalone scheduler + triggerer for a run held
for review. What is checked is what an Airflow user sees (task states and tries in Airflow's database, XComs,
OpenLineage events at a local receiver) and what is on main (PyIceberg)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from support.cli_harness import LazyReader, env, write_config
from support.data import trips_file
from support.sdp_project import project

REPO = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("WAP_AIRFLOW_VENV", REPO / ".venv-airflow"))
AIRFLOW = VENV / "bin" / "airflow"
pytestmark = [pytest.mark.spark, pytest.mark.slow]

if not AIRFLOW.exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{AIRFLOW} is missing: .ci/run installs it (make airflow-venv)")
    pytest.skip(f"no Airflow venv at {VENV} (make airflow-venv)", allow_module_level=True)

TABLES = """
[tables."raw.trips"]
checks = [{ check = "not_null", column = "passenger_count" }]

[tables."raw.dirty"]
on_failure = "keep"
checks = [{ check = "not_null", column = "passenger_count" }]

[tables."raw.locked"]
checks = [{ check = "not_null", column = "passenger_count" }]

[tables."raw.held"]
review = "always"
checks = [{ check = "not_null", column = "passenger_count" }]

[tables."sales.orders"]
checks = [{ check = "not_null", column = "id" }]

[tables."sales.big_orders"]
checks = [{ check = "row_count", min = 1 }]

[models."gold.daily"]
sql = "SELECT to_date(pickup_at) AS day, count(*) AS trips FROM raw.trips GROUP BY 1"
mode = "merge"
key = ["day"]
checks = [{ check = "not_null", column = "day" }]
"""

DAG = """
from datetime import timedelta
from airflow.sdk import DAG
from airflow.providers.standard.operators.empty import EmptyOperator
from wapflow.integrations.airflow import WapModelsOperator, WapPipelineOperator, WapRunOperator

CFG = {cfg!r}
with DAG("wap_plain", schedule=None, default_args={{"retries": 1, "retry_delay": timedelta(seconds=1)}}):
    clean = WapRunOperator(task_id="clean", table="raw.trips", files=[{clean!r}], config=CFG)
    daily = WapModelsOperator(task_id="daily", models=["gold.daily"], config=CFG)
    dirty = WapRunOperator(task_id="dirty", table="raw.dirty", files=[{dirty!r}], config=CFG)
    after_dirty = EmptyOperator(task_id="after_dirty")
    locked = WapRunOperator(task_id="locked", table="raw.locked", files=[{clean!r}], config=CFG)
    pipe = WapPipelineOperator(task_id="pipe", spec={spec!r}, config=CFG)
    clean >> daily
    dirty >> after_dirty

with DAG("wap_held", schedule=None):
    held = WapRunOperator(task_id="held", table="raw.held", files=[{clean!r}], config=CFG, review_poll_interval=1)
    after = EmptyOperator(task_id="after")
    held >> after
"""


def _airflow_env(home: Path, dags: Path, **extra: str) -> dict[str, str]:
    return env(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__EXECUTOR="LocalExecutor",
        AIRFLOW__CORE__PARALLELISM="2",
        AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="1",
        AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="2",
        AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC="1",
        PATH=f"{VENV / 'bin'}:{os.environ['PATH']}",
        **extra,
    )


@pytest.fixture
def lake(tmp_path: Path, receiver: Any) -> tuple[Path, Path, LazyReader, Path]:
    catalog = f"af{os.getpid()}"
    lineage = f'\n[lineage]\ntransport = "http"\nurl = "{receiver.base_url}"\n'
    cfg = write_config(tmp_path, TABLES + lineage, lakehouse="publish_lock_timeout = 1\n", catalog=catalog)
    clean = trips_file(tmp_path / "landing", "clean.parquet", 30)
    dirty = trips_file(tmp_path / "landing", "dirty.parquet", 30, null_rate=0.2, start_id=100)
    dags = tmp_path / "dags"
    dags.mkdir()
    spec = project(tmp_path / "shop")  # a Spark Declarative Pipelines project: wap pipelines run
    (dags / "wap_dags.py").write_text(DAG.format(cfg=str(cfg), clean=str(clean), dirty=str(dirty), spec=str(spec)))
    home = tmp_path / "airflow"
    subprocess.run([str(AIRFLOW), "db", "migrate"], env=_airflow_env(home, dags), capture_output=True, check=True)
    return cfg, dags, LazyReader(tmp_path, catalog), home


def _tis(home: Path, dag: str) -> dict[str, tuple[str, int]]:
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute("SELECT task_id, state, try_number FROM task_instance WHERE dag_id = ?", (dag,)).fetchall()
    return {t: (s, n) for t, s, n in rows}


def _xcom(home: Path, dag: str, task: str, key: str) -> Any:
    with sqlite3.connect(home / "airflow.db") as db:
        row = db.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = ?", (dag, task, key)
        ).fetchone()
    value = json.loads(row[0]) if row else None
    return json.loads(value) if isinstance(value, str) and value[:1] in '{["' else value


def test_dags_test_published_blocked_retried_and_lineage(lake, receiver):
    """One `airflow dags test` (one Spark for every task): a clean file published and its model after it; a dirty
    one blocked at once without a retry, its downstream never run; a publish lock held past
    publish_lock_timeout (exit 5) retried by Airflow, the retry publishing the same wapflow run once."""
    from wapflow import api

    cfg, dags, reader, home = lake
    store = api.connect(cfg).store
    released = threading.Event()

    def hold() -> None:
        with store.publish_lock("raw.locked"):
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:  # until the first publish attempt has timed out
                if any((r.error or {}).get("kind") == "transient" for r in store.list("raw.locked")):
                    break
                time.sleep(0.2)
        released.set()

    threading.Thread(target=hold, daemon=True).start()
    transport = json.dumps({"type": "http", "url": receiver.base_url, "endpoint": "api/v1/lineage"})
    got = subprocess.run(
        [str(AIRFLOW), "dags", "test", "wap_plain"], capture_output=True, text=True, timeout=900, check=False,
        env=_airflow_env(home, dags, AIRFLOW__OPENLINEAGE__TRANSPORT=transport),
    )  # fmt: skip
    log = got.stdout + got.stderr
    assert released.wait(30), log[-3000:]
    tis = _tis(home, "wap_plain")
    assert tis["clean"] == ("success", 1) and tis["daily"] == ("success", 1), (tis, log[-4000:])
    assert tis["dirty"] == ("failed", 1)  # retries=1, but a blocked run is never retried
    assert tis["after_dirty"][0] == "upstream_failed"
    assert tis["locked"] == ("success", 2), log[-4000:]  # failed transiently once, retried, published
    assert "blocked by raw.dirty: not_null(passenger_count)" in log and "wap report" in log
    # The SDP project: both datasets published by one task, in one commit.
    assert tis["pipe"] == ("success", 1), log[-4000:]
    assert _xcom(home, "wap_plain", "pipe", "status") == "published"
    assert len(reader.rows("sales.orders")) == 20 and len(reader.rows("sales.big_orders")) == 10

    # XComs: the run id, status and the command that shows the report.
    run_id = _xcom(home, "wap_plain", "clean", "run_id")
    assert run_id.startswith("af_wap_plain_clean_") and _xcom(home, "wap_plain", "clean", "status") == "published"
    summary = _xcom(home, "wap_plain", "clean", "return_value")
    assert summary["snapshots"] == {"raw.trips": reader.main("raw.trips")}
    assert _xcom(home, "wap_plain", "dirty", "status") == "blocked"
    assert _xcom(home, "wap_plain", "dirty", "report_command").startswith("wap report af_wap_plain_dirty_")

    # What is on main: the clean rows and the locked run's once; nothing of the dirty file (its branch kept).
    assert len(reader.rows("raw.trips")) == 30 and len(reader.rows("raw.locked")) == 30
    assert reader.rows("raw.dirty") == [] and len(reader.branches("raw.dirty")) == 1
    locked = store.list("raw.locked")
    assert len(locked) == 1 and locked[0].status == "published"  # the retry resumed the same run id

    # OpenLineage: the task's events name the Iceberg tables and the wapflow run.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not _ol(receiver, "wap_plain.clean", "COMPLETE"):
        time.sleep(0.5)
    (complete,) = _ol(receiver, "wap_plain.clean", "COMPLETE")
    (out,) = complete["outputs"]
    assert out["name"] == "raw.trips" and out["namespace"].startswith("file://")
    assert out["facets"]["version"]["datasetVersion"] == str(reader.main("raw.trips"))
    assert [a["success"] for a in out["facets"]["dataQualityAssertions"]["assertions"]] == [True]
    assert complete["inputs"][0]["name"].endswith("clean.parquet")
    assert complete["run"]["facets"]["wapflow_run"]["runId"] == run_id
    # wapflow's own events ([lineage]) name the Airflow task's run as their parent.
    (own,) = [b for b in receiver.bodies if b["job"]["name"] == "raw.trips" and b["eventType"] == "COMPLETE"]
    parent = own["run"]["facets"]["parent"]
    assert parent["job"]["name"] == "wap_plain.clean" and parent["run"]["runId"] == complete["run"]["runId"]
    (failed,) = _ol(receiver, "wap_plain.dirty", "FAIL")
    assert failed["outputs"][0]["facets"]["dataQualityAssertions"]["assertions"][0]["success"] is False


def _ol(receiver: Any, job: str, event: str) -> list[dict[str, Any]]:
    return [b for b in receiver.bodies if b.get("job", {}).get("name") == job and b.get("eventType") == event]


def test_held_run_defers_until_approved(lake):
    """`airflow standalone` (API server, scheduler, triggerer, DAG processor: real processes): the held task defers
    (no worker slot), the trigger reads the run store, `wap approve` publishes, the task resumes and succeeds, and
    its downstream runs."""
    import socket

    cfg, dags, reader, home = lake
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = _airflow_env(
        home, dags, AIRFLOW__API__PORT=str(port), AIRFLOW__API__HOST="127.0.0.1",
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
    )  # fmt: skip
    log = open(home / "standalone.log", "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [str(AIRFLOW), "standalone"], env=e, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 180
        while True:  # tasks reach Airflow's execution API on the API server: it must listen before one is queued
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, _logs(home)
            time.sleep(1)
        while subprocess.run([str(AIRFLOW), "dags", "trigger", "wap_held"], env=e, capture_output=True).returncode:
            assert time.monotonic() < deadline, _logs(home)
            time.sleep(3)
        assert _wait(home, "wap_held", "held", "deferred", 300) == "deferred", _logs(home)
        assert _tis(home, "wap_held")["after"][0] in (None, "none", "scheduled")
        run_id = _xcom(home, "wap_held", "held", "run_id")
        assert reader.rows("raw.held") == []
        approve = subprocess.run(
            [str(REPO / ".venv" / "bin" / "wap"), "approve", run_id, "--reason", "checked", "--config", str(cfg)],
            capture_output=True, text=True, timeout=300, env=env(), check=False,
        )  # fmt: skip
        assert approve.returncode == 0, approve.stdout + approve.stderr[-2000:]
        assert _wait(home, "wap_held", "after", "success", 240) == "success", _logs(home)
        assert _tis(home, "wap_held")["held"][0] == "success"
        assert _xcom(home, "wap_held", "held", "status") == "published"
        assert len(reader.rows("raw.held")) == 30
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()


def _wait(home: Path, dag: str, task: str, state: str, seconds: float) -> str | None:
    deadline = time.monotonic() + seconds
    now: str | None = None
    while time.monotonic() < deadline:
        now = _tis(home, dag).get(task, (None, 0))[0] if (home / "airflow.db").exists() else None
        if now == state or now in ("failed", "upstream_failed"):
            return now
        time.sleep(1)
    return now


def _logs(home: Path) -> str:
    return "\n".join(f"== {p.name}\n{p.read_text()[-4000:]}" for p in home.glob("*.log"))
