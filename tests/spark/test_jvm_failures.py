"""What the JVM side does when things go wrong: a JDBC catalog is loaded once, under a lock shared by every wap
process on its database, before any step touches it (wapflow.lakehouse.session.initialize_jdbc_catalog); an
exception nobody named reports the Java cause behind a Py4J call, not only which call raised it; the JVM out of
memory is an environment error that names memory."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from support.data import make_config
from wapflow.lakehouse.session import initialize_jdbc_catalog, register_catalog
from wapflow.spark import errors as spark_errors

pytestmark = pytest.mark.spark


def test_a_new_embedded_catalog_is_initialized_in_the_v1_shape_under_its_lock(spark: Any, tmp_path: Path) -> None:
    cfg = make_config(tmp_path)
    register_catalog(spark, cfg)
    db = cfg.embedded_catalog_path()
    with sqlite3.connect(db) as conn:
        assert not conn.execute("SELECT name FROM sqlite_master WHERE name = 'iceberg_tables'").fetchall()

    initialize_jdbc_catalog(spark, cfg)

    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        columns = {r[1] for r in conn.execute("PRAGMA table_info(iceberg_tables)")}
    assert {"iceberg_tables", "iceberg_namespace_properties"} <= tables
    assert "iceberg_type" in columns  # the V1 schema: Iceberg's migration ran in the warm-up, not in a step
    assert list((db.parent / "locks").glob("*.lock"))  # the lock every process on this database takes
    # Idempotent: a second process (or a second call) finds the catalog ready.
    initialize_jdbc_catalog(spark, cfg)
    assert spark.catalog.tableExists(f"{cfg.lakehouse.catalog_name}.k.missing") is False


def test_a_catalog_that_is_not_jdbc_is_left_alone(spark: Any, tmp_path: Path) -> None:
    cfg = make_config(tmp_path, catalog="hadoop")
    initialize_jdbc_catalog(spark, cfg)
    assert not (cfg.embedded_catalog_path().parent / "locks").exists()


def test_an_unnamed_java_failure_names_its_java_cause(spark: Any) -> None:
    with pytest.raises(Exception) as raised:
        spark._jvm.java.util.ArrayList().get(5)
    assert "An error occurred while calling" in str(raised.value)  # all Py4J's own text says
    err = spark_errors.named_or_bug(raised.value, doing="auditing", run_id="r1", step="audit").to_dict()
    assert err["kind"] == "bug" and err["exit_code"] == 3 and err["run_id"] == "r1" and err["step"] == "audit"
    assert "IndexOutOfBoundsException: Index 5 out of bounds for length 0" in err["message"], err["message"]
    assert "An error occurred while calling" not in err["message"]


def test_the_jvm_out_of_memory_is_an_environment_error_naming_memory(spark: Any) -> None:
    """A real OutOfMemoryError of the driver's JVM (an array larger than the heap), caught by Py4J."""
    jvm = spark._jvm
    with pytest.raises(Exception) as raised:
        jvm.java.lang.reflect.Array.newInstance(jvm.java.lang.Long.TYPE, 2**31 - 16)
    err = spark_errors.named_or_bug(raised.value, doing="auditing nyc.trips", run_id="r1", step="audit")
    assert err.kind == "environment" and err.exit_code == 3 and not err.retryable, err.to_dict()
    assert "Spark ran out of memory while auditing nyc.trips" in err.message and "OutOfMemoryError" in err.message
    assert err.hint is not None and "driver_memory" in err.hint
    assert spark.range(3).count() == 3  # the session lives on
