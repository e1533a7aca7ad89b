"""The examples in examples/ run, so they cannot rot: each lands a clean file (published) and a dirty one
(blocked, alerted). The DBOS one is also killed (SIGKILL) in the middle of its write and run again: it
resumes, and the file's rows are on main once. The DataFrame job (raw -> silver -> gold) and the model pipeline
(examples/pipeline: wap run, then wap run-models) publish their three tables, rows read back by PyIceberg."""

from __future__ import annotations

import json
import os
import runpy
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from support.cli_harness import LazyReader, checksum, env, write_config
from support.data import trips_file
from support.typer_cli import wap as wap_here

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = pytest.mark.spark
_n = iter(range(1000))


def _config(tmp_path: Path, *, checks: bool = True) -> tuple[str, LazyReader]:
    """The table's not_null check in wap.toml, or (checks=False) none: the script declares it in code."""
    catalog = f"ex{next(_n)}_{os.getpid()}"
    declared = 'checks = [{ check = "not_null", column = "passenger_count" }]\n' if checks else ""
    cfg = write_config(tmp_path, f'[tables."nyc.trips"]\non_failure = "keep"\n{declared}', catalog=catalog)
    return str(cfg), LazyReader(tmp_path, catalog)


def _run_example(name: str, *argv: str) -> int:
    """Run examples/NAME as `python examples/NAME ARGV...` would, in this process (shared Spark)."""
    old = sys.argv
    sys.argv = [str(EXAMPLES / name), *argv]
    try:
        runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    except SystemExit as e:
        return int(e.code or 0)
    finally:
        sys.argv = old
    return 0


class _Receiver(BaseHTTPRequestHandler):
    got: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Receiver.got.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return


def test_plain_python_example(spark, tmp_path, monkeypatch, capsys):
    cfg, reader = _config(tmp_path, checks=False)
    landing = tmp_path / "landing"
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("WAP_ALERT_URL", f"http://127.0.0.1:{server.server_port}/hook")
    try:
        assert _run_example("plain_python.py", cfg, str(trips_file(landing, "a.parquet", 30))) == 0
        assert capsys.readouterr().out.startswith("published ")
        dirty = trips_file(landing, "b.parquet", 30, null_rate=0.2, start_id=100)
        assert _run_example("plain_python.py", cfg, str(dirty)) == 1
    finally:
        server.shutdown()
    assert len(reader.rows("nyc.trips")) == 30 and len(reader.branches("nyc.trips")) == 1
    (alert,) = _Receiver.got
    assert alert["text"].startswith("WAP blocked on nyc.trips") and "not_null" in alert["text"]


def test_prefect_example(spark, prefect_server, tmp_path, capsys):
    cfg, reader = _config(tmp_path)
    landing = tmp_path / "landing"
    assert _run_example("prefect_flow.py", cfg, str(trips_file(landing, "a.parquet", 30))) == 0
    assert "published" in capsys.readouterr().out
    dirty = trips_file(landing, "b.parquet", 30, null_rate=0.2, start_id=100)
    assert _run_example("prefect_flow.py", cfg, str(dirty)) == 1
    assert "failed" in capsys.readouterr().out
    assert len(reader.rows("nyc.trips")) == 30 and len(reader.branches("nyc.trips")) == 1


@pytest.mark.slow
def test_dbos_example_killed_mid_write_resumes_once(tmp_path):
    """Real processes: the first is SIGKILLed with the rows on the run's branch; the second resumes the
    same workflow (DBOS recovery at launch) and publishes; a third finds it done. Rows on main once."""
    cfg, reader = _config(tmp_path)
    f = trips_file(tmp_path / "landing", "a.parquet", 40)

    def example(**extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, str(EXAMPLES / "dbos_workflow.py"), cfg, str(f)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env(**extra), check=False)

    killed = example(WAP_CRASH_AT="write:appended")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert reader.rows("nyc.trips") == []
    assert len(reader.branches("nyc.trips")) == 1  # the rows are on the run's branch, not on main
    resumed = example()
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr[-3000:]
    again = example()
    assert again.returncode == 0 and again.stdout.split()[:2] == resumed.stdout.split()[:2]
    assert checksum(reader.rows("nyc.trips"), "trip_id") == checksum(pq.read_table(f).to_pylist(), "trip_id")
    assert reader.branches("nyc.trips") == []
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'lakehouse' / 'example-dbos.sqlite'}")
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT status FROM workflow_status")).all()
    engine.dispose()
    assert [r[0] for r in rows] == ["SUCCESS"]


def _daily(rows: list[dict[str, Any]]) -> dict[Any, tuple[int, float]]:
    """Trips and fare per pickup day, as gold.daily should hold them."""
    out: dict[Any, tuple[int, float]] = {}
    for r in rows:
        n, fare = out.get(r["pickup_at"].date(), (0, 0.0))
        out[r["pickup_at"].date()] = (n + 1, fare + r["fare_amount"])
    return out


def _same_daily(gold: list[dict[str, Any]], landed: list[dict[str, Any]]) -> None:
    expected = _daily([r for r in landed if r["fare_amount"] > 0 and r["trip_distance"] > 0])
    got = {r["day"]: (r["trips"], r["fare"]) for r in gold}
    assert sorted(got) == sorted(expected)
    for day, (n, fare) in expected.items():
        assert got[day][0] == n and abs(got[day][1] - fare) < 1e-6, (day, got[day], (n, fare))


def test_dataframe_job_example(spark, tmp_path, capsys):
    """raw with wapflow.write, silver and gold in one transaction; run again with its run id: nothing twice; a
    dirty file: blocked at raw, no table changed."""
    cfg, reader = _config(tmp_path, checks=False)
    landing = tmp_path / "landing"
    a = trips_file(landing, "a.parquet", 40)
    assert _run_example("dataframe_job.py", cfg, str(a), "day1") == 0
    out = capsys.readouterr().out
    assert "raw.trips published" in out and "silver.trips, gold.daily published" in out, out
    landed = pq.read_table(a).to_pylist()
    assert checksum(reader.rows("raw.trips"), "trip_id") == checksum(landed, "trip_id")
    assert sorted(r["trip_id"] for r in reader.rows("silver.trips")) == sorted(
        r["trip_id"] for r in landed if r["fare_amount"] > 0 and r["trip_distance"] > 0
    )
    _same_daily(reader.rows("gold.daily"), landed)
    heads = {t: reader.main(t) for t in ("raw.trips", "silver.trips", "gold.daily")}

    assert _run_example("dataframe_job.py", cfg, str(a), "day1") == 0  # the same run id again
    assert "already published" in capsys.readouterr().out
    dirty = trips_file(landing, "b.parquet", 30, null_rate=0.2, start_id=100)
    assert _run_example("dataframe_job.py", cfg, str(dirty)) == 1
    assert "raw.trips blocked" in capsys.readouterr().out
    assert {t: reader.main(t) for t in heads} == heads


def test_model_pipeline_example(spark, tmp_path, monkeypatch):
    """examples/pipeline as its README runs it: `wap run raw.trips FILE`, then `wap run-models` with trip_models.py
    importable; a second landed file: silver reads only what raw gained, gold's days and vendors are totals."""
    folder = tmp_path / "pipeline"
    shutil.copytree(EXAMPLES / "pipeline", folder)
    catalog = f"ex{next(_n)}_{os.getpid()}"
    cfg = folder / "wap.toml"
    text = cfg.read_text()
    assert 'warehouse = "./lakehouse"\n' in text
    cfg.write_text(
        text.replace('warehouse = "./lakehouse"\n', f'warehouse = "./lakehouse"\ncatalog_name = "{catalog}"\n')
    )
    monkeypatch.syspath_prepend(str(folder))  # PYTHONPATH=. in the README
    monkeypatch.chdir(folder)
    reader = LazyReader(folder, catalog)
    landed: list[dict[str, Any]] = []
    for i, f in enumerate([trips_file(tmp_path, "a.parquet", 40), trips_file(tmp_path, "b.parquet", 25, start_id=100)]):
        ran = wap_here("run", "raw.trips", str(f), "--config", str(cfg))
        assert ran.exit_code == 0, ran.output
        models = wap_here("run-models", "--config", str(cfg), "--json")
        assert models.exit_code == 0, models.output
        doc = json.loads(models.stdout)
        assert doc["status"] == "published", doc
        assert [t["table"] for t in doc["tables"]] == ["silver.trips", "gold.daily", "gold.vendors"], doc
        new = pq.read_table(f).to_pylist()
        landed += new
        silver_run = next(t for t in doc["tables"] if t["table"] == "silver.trips")
        assert silver_run["rows_written"] == len(new), (i, silver_run)  # incremental: this file's rows only
    assert checksum(reader.rows("raw.trips"), "trip_id") == checksum(landed, "trip_id")
    silver = reader.rows("silver.trips")
    assert sorted(r["trip_id"] for r in silver) == sorted(r["trip_id"] for r in landed)
    _same_daily(reader.rows("gold.daily"), landed)
    vendors = {r["vendor_id"]: r["trips"] for r in reader.rows("gold.vendors")}
    assert vendors == {v: sum(1 for r in landed if r["vendor_id"] == v) for v in {r["vendor_id"] for r in landed}}
