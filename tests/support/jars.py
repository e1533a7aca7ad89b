"""The jars a fresh machine lacks (a pytest plugin, see tests/conftest.py). A test that checks the jar cache
(`wap doctor` reports "jars: ok" only when every jar its config needs is there) fetches them itself, the way
`wap setup` does, instead of relying on an earlier test or `make test` having filled the cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from wapflow.config import LakehouseConfig
from wapflow.lakehouse import jvm


@pytest.fixture(scope="session")
def setup_jars() -> Path:
    """Every jar `wap setup` fetches for some test's config: the core ones, the S3 ones and the PostgreSQL JDBC
    driver, into the cache the tests' `wap` processes read (WAP_JARS_DIR, else ~/.cache/wapflow/jars).
    Already cached jars are not fetched again."""
    folder = jvm.default_jars_dir()
    repo = LakehouseConfig.model_fields["maven_repo"].default
    for art in jvm.planned_artifacts([], s3=True, postgresql=True):
        jvm.fetch_artifact(art, folder, repo)
    return folder
