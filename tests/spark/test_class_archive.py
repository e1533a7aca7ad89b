"""The driver JVM maps wapflow's class archive (wapflow.lakehouse.class_archive) when `wap setup` made one, and
takes Iceberg's classes from it too.

`make test` runs `wap setup` first, which trains the archive for this Java, PySpark and core jars (a real WAP run
whose JVM writes it at exit); the shared test session was then started through build_session like any
command's, with the PostgreSQL and S3 jars besides (tests/support/spark.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from support.cli_harness import fast_start_jvm, wap, write_config
from support.data import trips_file
from wapflow.config import WapConfig
from wapflow.lakehouse import class_archive, jvm

pytestmark = pytest.mark.spark


def _archive() -> Path:
    java = jvm.find_java()
    assert java is not None
    archive = class_archive.path_for(WapConfig(), java)
    assert archive.is_file(), f"no class archive at {archive}: `make test` runs `wap setup`, which makes it"
    return archive


def test_the_driver_jvm_maps_the_class_archive_wap_setup_made(spark: Any) -> None:
    archive = _archive()
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    maps = Path(f"/proc/{pid}/maps").read_text(encoding="utf-8").splitlines()
    mapped = {line.split()[-1] for line in maps if ".jsa" in line}
    assert str(archive) in mapped, mapped


def test_the_core_jars_come_first_on_the_drivers_class_path_and_the_others_after_sparks(spark: Any) -> None:
    """The archive's condition (its training run's class path a prefix of this JVM's), with the S3 and PostgreSQL
    jars of this session on the same class path, after Spark's own jars."""
    entries = spark._jvm.java.lang.System.getProperty("java.class.path").split(os.pathsep)
    names = [Path(e).name for e in entries]
    assert names[:2] == [a.filename for a in jvm.CORE_ARTIFACTS], names[:4]
    spark_jars = max(i for i, e in enumerate(entries) if f"pyspark{os.sep}jars{os.sep}" in e)
    for art in (*jvm.S3_ARTIFACTS, jvm.POSTGRESQL_JDBC):
        assert names.index(art.filename) > spark_jars, (art.filename, names)


def test_a_wap_run_takes_icebergs_classes_from_the_archive(tmp_path: Path) -> None:
    """What the archive is for: a cold `wap run` maps Iceberg's classes instead of reading them from the runtime
    jar (the JVM's own class-loading log says where each class came from)."""
    _archive()
    cfg = write_config(tmp_path, tables='[tables."nyc.trips"]\nchecks = []\n')  # about class loading
    landing = tmp_path / "landing"
    logs = tmp_path / "classes"
    logs.mkdir()
    opts = f"{fast_start_jvm()} -Xlog:class+load=info:file={logs}/load-%p.log"
    p = wap(
        "run",
        "nyc.trips",
        str(trips_file(landing, "a.parquet", 20)),
        "--config",
        str(cfg),
        WAP_ENGINE="off",
        JAVA_TOOL_OPTIONS=opts,
    )
    assert p.code == 0, p.text
    loads = [line for f in logs.glob("load-*.log") for line in f.read_text(encoding="utf-8").splitlines()]
    catalog = [line for line in loads if " org.apache.iceberg.spark.SparkCatalog " in line]
    assert catalog and all("source: shared objects file" in line for line in catalog), catalog
    # Through Spark's own class loader (`spark.jars`), about 800 were still read from the jar at every start (a
    # third); a few that the training run never loaded may be (a code path it did not take).
    read = [line for line in loads if "source: file:" in line and jvm.ICEBERG_RUNTIME.filename in line]
    shared = [line for line in loads if " org.apache.iceberg." in line and "source: shared objects file" in line]
    assert len(read) < 0.05 * len(shared), f"{len(read)} classes read from the runtime jar, e.g. {read[:3]}"
