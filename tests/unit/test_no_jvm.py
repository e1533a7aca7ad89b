"""The unit layer's guard holds: Spark cannot start here, in this process or in a `wap` process."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from support.no_jvm import NO_JVM, NO_SPARK_HOME, JvmStarted


def test_a_spark_session_cannot_start_in_a_unit_test() -> None:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    with pytest.raises(JvmStarted, match="move it to tests/spark or tests/process"):
        SparkSession.builder.master("local[1]").getOrCreate()
    with pytest.raises(JvmStarted, match=re.escape(NO_JVM)):
        SparkContext(master="local[1]")


def test_a_child_process_cannot_start_spark_either() -> None:
    assert os.environ["SPARK_HOME"] == NO_SPARK_HOME
    code = "from pyspark.sql import SparkSession; SparkSession.builder.master('local[1]').getOrCreate()"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and NO_SPARK_HOME in p.stderr, p.stderr[-2000:]
