"""Spark fixtures (a pytest plugin, see tests/conftest.py): one real SparkSession for the whole test session,
a fresh lakehouse per test.

Each test gets its own warehouse folder and its own Spark catalog name (catalogs are registered on
the running session), so tests never see each other's tables while paying for one JVM start.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.data import TRIPS_CHECKS, make_config
from wapflow.config import parse_config
from wapflow.lakehouse.lakehouse import Lakehouse


@pytest.fixture(scope="session", autouse=True)
def _jvm_class_archive(request: pytest.FixtureRequest) -> Iterator[None]:
    """Driver JVMs map wapflow's class archive (made by `make test`'s `wap setup`, else here in the background
    while the tests run; `WAP_CLASS_ARCHIVE=off` to measure the difference)."""
    from support import cli_harness

    if any(item.get_closest_marker("spark") for item in request.session.items):
        cli_harness.use_class_archive()
    yield
    cli_harness.class_archive_done()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from wapflow.lakehouse import jvm
    from wapflow.lakehouse.session import build_session

    base = tmp_path_factory.mktemp("spark-base")
    cfg = parse_config(
        {
            "lakehouse": {
                "warehouse": str(base / "wh"),
                "catalog_name": "boot",
                "master": "local[2]",
                "driver_memory": "1g",
                "spark_conf": {"spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "2"},
                # The PostgreSQL JDBC driver (wapflow's pin, from the jar cache), as a jdbc:postgresql catalog gets
                # it: runs on JDBC catalogs on PostgreSQL can set a test's scene on this session (setup_run).
                "extra_packages": [jvm.POSTGRESQL_JDBC.coordinate],
            },
            # Issue 5: an [s3] section puts the S3 jars (iceberg-aws-bundle, hadoop-aws) on this one
            # session's classpath; tests/spark/test_s3.py then registers S3 catalogs and S3A settings at runtime.
            "s3": {},
        }
    )
    # The AWS SDKs must never look for credentials or a region on a cloud metadata service from tests.
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    session = build_session(cfg)
    yield session
    session.stop()


@pytest.fixture
def lakehouse_factory(spark: Any, tmp_path: Path) -> Callable[..., Lakehouse]:
    def make(tables: dict[str, Any] | None = None, **lakehouse: Any) -> Lakehouse:
        return Lakehouse(make_config(tmp_path, tables, **lakehouse), spark=spark)

    return make


@pytest.fixture
def trips_lakehouse(lakehouse_factory: Callable[..., Lakehouse]) -> Lakehouse:
    """A lakehouse whose nyc.trips table has the README's six checks."""
    return lakehouse_factory({"nyc.trips": {"checks": TRIPS_CHECKS}})
