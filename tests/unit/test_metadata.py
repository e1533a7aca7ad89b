"""Table metadata without Spark (wapflow.lakehouse.metadata): the one parser of Iceberg's metadata JSON, the
JDBC catalog's rows on a real SQLite file, gzip'd metadata files, and what an unreachable catalog is."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from wapflow.config import parse_config
from wapflow.errors import EnvironmentProblem, Unreachable
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.metadata import CatalogTables, JdbcSource, RestSource, read_metadata_file, source_for
from wapflow.lakehouse.model import Ref, refs_of, snapshots_of
from wapflow.lakehouse.processes import free_port
from wapflow.sql.identifiers import TableName
from wapflow.storage import Storage

TRIPS = TableName(("nyc",), "trips")


def metadata(current: int | None = 2, refs: dict | None = None) -> dict:
    """Iceberg metadata JSON as TableMetadataParser writes it (the fields wapflow reads)."""
    doc: dict = {
        "format-version": 2,
        "current-snapshot-id": current if current is not None else -1,
        "snapshots": [
            {"snapshot-id": 1, "timestamp-ms": 1_700_000_000_000, "summary": {"operation": "append"}},
            {
                "snapshot-id": 2,
                "parent-snapshot-id": 1,
                "timestamp-ms": 1_700_000_060_000,
                "summary": {"operation": "append", "added-records": "5", "wap.run-id": "r2"},
            },
            {"snapshot-id": 3, "parent-snapshot-id": 2, "timestamp-ms": 1_700_000_120_000, "summary": {}},
        ],
    }
    if refs is not None:
        doc["refs"] = refs
    return doc


def test_the_metadata_json_parses_into_snapshots_and_refs():
    meta = metadata(refs={"main": {"snapshot-id": 2, "type": "branch"}, "wap_x": {"snapshot-id": 3, "type": "branch"}})
    snaps = snapshots_of(meta)
    assert sorted(snaps) == [1, 2, 3]
    assert snaps[2].parent_id == 1 and snaps[1].parent_id is None
    assert snaps[2].operation == "append" and snaps[2].added_records == 5 and "operation" not in snaps[2].summary
    assert snaps[3].operation is None
    assert refs_of(meta) == {"main": Ref("main", "BRANCH", 2), "wap_x": Ref("wap_x", "BRANCH", 3)}
    # A table written without refs (format v1): main is the current snapshot; an empty table has no main.
    assert refs_of(metadata(current=2)) == {"main": Ref("main", "BRANCH", 2)}
    assert refs_of(metadata(current=None)) == {}


def catalog_db(folder: Path, rows: list[tuple[str, str, str, str]]) -> Path:
    """An Iceberg JDBC catalog's tables (schema V1) with the given (catalog, namespace, name, location) rows."""
    db = folder / "catalog.db"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE iceberg_tables(catalog_name VARCHAR(255) NOT NULL, table_namespace VARCHAR(255) NOT NULL, "
            "table_name VARCHAR(255) NOT NULL, metadata_location VARCHAR(1000), previous_metadata_location "
            "VARCHAR(1000), iceberg_type VARCHAR(5), PRIMARY KEY (catalog_name, table_namespace, table_name))"
        )
        conn.executemany(
            "INSERT INTO iceberg_tables VALUES (?, ?, ?, ?, NULL, ?)",
            [(*r, "TABLE") for r in rows] + [("lake", "nyc", "a_view", "x", "VIEW")],
        )
    return db


def test_the_jdbc_catalog_rows_and_metadata_files_are_read_without_spark(tmp_path):
    plain = tmp_path / "00001-a.metadata.json"
    plain.write_text(json.dumps(metadata(refs={"main": {"snapshot-id": 2, "type": "branch"}})))
    zipped = tmp_path / "00002-b.gz.metadata.json"
    zipped.write_bytes(gzip.compress(json.dumps(metadata(current=3)).encode()))
    db = catalog_db(
        tmp_path,
        [
            ("lake", "nyc", "trips", f"file:{plain}"),
            ("lake", "a.b", "deep", str(zipped)),
            ("other", "nyc", "elsewhere", str(plain)),
        ],
    )
    view = CatalogTables(JdbcSource(f"sqlite:///{db}", "lake", Storage(s3_enabled=False)), "lake")
    assert [t.dotted for t in view.list_tables()] == ["a.b.deep", "nyc.trips"]  # this catalog's tables, no views
    assert view.exists(TRIPS) and not view.exists(TableName(("nyc",), "elsewhere"))
    assert view.head(TRIPS) == 2 and view.head(TableName(("a", "b"), "deep")) == 3
    assert [s.snapshot_id for s in view.ancestry(view.snapshots(TRIPS), view.head(TRIPS))] == [2, 1]
    assert view.snapshots(TableName(("nyc",), "nothing")) == {}


def test_a_metadata_file_that_is_gone_is_an_environment_problem(tmp_path):
    with pytest.raises(EnvironmentProblem, match="cannot be read"):
        read_metadata_file(Storage(s3_enabled=False), str(tmp_path / "gone.metadata.json"), TRIPS)


def test_which_catalogs_are_read_directly(tmp_path, monkeypatch):
    def source(lakehouse: dict) -> object:
        cfg = parse_config({"lakehouse": {"warehouse": str(tmp_path / "wh"), **lakehouse}})
        return source_for(cfg, Storage(s3_enabled=False))

    assert isinstance(source({}), JdbcSource)
    assert isinstance(
        source({"catalog": "jdbc", "catalog_properties": {"uri": "jdbc:postgresql://h:5432/d"}}), JdbcSource
    )
    assert isinstance(source({"catalog": "rest", "catalog_properties": {"uri": "http://h:8181"}}), RestSource)
    assert source({"catalog": "jdbc", "catalog_properties": {"uri": "jdbc:mysql://h/d"}}) is None  # through Spark
    assert source({"catalog": "hive", "catalog_properties": {"uri": "thrift://h:9083"}}) is None
    monkeypatch.setenv("WAP_METADATA", "spark")
    assert source({}) is None


def test_a_catalog_nobody_listens_on_is_transient(tmp_path):
    """A REST catalog or a PostgreSQL catalog database on a port where nothing listens: Unreachable (exit 5),
    as `wap run` says it; no JVM is involved."""
    port = free_port()
    for lakehouse in (
        {"catalog": "rest", "catalog_properties": {"uri": f"http://127.0.0.1:{port}"}},
        {
            "catalog": "jdbc",
            "catalog_properties": {"uri": f"jdbc:postgresql://127.0.0.1:{port}/db", "jdbc.user": "u"},
        },
    ):
        lh = Lakehouse(parse_config({"lakehouse": {"warehouse": str(tmp_path / "wh"), **lakehouse}}))
        with pytest.raises(Unreachable) as caught:
            lh.metadata.exists(TRIPS)
        assert caught.value.exit_code == 5 and str(port) in caught.value.message


@pytest.mark.parametrize(
    ("location", "snapshot", "readable"),
    [
        ("/wh/nyc/trips", {"snapshot-id": 1, "manifest-list": "/wh/nyc/trips/metadata/snap-1.avro"}, True),
        ("s3://lake/nyc/trips", {"snapshot-id": 1, "manifest-list": "s3://lake/m/snap-1.avro"}, True),
        ("gs://lake/nyc/trips", {"snapshot-id": 1, "manifest-list": "gs://lake/m/snap-1.avro"}, False),
        ("/wh/nyc/trips", {"snapshot-id": 1, "manifests": ["/wh/nyc/trips/metadata/m1.avro"]}, False),  # early v1
    ],
)
def test_file_metrics_come_from_the_manifests_only_where_wapflow_can_read_them(
    location: str, snapshot: dict[str, object], readable: bool
) -> None:
    """Elsewhere (another filesystem, an early v1 table's inline manifests) the metadata tables answer through
    Spark, and a view without Spark says what to do instead of guessing."""
    from wapflow.lakehouse.manifests import ManifestMetrics

    meta = {"location": location, "snapshots": [snapshot]}
    table = TableName.parse("nyc.trips")
    assert ManifestMetrics.available(meta) is readable
    assert not ManifestMetrics.available(None)

    class One:
        def load(self, _: TableName) -> dict[str, object]:
            return meta

        def list_tables(self) -> list[TableName]:
            return [table]

    view = CatalogTables(One(), "lake", ManifestMetrics(Storage(s3_enabled=False)))
    if not readable:
        with pytest.raises(EnvironmentProblem, match="without Spark") as e:
            view.added_file_metrics(table, "main", [1])
        assert "WAP_METADATA=spark" in (e.value.hint or "")


def test_a_one_off_process_keeps_the_spark_job_and_reads_manifests_from_its_second_audit_on() -> None:
    """PyIceberg's readers cost a fresh process more to import than the one metadata-table job they save: in a
    fresh interpreter the first ask says no, later ones yes (a watch worker, the engine)."""
    import subprocess
    import sys

    code = (
        "import sys; from wapflow.lakehouse.manifests import worth_loading as w; "
        "a = w(); print(a, 'pyiceberg.manifest' in sys.modules, w())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False", "True"]
