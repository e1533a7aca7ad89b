"""wapflow's own tables under Alembic (wapflow.runs.schema): a new store is made at head; a store written before
migrations existed (the SQL kept in tests/fixtures/stores, made by make_v0.py with that wapflow) is upgraded
with its runs, ledger and alerts intact; a store from a newer wapflow is refused (exit 2); two processes
starting on an old store at once migrate it once. PostgreSQL: tests/process/test_postgres.py."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from support.stores import store_at
from wapflow.cli import app
from wapflow.errors import ConfigError
from wapflow.runs import alerts, ledger, maintenance, metrics, outbox, schema  # noqa: F401 - their tables join METADATA
from wapflow.runs.store import RunStore

FIXTURES = Path(__file__).parent.parent / "fixtures" / "stores"
runner = CliRunner()


def v0_store(folder: Path) -> Path:
    """A run store as wapflow wrote it before migrations: three runs, four ledger rows, one alert."""
    db = folder / "runs.db"
    con = sqlite3.connect(db)
    con.executescript((FIXTURES / "store-v0.sqlite.sql").read_text())
    con.close()
    return db


def config(folder: Path, db: Path) -> Path:
    cfg = folder / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{folder / "lake"}"\nrun_store = "sqlite:///{db}"\n\n'
        f'[sources.trips]\ntable = "nyc.trips"\nlocation = "{folder / "land"}"\n'
    )
    return cfg


def versions(db: Path) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return [r[0] for r in con.execute(f"SELECT version_num FROM {schema.VERSION_TABLE}")]
    finally:
        con.close()


def test_a_new_store_is_made_at_head_and_matches_the_models(tmp_path: Path) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    assert schema.version(store.engine) == schema.SchemaVersion(schema.head(), schema.head())
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": schema.VERSION_TABLE})
        diffs = compare_metadata(ctx, schema.METADATA)
    assert diffs == [], diffs  # the head revision builds exactly the tables the models describe


def test_a_store_from_before_migrations_is_upgraded_with_every_row(tmp_path: Path) -> None:
    db = v0_store(tmp_path)
    # The columns each table had then: later revisions add columns (0004: a run's review), never change these.
    old_columns = {
        t: ", ".join(r[1] for r in sqlite3.connect(db).execute(f"PRAGMA table_info({t})"))
        for t in ("wap_runs", "wap_files", "wap_alerts")
    }
    before = {
        t: sqlite3.connect(db).execute(f"SELECT {cols} FROM {t} ORDER BY 1").fetchall()
        for t, cols in old_columns.items()
    }
    assert versions_table_absent(db)
    cfg = config(tmp_path, db)

    runs = runner.invoke(app, ["runs", "--config", str(cfg), "--json"])
    assert runs.exit_code == 0, runs.output
    assert versions(db) == [schema.head()]
    shown = {r["run_id"]: r["status"] for r in json.loads(runs.output)["runs"]}
    assert shown == {
        "20261124t120000_aaaaaa": "published",
        "20261124t120100_bbbbbb": "blocked",
        "ing_trips_0123456789abcdef": "running",  # its owner ran on another host: wapflow cannot tell it is gone
    }
    report = runner.invoke(app, ["report", "20261124t120100_bbbbbb", "--config", str(cfg), "--json"])
    assert report.exit_code == 0, report.output
    doc = json.loads(report.output)
    assert doc["branch_kept"] is True and doc["branch"] == "wap_b"

    files = runner.invoke(app, ["files", "trips", "--config", str(cfg), "--json"])
    assert files.exit_code == 0, files.output
    states = {Path(f["uri"]).name: f["state"] for f in json.loads(files.output)["files"]}
    assert states == {"a.parquet": "published", "b.parquet": "blocked", "c.parquet": "claimed", "d.parquet": "pending"}

    after = {
        t: sqlite3.connect(db).execute(f"SELECT {cols} FROM {t} ORDER BY 1").fetchall()
        for t, cols in old_columns.items()
    }
    assert after == before  # every row as it was, to the byte
    assert sqlite3.connect(db).execute("SELECT count(*) FROM wap_metrics").fetchone() == (0,)  # 0003: empty


def test_a_store_at_0002_gains_the_metric_history_with_its_rows_intact(tmp_path: Path) -> None:
    """A store of the release before the metric history (revision 0002) upgrades to head, rows untouched."""
    db = tmp_path / "runs.db"
    store_at(db, "0002")
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO wap_runs (run_id, table_name, status, files, checks, timings, started_at) "
                "VALUES ('r1', 'nyc.trips', 'published', '[]', '[]', '{}', '2026-11-20 10:00:00')"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO wap_maintenance (id, pass_id, table_name, action, status, figures, started_at) "
                "VALUES ('p.1', 'p', 'nyc.trips', 'compact', 'done', '{}', '2026-11-20 11:00:00')"
            )
        )
    engine.dispose()
    assert versions(db) == ["0002"]
    tables = ("wap_runs", "wap_maintenance")
    # The columns each table had at 0002 (later revisions may add columns; these rows must stay as they were).
    cols = {t: ", ".join(r[1] for r in sqlite3.connect(db).execute(f"PRAGMA table_info({t})")) for t in tables}
    before = {t: sqlite3.connect(db).execute(f"SELECT {cols[t]} FROM {t}").fetchall() for t in tables}

    res = runner.invoke(app, ["runs", "--config", str(config(tmp_path, db)), "--json"])
    assert res.exit_code == 0, res.output
    assert [r["run_id"] for r in json.loads(res.output)["runs"]] == ["r1"]
    assert versions(db) == [schema.head()]
    assert {t: sqlite3.connect(db).execute(f"SELECT {cols[t]} FROM {t}").fetchall() for t in tables} == before
    got = runner.invoke(app, ["metrics", "nyc.trips", "--config", str(config(tmp_path, db))])
    assert got.exit_code == 2 and "no metric history for nyc.trips" in got.output  # the new table, empty


def versions_table_absent(db: Path) -> bool:
    con = sqlite3.connect(db)
    try:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        con.close()
    return schema.VERSION_TABLE not in names and {"wap_runs", "wap_files", "wap_alerts"} <= names


def test_a_store_of_a_newer_wapflow_is_refused_with_exit_2(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    RunStore(f"sqlite:///{db}").close()
    con = sqlite3.connect(db)
    con.execute(f"UPDATE {schema.VERSION_TABLE} SET version_num = '9999_from_the_future'")
    con.commit()
    con.close()
    schema._done.clear()  # a new process, as far as the check is concerned
    res = runner.invoke(app, ["runs", "--config", str(config(tmp_path, db))])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "written by a newer wapflow" in text and "9999_from_the_future" in text and "Traceback" not in text
    with pytest.raises(ConfigError, match="upgrade wapflow"):
        RunStore(f"sqlite:///{db}")
    assert versions(db) == ["9999_from_the_future"]  # untouched


def test_two_processes_opening_an_old_store_at_once_migrate_it_once(tmp_path: Path) -> None:
    db = v0_store(tmp_path)
    code = (
        "import sys; from wapflow.runs.store import RunStore\n"
        "s = RunStore(sys.argv[1]); print(len(s.list())); s.close()\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, f"sqlite:///{db}"], stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0] and outs == ["3", "3", "3"]
    assert versions(db) == [schema.head()]
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM wap_files")).scalar() == 4
    engine.dispose()


def test_the_fast_path_head_is_alembics_head() -> None:
    """schema.HEAD (what a stamped database is compared with, without Alembic) is the newest migration."""
    assert schema.head() == schema.HEAD
