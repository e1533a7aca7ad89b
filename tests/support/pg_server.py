"""The test session's PostgreSQL: a real server (Debian's PostgreSQL, the newest under /usr/lib/postgresql) on
a free 127.0.0.1 port, started once per session by wapflow's own helper (wapflow._dev.pg_server, the code
behind `make pg-up`), one database per test, stopped at the end (pg_ctl stop -m immediate), even on failure.

The data folder is made with tempfile under /tmp, not pytest's tmp_path: as root (CI) the server runs as the
`postgres` system user, which cannot enter pytest's root-private folders. Import the fixtures into a test
module by naming them: tests/conftest.py declares this module a pytest plugin.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from wapflow._dev.pg_server import LocalPostgres, Urls, find_bin_dir
from wapflow.errors import EnvironmentProblem

# Not the default "wap": a password that no other output contains, so tests can grep for leaks.
PASSWORD = "pg-Secret-51f0"
_names = itertools.count()


@pytest.fixture(scope="session")
def pg() -> Iterator[LocalPostgres]:
    try:
        find_bin_dir()
    except EnvironmentProblem as e:
        # CI installs Debian's postgresql (.ci/run): a missing server there is a failure; on a laptop, a skip.
        if os.environ.get("CI"):
            raise
        pytest.skip(f"PostgreSQL tests need PostgreSQL's server programs: {e.message}")
    folder = Path(tempfile.mkdtemp(prefix="wapflow-pg-"))
    server = LocalPostgres(folder, password=PASSWORD, fast=True)
    try:
        server.start()
        yield server
    finally:
        server.stop(immediate=True)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_db(pg: LocalPostgres) -> Urls:
    """A fresh database on the session's server: catalog, run store, ledger and DBOS of one test."""
    return pg.create_database(f"t{next(_names)}_{os.getpid()}")
