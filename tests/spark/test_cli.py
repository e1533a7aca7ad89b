"""The `wap` command as users call it: exit codes, --json documents, messages."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from support.data import TRIPS_CHECKS, trips_file
from wapflow.cli import app

WAP = str(Path(sys.executable).parent / "wap")
runner = CliRunner()


def _toml_value(v):
    return json.dumps(v)


def write_config(tmp: Path, catalog: str, checks=TRIPS_CHECKS, extra: str = "") -> Path:
    lines = [
        "[lakehouse]",
        f'warehouse = "{tmp / "lakehouse"}"',
        f'catalog_name = "{catalog}"',
        'master = "local[2]"',
        extra,
        '[tables."nyc.trips"]',
        "checks = [",
    ]
    for c in checks:
        inner = ", ".join(f"{k} = {_toml_value(v)}" for k, v in c.items())
        lines.append(f"  {{ {inner} }},")
    lines.append("]")
    p = tmp / "wap.toml"
    p.write_text("\n".join(lines) + "\n")
    return p


def wap(*args: str):
    res = runner.invoke(app, list(args))
    return res


def as_json(res) -> dict:
    return json.loads(res.stdout)


@pytest.mark.spark
def test_cli_round_trip(spark, tmp_path, landing):
    cfg = str(write_config(tmp_path, "cli_rt"))
    clean = trips_file(landing, "clean.parquet", 100)
    dirty = trips_file(landing, "dirty.parquet", 100, null_rate=0.05, start_id=1000)

    r = wap("run", "nyc.trips", str(clean), "--config", cfg, "--json")
    assert r.exit_code == 0, r.output
    doc = as_json(r)
    for key in ("run_id", "table", "status", "branch", "rows_written", "snapshot_id", "checks", "error"):
        assert key in doc
    assert doc["status"] == "published" and doc["rows_written"] == 100 and doc["error"] is None
    assert {"name", "check", "status", "observed", "failing_rows"} <= set(doc["checks"][0])
    first_snapshot = doc["snapshot_id"]

    r = wap("run", "nyc.trips", str(dirty), "--config", cfg, "--json")
    assert r.exit_code == 1, r.output
    blocked = as_json(r)
    assert blocked["status"] == "blocked"
    branch = blocked["branch"]

    r = wap("branches", "--config", cfg, "--json")
    assert r.exit_code == 0, r.output
    kept = as_json(r)["branches"]
    assert [(b["branch"], b["run_id"], b["failed_checks"]) for b in kept] == [
        (branch, blocked["run_id"], ["not_null(passenger_count)"])
    ]

    r = wap("query", "SELECT count(*) AS n FROM nyc.trips", "--config", cfg, "--json")
    assert as_json(r)["rows"] == [[100]]
    r = wap(
        "query",
        "SELECT count(*) AS n FROM nyc.trips WHERE passenger_count IS NULL",
        "--branch",
        branch,
        "--config",
        cfg,
        "--json",
    )
    assert r.exit_code == 0, r.output
    assert as_json(r)["rows"] == [[5]]
    r = wap("query", "SELECT count(*) FROM nyc.trips", "--as-of", str(first_snapshot), "--config", cfg, "--json")
    assert as_json(r)["rows"] == [[100]]

    r = wap("history", "nyc.trips", "--config", cfg, "--json")
    snaps = as_json(r)["snapshots"]
    assert snaps[0]["snapshot_id"] == first_snapshot and snaps[0]["run_id"] == doc["run_id"]
    assert snaps[0]["rows_added"] == 100 and str(clean) in snaps[0]["files"]

    r = wap("history", "nyc.trips", "--config", cfg)  # people's view renders too
    assert r.exit_code == 0 and doc["run_id"] in r.stdout

    r = wap("discard", branch, "--config", cfg)
    assert r.exit_code == 0, r.output
    r = wap("branches", "--config", cfg, "--json")
    assert as_json(r)["branches"] == []
    r = wap("discard", branch, "--config", cfg)
    assert r.exit_code == 2 and "no branch" in r.stderr

    r = wap("runs", "--config", cfg, "--json")
    assert [x["status"] for x in as_json(r)["runs"]] == ["discarded", "published"]


@pytest.mark.spark
def test_cli_query_errors(spark, tmp_path):
    cfg = str(write_config(tmp_path, "cli_q"))
    r = wap("query", "SELECT * FROM nyc.nothing", "--config", cfg)
    assert r.exit_code == 2 and "query failed" in r.stderr
    r = wap("query", "SELECT 1", "--as-of", "yesterday-ish", "--config", cfg)
    assert r.exit_code == 2 and "neither a snapshot id nor a timestamp" in r.stderr
    r = wap("history", "nyc.nothing", "--config", cfg)
    assert r.exit_code == 2 and "does not exist" in r.stderr


@pytest.mark.spark
def test_demo_command_end_to_end(spark, tmp_path):
    r = wap("demo", "--dir", str(tmp_path / "demo"), "--rows", "2000", "--json")
    assert r.exit_code == 0, r.output
    doc = as_json(r)
    assert doc["as_expected"]
    assert doc["clean"]["status"] == "published" and doc["dirty"]["status"] == "blocked"
    assert doc["main_snapshot_before_dirty"] == doc["main_snapshot_after_dirty"]
    assert doc["main_rows_after_dirty"] == 2000
    assert doc["dirty"]["branch"] in doc["kept_branches"]
    assert sum(r["trips"] for r in doc["main_by_payment_type"]) == 2000


def test_config_error_exit_code_and_message(tmp_path):
    (tmp_path / "wap.toml").write_text('[lakehouse]\nwarehous = "x"\n')
    r = wap("run", "nyc.trips", "x.parquet", "--config", str(tmp_path / "wap.toml"))
    assert r.exit_code == 2
    assert "unknown key 'warehous'" in r.stderr and "did you mean 'warehouse'" in r.stderr
    r = wap("run", "nyc.trips", "x.parquet", "--config", str(tmp_path / "wap.toml"), "--json")
    assert r.exit_code == 2 and as_json(r)["error"]["kind"] == "config"


def test_init_writes_a_starter_once(tmp_path):
    target = tmp_path / "wap.toml"
    r = wap("init", "--path", str(target))
    assert r.exit_code == 0 and target.exists()
    r = wap("init", "--path", str(target))
    assert r.exit_code == 2 and "already exists" in r.stderr
    assert wap("init", "--path", str(target), "--force").exit_code == 0


def test_demo_generate(tmp_path):
    import pyarrow.parquet as pq

    r = wap("demo", "generate", "-n", "500", "--no-null", "--out", str(tmp_path), "--name", "c.parquet")
    assert r.exit_code == 0, r.output
    assert pq.read_table(tmp_path / "c.parquet").column("passenger_count").null_count == 0
    r = wap("demo", "generate", "-n", "500", "--null-rate", "0.1", "--out", str(tmp_path), "--name", "d.parquet")
    assert pq.read_table(tmp_path / "d.parquet").column("passenger_count").null_count == 50
    r = wap("demo", "generate", "--no-null", "--null-rate", "0.2", "--out", str(tmp_path))
    assert r.exit_code == 2


# --- the installed console script, in its own process ----------------------------------------


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")}
    env.update(extra)
    return env


def test_console_script_publishes_in_a_fresh_process(tmp_path, landing):
    cfg = write_config(tmp_path, "lakehouse", checks=[{"check": "not_null", "column": "passenger_count"}])
    f = trips_file(landing, "f.parquet", 50)
    p = subprocess.run(
        [WAP, "run", "nyc.trips", str(f), "--config", str(cfg), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["status"] == "published" and doc["rows_written"] == 50
    assert "Traceback" not in p.stderr
    p = subprocess.run(
        [WAP, "run", "nyc.trips", str(landing / "missing.parquet"), "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
    )
    assert p.returncode == 3
    assert "missing.parquet does not exist" in p.stderr
    assert "Traceback" not in p.stderr


def test_missing_java_is_a_clear_message(tmp_path):
    env = _env(PATH=str(tmp_path), JAVA_HOME=str(tmp_path / "nojava"))
    p = subprocess.run([WAP, "setup"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 3
    assert "Java was not found" in p.stderr and "JAVA_HOME" in p.stderr
    assert "Traceback" not in p.stderr and "Py4J" not in p.stderr


def test_too_old_java_is_a_clear_message(tmp_path):
    home = tmp_path / "jdk11"
    (home / "bin").mkdir(parents=True)
    fake = home / "bin" / "java"
    fake.write_text("#!/bin/sh\necho 'openjdk version \"11.0.21\" 2023-10-17' >&2\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    p = subprocess.run([WAP, "setup"], capture_output=True, text=True, timeout=120, env=_env(JAVA_HOME=str(home)))
    assert p.returncode == 3
    assert "Java 11" in p.stderr and "17" in p.stderr


def test_unknown_check_type_exit_code(tmp_path, landing):
    f = trips_file(landing, "f.parquet", 5)
    cfg = write_config(tmp_path, "cli_badcheck", checks=[{"check": "no_nulls", "column": "passenger_count"}])
    r = wap("run", "nyc.trips", str(f), "--config", str(cfg))
    assert r.exit_code == 2
    assert "unknown check type 'no_nulls'" in r.stderr and "not_null" in r.stderr
    assert f.exists()
