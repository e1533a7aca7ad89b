"""The tests by layer: tests/unit (pure Python, no JVM: `make test-fast`), tests/spark (the one shared
SparkSession, runs in this process), tests/process (`wap` processes, servers, killed processes, a browser).

Fixtures live in tests/support and are declared here as pytest plugins, so a test asks for one by name and
no test module imports another.
"""

from __future__ import annotations

import os

import pytest

from support.cli_harness import BASE_FAST_START_JVM

# `wap` processes the tests start run their commands themselves, as they always did: the warm engine
# (wapflow.engine) is tested by tests/process/test_engine.py, which turns it on for its own processes, and
# tests whose commands follow each other on one wap.toml run them through one (support.engines: `engine`).
# WAP_ENGINE=auto in the environment runs the CLI tests through the engine instead.
os.environ.setdefault("WAP_ENGINE", "off")

# Every JVM the tests start (this process's Spark session, Connect servers, engines, the Nessie server, `wap`
# processes) works on small data: C1 alone and the serial collector spend a quarter less CPU than C2's compiler
# threads and G1's (tests/spark/test_modes.py and test_audit_library.py: 177 -> 134 CPU-seconds, the same wall
# time on one worker), and the suite on two workers is bound by the CPU. support.cli_harness says why it is
# for tests only.
os.environ.setdefault("JAVA_TOOL_OPTIONS", BASE_FAST_START_JVM)

pytest_plugins = [
    "support.data",
    "support.jars",
    "support.spark",
    "support.engines",
    "support.servers",
    "support.ingest",
    "support.receiver",
    "support.oidc_provider",
    "support.s3_server",
    "support.seaweed",
    "support.pg_server",
    "support.rest_server",
    "support.tls_proxy",
    "support.spark_cluster",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The `spark` marker means "needs a JVM": such a test cannot live in tests/unit."""
    misplaced = [i.nodeid for i in items if i.get_closest_marker("spark") and "unit" in i.path.parent.parts[-1:]]
    if misplaced:
        raise pytest.UsageError(f"tests/unit runs without a JVM; these are marked spark: {', '.join(misplaced)}")


@pytest.fixture(autouse=True)
def _piped_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every CLI output a test reads at one width, 120 columns (a pipe's: wapflow.cli.output), whatever the runner's
    environment says (COLUMNS=80 in some) or an earlier test left: the console of this process, and through
    COLUMNS the `wap` processes and engine commands the test starts, so outputs compared across them agree."""
    from wapflow.cli import output

    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setattr(output.out, "_width", 120)
