"""`wap history` and `wap branches` without a JVM on the server catalogs (issue 24): Iceberg's REST server and
the JDBC catalog on PostgreSQL (tests/support/rest_server.py, pg_server.py). Tables are made by runs on the
tests' shared SparkSession (the scene); each read-only command then runs as a `wap` process with no Spark to
start (SPARK_HOME points nowhere), and its --json document and exit code are compared with the same command
read through Spark (WAP_METADATA=spark: the CLI in the test process, on the shared session). Errors too: a
catalog nobody listens on, a refused password (Spark's answer to those on PostgreSQL is asserted on `wap run`
in test_postgres.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from support.catalogs import catalog_config, no_jvm
from support.cli_harness import Proc, env, setup_run, unique_catalog
from support.data import trips_file
from wapflow.lakehouse.processes import free_port


def config(folder: Path, lakehouse: str, table: str, catalog: str = "lake") -> Path:
    return catalog_config(folder, lakehouse, table, catalog=catalog)


def via_spark(*args: str) -> Proc:
    """The same command read through Spark (WAP_METADATA=spark): the CLI in this process, on the tests' shared
    SparkSession (the config's catalog name must be its own: unique_catalog), instead of a JVM of its own."""
    from support.typer_cli import wap as wap_here

    with mock.patch.dict(os.environ, {"WAP_METADATA": "spark"}):
        res = wap_here(*args)
    return Proc(res.exit_code, res.stdout, res.stderr)


def error_of(p: Proc) -> tuple[int, str, str]:
    doc: dict[str, Any] = json.loads(p.stdout)
    return p.code, doc["error"]["type"], doc["error"]["kind"]


def make_tables(cfg: Path, table: str, landing: Path, spark: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A published and a blocked run on the tests' shared SparkSession (the scene only: what is compared are the
    read-only commands after it)."""
    clean = trips_file(landing, "clean.parquet", 80)
    dirty = trips_file(landing, "dirty.parquet", 40, null_rate=0.1, start_id=1000, seed=3)
    done, held = setup_run(spark, cfg, table, clean), setup_run(spark, cfg, table, dirty)
    assert (done.status, held.status) == ("published", "blocked"), (done.message, held.message)
    return done.to_dict(), held.to_dict()


def dashboard(cfg: Path, table: str) -> dict[str, Any]:
    """The dashboard's numbers (wapflow.service.dashboard) in a process where pyspark cannot be imported."""
    code = (
        "import json, sys; sys.modules['pyspark'] = None\n"
        "from wapflow.service import dashboard as svc\n"
        f"src = svc.open_sources({str(cfg)!r})\n"
        f"kept = svc.branch_names(src)\n"
        f"print(json.dumps({{'overview': svc.overview(src), 'table': svc.table_detail(src, {table!r}), "
        "'branch': svc.branch_detail(src, kept[0])}, default=str))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env())
    assert p.returncode == 0, p.stderr
    doc: dict[str, Any] = json.loads(p.stdout)
    return doc


def same_as_spark(cfg: Path, table: str, published: dict[str, Any], blocked: dict[str, Any]) -> None:
    for args in (("history", table), ("branches",)):
        new = no_jvm(*args, "--config", str(cfg), "--json")
        old = via_spark(*args, "--config", str(cfg), "--json")
        assert (new.code, new.stdout) == (old.code, old.stdout), (args, new.text, old.text)
    history = no_jvm("history", table, "--config", str(cfg), "--json").doc["snapshots"]
    assert history[0]["snapshot_id"] == published["snapshot_id"] and history[0]["run_id"] == published["run_id"]
    kept = no_jvm("branches", table, "--config", str(cfg), "--json")
    assert kept.code == 0, kept.text
    assert [(b["branch"], b["head_snapshot_id"]) for b in kept.doc["branches"]] == [
        (blocked["branch"], blocked["snapshot_id"])
    ]
    # The dashboard's table page and overview: main's history and rows from the same metadata, no Spark either.
    dash = dashboard(cfg, table)
    assert [h["snapshot_id"] for h in dash["table"]["history"]] == [h["snapshot_id"] for h in history]
    assert [h["run_id"] for h in dash["table"]["history"]] == [h["run_id"] for h in history]
    assert dash["table"]["rows_on_main"] == history[0]["total_rows"] == published["rows_written"]
    # (the session's REST server may hold other tests' tables too)
    assert [(t["table"], t["main_snapshot_id"]) for t in dash["overview"]["tables"] if t["table"] == table] == [
        (table, published["snapshot_id"])
    ]
    assert dash["branch"]["tables"][0]["head_snapshot_id"] == blocked["snapshot_id"]
    missing = no_jvm("history", table + "x", "--config", str(cfg), "--json")
    assert error_of(missing) == (2, "NotFound", "config"), missing.text
    assert f"did you mean '{table}'" in missing.doc["error"]["message"]


@pytest.mark.slow  # the catalog servers
def test_rest_catalog_metadata_without_a_jvm(rest_catalog, tmp_path, landing, spark):
    table = "meta_rest.trips"
    rest = f'catalog = "rest"\ncatalog_properties = {{ uri = "{rest_catalog.url}" }}\n'
    cfg = config(tmp_path / "p", rest, table, catalog=unique_catalog("rest"))
    published, blocked = make_tables(cfg, table, landing, spark)
    same_as_spark(cfg, table, published, blocked)

    gone = config(
        tmp_path / "gone",
        f'catalog = "rest"\ncatalog_properties = {{ uri = "http://127.0.0.1:{free_port()}" }}\n',
        table,
        catalog=unique_catalog("gone"),
    )
    new = no_jvm("history", table, "--config", str(gone), "--json")
    old = via_spark("history", table, "--config", str(gone), "--json")
    assert error_of(new) == error_of(old) == (5, "Unreachable", "transient"), (new.text, old.text)
    assert "could not reach the Iceberg catalog" in new.doc["error"]["message"]


@pytest.mark.slow  # the catalog servers
def test_postgresql_jdbc_catalog_metadata_without_a_jvm(pg, pg_db, tmp_path, landing, spark):
    table = "meta_pg.trips"

    def on_pg(uri: str, password: str) -> str:
        return (
            f'catalog = "jdbc"\ncatalog_properties = {{ uri = "{uri}", "jdbc.user" = "{pg_db.user}", '
            f'"jdbc.password" = "{password}", "jdbc.schema-version" = "V1" }}\n'
        )

    cfg = config(tmp_path / "p", on_pg(pg_db.jdbc, pg_db.password), table, catalog=unique_catalog("pg"))
    published, blocked = make_tables(cfg, table, landing, spark)
    same_as_spark(cfg, table, published, blocked)

    # What Spark's path answers for these two (its own JVM each, the same classifier of the JDBC driver's SQLSTATE
    # as any command through Spark) is asserted on `wap run` in test_postgres.py's wrong-password test.
    cases = [
        (on_pg(pg_db.jdbc, "Wrong-pw-2b9e"), (3, "EnvironmentProblem", "environment")),
        (
            on_pg(pg_db.jdbc.replace(f":{pg.port}/", f":{free_port()}/"), pg_db.password),
            (5, "Unreachable", "transient"),
        ),
    ]
    for i, (lakehouse, expected) in enumerate(cases):
        bad = config(tmp_path / f"bad{i}", lakehouse, table)
        new = no_jvm("history", table, "--config", str(bad), "--json")
        assert error_of(new) == expected, new.text
        assert "PostgreSQL" in new.doc["error"]["message"] and "Wrong-pw" not in new.text
