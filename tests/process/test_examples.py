"""The examples in examples/ run, so they cannot rot: each lands a clean file (published) and a dirty one
(blocked, alerted). The DBOS one is also killed (SIGKILL) in the middle of its write and run again: it
resumes, and the file's rows are on main once."""

from __future__ import annotations

import json
import os
import runpy
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
