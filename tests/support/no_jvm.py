"""The unit layer's guard (used by tests/unit/conftest.py): a test there that reaches Spark fails at once,
naming the folder it belongs in, instead of quietly making `make test-fast` slow. In the test's process,
SparkContext's gateway launch and SparkSession.getOrCreate raise; child processes (a `wap` command) get a
SPARK_HOME that does not exist, so a JVM start there fails too."""

from __future__ import annotations

import pytest

NO_JVM = "a unit test started a JVM (Spark): move it to tests/spark or tests/process"
NO_SPARK_HOME = "/nonexistent/unit-tests-start-no-jvm"


class JvmStarted(AssertionError):
    """What a unit test that reaches Spark raises."""


def _refuse(*_: object, **__: object) -> None:
    raise JvmStarted(NO_JVM)


def forbid_jvm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Until the test ends (monkeypatch undoes it): no gateway, no session, no SPARK_HOME for children."""
    import pyspark.core.context
    from pyspark.sql import SparkSession

    monkeypatch.setattr(pyspark.core.context, "launch_gateway", _refuse)
    # A worker of `make test` may hold the Spark tests' context already (no gateway launch needed then):
    # refuse where every new SparkContext starts, before it looks for an active one.
    monkeypatch.setattr(pyspark.core.context.SparkContext, "_ensure_initialized", classmethod(_refuse))
    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", _refuse)
    monkeypatch.setenv("SPARK_HOME", NO_SPARK_HOME)
