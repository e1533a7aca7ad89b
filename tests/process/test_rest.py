"""WAP on an Iceberg REST catalog (issue 13): real `wap` processes against Iceberg's own REST server fixture
(tests/support/rest_server.py: a real HTTP server on 127.0.0.1, JDBC catalog on SQLite, local warehouse), read back
independently by PyIceberg's RestCatalog on the same server (no Spark, no wapflow code). The first, published run
only sets the scene for the blocked run, `wap discard` and `wap revert`: it runs on the tests' shared SparkSession
(support.cli_harness.setup_run, the same Spark and Iceberg REST client code as a `wap run` without its JVM start).

Table branches on REST: Spark's `ALTER TABLE ... CREATE/DROP BRANCH`, the fast_forward procedure and the
Iceberg Java API wapflow calls through Spark3Util (table metadata, `wap revert`) all go through Iceberg's
RESTCatalog client; each step below is checked on the server's side.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from support.cli_harness import checksum, setup_run, unique_catalog, wap
from support.data import TRIPS_CHECKS, trips_file
from wapflow.lakehouse.model import REVERTED_PROP, RUN_ID_PROP
from wapflow.lakehouse.processes import free_port


def rest_config(folder: Path, uri: str, table: str, catalog: str = "lake") -> Path:
    """A wap.toml as a user writes it for a REST catalog. [lakehouse].warehouse is a folder of this project,
    not the server's: the server decides where tables live, wapflow keeps its run store and logs there.
    `catalog`: the Spark catalog name (unique_catalog's when a run of it is made on the shared session)."""
    folder.mkdir(parents=True, exist_ok=True)
    checks = "\n".join("  { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in c.items()) + " }," for c in TRIPS_CHECKS)
    cfg = folder / "wap.toml"
    cfg.write_text(
        textwrap.dedent(
            f"""\
            [lakehouse]
            warehouse = "{folder / "state"}"
            catalog = "rest"
            catalog_name = "{catalog}"
            catalog_properties = {{ uri = "{uri}" }}
            master = "local[2]"
            driver_memory = "1g"

            [lakehouse.spark_conf]
            "spark.sql.shuffle.partitions" = "2"

            [tables."{table}"]
            checks = [
            """
        )
        + checks
        + "\n]\n"
    )
    return cfg


def branches(table: Any) -> dict[str, int]:
    """Branches other than main, with their heads, as the server's metadata has them."""
    return {
        name: ref.snapshot_id
        for name, ref in table.metadata.refs.items()
        if name != "main" and str(ref.snapshot_ref_type).lower().endswith("branch")
    }


def local_path(location: str) -> Path:
    return Path(location.removeprefix("file://").removeprefix("file:"))


@pytest.mark.slow  # three `wap` commands through one warm engine (one Spark application)
def test_publish_block_discard_and_revert_on_a_rest_catalog(rest_catalog, tmp_path, landing, spark, engine):
    from pyiceberg.catalog.rest import RestCatalog

    table = "rest_nyc.trips"
    project = tmp_path / "project"
    cfg = str(rest_config(project, rest_catalog.url, table, catalog=unique_catalog("rest")))
    clean = trips_file(landing, "clean.parquet", 200)
    dirty = trips_file(landing, "dirty.parquet", 200, null_rate=0.05, start_id=1000, seed=3)
    reader = RestCatalog("reader", uri=rest_catalog.url)
    clean_rows = checksum(pq.read_table(clean).to_pylist(), "trip_id")

    # 1. A clean file is published (on the shared session: the scene): main is the run's snapshot and holds
    #    exactly the file's rows; no branch left.
    done = setup_run(spark, Path(cfg), table, clean)
    published = done.to_dict()
    assert published["status"] == "published" and published["rows_written"] == 200, done.message
    assert published["published_via"] == "fast_forward"
    t = reader.load_table(table)
    main = t.current_snapshot()
    assert main is not None and main.snapshot_id == published["snapshot_id"]
    assert t.metadata.refs["main"].snapshot_id == published["snapshot_id"]
    assert main.summary.additional_properties.get(RUN_ID_PROP) == published["run_id"]
    assert checksum(t.scan().to_arrow().to_pylist(), "trip_id") == clean_rows
    assert branches(t) == {}
    # The server chose the table's place (its warehouse); nothing of the table is in the project's folder.
    location = local_path(t.location())
    assert location.is_relative_to(rest_catalog.warehouse), t.location()
    assert list((location / "data").rglob("*.parquet"))
    assert not list(project.rglob("*.parquet")) and not list(project.rglob("*.metadata.json"))
    assert (project / "state" / "wapflow_runs.db").is_file()  # wapflow's own state stays local

    # 2. A file with NULLs in a not_null column is blocked: main unchanged, the branch kept with the rows.
    r = wap("run", table, str(dirty), "--config", cfg, "--json", **engine)
    assert r.code == 1, r.text
    blocked = r.doc
    assert blocked["status"] == "blocked" and blocked["branch_kept"], r.text
    assert [c["check"] for c in blocked["checks"] if c["status"] == "failed"] == ["not_null"]
    t = reader.load_table(table)
    assert t.metadata.refs["main"].snapshot_id == published["snapshot_id"]
    assert checksum(t.scan().to_arrow().to_pylist(), "trip_id") == clean_rows
    assert branches(t) == {blocked["branch"]: blocked["snapshot_id"]}
    on_branch = t.scan().use_ref(blocked["branch"]).to_arrow()
    assert on_branch.num_rows == 400
    assert pc.sum(pc.is_null(on_branch["passenger_count"])).as_py() == 10

    # 3. Discarding the kept branch drops it on the server; main stays where it was.
    r = wap("discard", blocked["branch"], "--config", cfg, **engine)
    assert r.code == 0, r.text
    t = reader.load_table(table)
    assert branches(t) == {}
    assert t.metadata.refs["main"].snapshot_id == published["snapshot_id"]

    # 4. Reverting the published run (Iceberg's Java API through the REST client): one new snapshot on main,
    #    child of the run's, that takes exactly its rows off.
    r = wap("revert", published["run_id"], "--config", cfg, "--json", **engine)
    assert r.code == 0, r.text
    t = reader.load_table(table)
    main = t.current_snapshot()
    assert main is not None and main.snapshot_id == r.doc["snapshot_id"] != published["snapshot_id"]
    assert main.parent_snapshot_id == published["snapshot_id"]
    assert main.summary.additional_properties.get(REVERTED_PROP) == published["run_id"]
    assert t.scan().to_arrow().num_rows == 0


def test_a_rest_catalog_that_is_not_there_is_transient(tmp_path, landing):
    """A REST catalog nobody listens for: a retry may help (exit 5), and the message says what was not reached."""
    src = trips_file(landing, "batch.parquet", 20)
    cfg = str(rest_config(tmp_path / "project", f"http://127.0.0.1:{free_port()}", "rest_nyc.trips"))
    r = wap("run", "rest_nyc.trips", str(src), "--config", cfg, "--json")
    assert r.doc["error"] is not None and r.doc["status"] == "failed", r.text
    assert (r.code, r.doc["error"]["kind"]) == (5, "transient"), r.text
    assert "could not reach" in r.doc["error"]["message"], r.text
    assert src.exists()


@pytest.mark.usefixtures("setup_jars")  # "jars: ok" on a fresh machine too
def test_wap_doctor_reaches_the_rest_catalog(rest_catalog, tmp_path):
    """`wap doctor` asks the server's /v1/config; a port where nothing listens is a failure naming it."""
    good = rest_config(tmp_path / "good", rest_catalog.url, "rest_nyc.doctor")
    p = wap("doctor", "--config", str(good), "--json")
    catalog = [f for f in json.loads(p.stdout)["findings"] if f["part"] == "catalog"]
    assert p.code == 0 and [f["status"] for f in catalog] == ["ok"], p.text
    assert f"{rest_catalog.url}/v1/config answers 200" in catalog[0]["detail"]
    # Iceberg's reference server lists the multi-table commit, which it applies table by table: a warning.
    (group,) = [f for f in json.loads(p.stdout)["findings"] if f["part"] == "group commit"]
    assert group["status"] == "warn" and "not known to commit a group atomically" in group["detail"], group
    assert "rest_group_commit" in group["fix"]
    said = rest_config(tmp_path / "said", rest_catalog.url, "rest_nyc.doctor")
    said.write_text(said.read_text().replace("[lakehouse]\n", '[lakehouse]\nrest_group_commit = "table_by_table"\n', 1))
    p = wap("doctor", "--config", str(said), "--json")
    (group,) = [f for f in json.loads(p.stdout)["findings"] if f["part"] == "group commit"]
    assert group["status"] == "warn" and "commits a group table by table" in group["detail"], p.text
    port = free_port()
    bad = rest_config(tmp_path / "bad", f"http://127.0.0.1:{port}", "rest_nyc.doctor")
    p = wap("doctor", "--config", str(bad), "--json")
    catalog = [f for f in json.loads(p.stdout)["findings"] if f["part"] == "catalog"]
    assert p.code == 3 and catalog[0]["status"] == "fail" and str(port) in catalog[0]["detail"], p.text
