"""The `wap` command as users call it: exit codes, --json documents, messages."""

from __future__ import annotations

import json
import subprocess

import pytest

from support.cli_harness import WAP
from support.data import trips_file
from support.typer_cli import as_json, clean_env, wap, write_config


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
    r = wap("query", "SELECT trip_id FROM nyc.trips", "--limit", "10", "--config", cfg, "--json")
    assert len(as_json(r)["rows"]) == 10 and as_json(r)["total_rows"] == 100, r.output
    r = wap("query", "SELECT trip_id FROM nyc.trips", "--limit", "10", "--config", cfg)
    assert "10 of 100 rows (--limit N shows more, --limit 0 all)" in r.stdout, r.stdout
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


# --- the installed console script, in its own process ----------------------------------------


def test_console_script_publishes_in_a_fresh_process(tmp_path, landing):
    cfg = write_config(tmp_path, "lakehouse", checks=[{"check": "not_null", "column": "passenger_count"}])
    f = trips_file(landing, "f.parquet", 50)
    p = subprocess.run(
        [WAP, "run", "nyc.trips", str(f), "--config", str(cfg), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_env(),
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
        env=clean_env(),
    )
    assert p.returncode == 2  # a name that names nothing: usage
    assert "missing.parquet does not exist" in p.stderr
    assert "Spark's log" not in p.stderr  # this process never started Spark
    assert "Traceback" not in p.stderr


# --- tables without checks ----------------------------------------------------------------------------------


def _shop_config(tmp_path, tables: str, catalog: str) -> str:
    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{tmp_path / "lakehouse"}"\ncatalog_name = "{catalog}"\nmaster = "local[2]"\n\n'
        + tables
    )
    return str(cfg)


def _orders(folder) -> str:
    import pyarrow as pa

    from support.data import write_parquet

    return str(write_parquet(folder / "o.parquet", pa.table({"id": [1, 2, 3], "customer_id": [10, None, 30]})))


def test_a_misspelt_table_section_exits_2_in_a_fresh_process_and_writes_nothing(tmp_path, landing):
    """The first hour's safety hole: [tables."shop.ordrs"] and `wap run shop.orders` published NULLs, exit 0."""
    cfg = _shop_config(
        tmp_path, '[tables."shop.ordrs"]\nchecks = [{ check = "not_null", column = "customer_id" }]\n', "c"
    )
    f = _orders(landing)
    run = [WAP, "run", "shop.orders", f, "--config", cfg]
    p = subprocess.run(run, capture_output=True, text=True, timeout=600, env=clean_env())
    assert p.returncode == 2, p.stderr
    assert 'no [tables."shop.orders"] section' in p.stderr
    assert 'did you mean [tables."shop.ordrs"]?' in p.stderr
    assert "Traceback" not in p.stderr and "Spark's log" not in p.stderr
    assert not (tmp_path / "lakehouse" / "shop").exists()  # main unchanged: no table, no data file
    assert (landing / "o.parquet").exists()
    p = subprocess.run([WAP, "runs", "--config", cfg, "--json"], capture_output=True, text=True, env=clean_env())
    (row,) = json.loads(p.stdout)["runs"]  # recorded, with its reason in one line
    assert row["status"] == "failed" and row["reason"].startswith('no [tables."shop.orders"] section')


@pytest.mark.spark
def test_a_table_without_checks_publishes_with_no_checks_and_says_so(spark, tmp_path, landing):
    src = tmp_path / "drop"
    src.mkdir()
    _orders(src)
    source = f'[sources.orders]\ntable = "shop.orders"\nlocation = "{src}"\nsettle_seconds = 0\n'
    cfg = _shop_config(tmp_path, '[tables."shop.orders"]\nschema = "strict"\n\n' + source, "cli_nochecks")
    f = _orders(landing)

    r = wap("run", "shop.orders", f, "--config", cfg)
    assert r.exit_code == 2, r.output
    assert "shop.orders has no checks" in r.stderr
    assert 'declare checks = [] in [tables."shop.orders"], or pass --no-checks' in r.stderr
    for command in (["ingest", "orders"], ["backfill", "orders"], ["watch", "orders", "--once"]):
        r = wap(*command, "--config", cfg)
        assert r.exit_code == 2 and "shop.orders has no checks" in r.stderr, (command, r.output)
    assert "--no-checks" not in wap("watch", "orders", "--once", "--config", cfg).stderr  # wap.toml's word only
    assert as_json(wap("files", "--config", cfg, "--json"))["files"] == []  # no file was claimed

    r = wap("run", "shop.orders", f, "--no-checks", "--config", cfg, "--json")
    assert r.exit_code == 0, r.output
    doc = as_json(r)
    assert doc["status"] == "published" and doc["message"].endswith("without checks (--no-checks)")
    assert [c["threshold"] for c in doc["checks"]] == ["published without checks: --no-checks"]
    report = wap("report", doc["run_id"], "--config", cfg)
    assert "published without checks: --no-checks" in report.stdout

    r = wap("ingest", "orders", "--no-checks", "--config", cfg, "--json")
    assert r.exit_code == 0, r.output
    assert [x["state"] for x in as_json(r)["files"]] == ["published"]


def test_a_file_published_already_is_refused_unless_again(spark, tmp_path, landing):
    """`wap run` of a file this table published already (same path, size and version: the ledger's identity)
    exits 2 naming the run that published it, main unchanged; a copy under another name and a rewritten file
    are other files; --again publishes the same file again."""
    import shutil

    from wapflow.config import load_config
    from wapflow.lakehouse.pyiceberg_client import open_catalog

    cfg = str(write_config(tmp_path, "cli_once"))
    f = trips_file(landing, "once.parquet", 50)

    def rows_on_main() -> int:
        return len(open_catalog(load_config(cfg), why="the test").load_table("nyc.trips").scan().to_arrow())

    first = as_json(wap("run", "nyc.trips", str(f), "--config", cfg, "--json"))
    assert first["status"] == "published" and rows_on_main() == 50

    r = wap("run", "nyc.trips", str(f), "--config", cfg)
    assert r.exit_code == 2, r.output
    assert f"{f} by run {first['run_id']}" in r.stderr and "--again" in r.stderr, r.stderr
    assert "Traceback" not in r.output and rows_on_main() == 50
    refused = as_json(wap("run", "nyc.trips", str(f), "--config", cfg, "--json"))
    assert refused["status"] == "failed" and first["run_id"] in refused["error"]["message"], refused

    copy = landing / "once-copy.parquet"
    shutil.copy2(f, copy)  # the same bytes and mtime under another name: another file, as the ledger sees it
    assert as_json(wap("run", "nyc.trips", str(copy), "--config", cfg, "--json"))["status"] == "published"
    trips_file(landing, "once.parquet", 20, start_id=1000)  # rewritten in place: a new version of the file
    assert as_json(wap("run", "nyc.trips", str(f), "--config", cfg, "--json"))["status"] == "published"
    assert rows_on_main() == 120

    again = wap("run", "nyc.trips", str(f), "--again", "--config", cfg, "--json")
    assert again.exit_code == 0 and as_json(again)["status"] == "published", again.output
    assert rows_on_main() == 140
