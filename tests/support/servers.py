"""Session-wide servers started only when a test asks for them (a pytest plugin, see tests/conftest.py):
Nessie and Prefect's API server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def nessie_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Issue 4: one real Nessie server (runner jar fetched and cached by wapflow, RocksDB store) per test
    session, on a free port of 127.0.0.1; started only if a Nessie test runs, stopped at the end."""
    from wapflow._dev.nessie_server import NessieServer, find_server_java
    from wapflow.errors import EnvironmentProblem

    try:
        find_server_java()
    except EnvironmentProblem as e:
        # The Nessie runner needs Java 21+. In CI that is a failure; on a Java-17-only laptop, a visible skip.
        if os.environ.get("CI"):
            raise
        pytest.skip(f"Nessie tests need Java 21+: {e.message}")
    server = NessieServer(tmp_path_factory.mktemp("nessie"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A real Prefect API server for the session (Prefect's test harness: a server process on a temporary
    database), stopped at the end; flows run in this process report to it."""
    os.environ["PREFECT_HOME"] = str(tmp_path_factory.mktemp("prefect-home"))
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"  # no telemetry calls out of the machine
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
