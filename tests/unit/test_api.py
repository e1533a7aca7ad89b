"""The Python API without a JVM: `import wapflow` loads no Spark, and its errors are the documented family.
A whole run through the API: tests/spark/test_api.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

import wapflow


def test_import_is_cheap_and_names_are_documented():
    """`import wapflow` and the API's names load no JVM, no pyspark, no DBOS."""
    code = (
        "import sys, wapflow\n"
        "names = [getattr(wapflow, n) for n in wapflow.__all__]\n"
        "lh = wapflow.connect(None, warehouse='/tmp/nowhere')\n"
        "state = wapflow.start('nyc.trips', ['a.parquet'])\n"
        "bad = [m for m in ('pyspark', 'py4j', 'dbos', 'prefect') if m in sys.modules]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr
    assert all(getattr(wapflow, n).__doc__ for n in wapflow.__all__ if n not in ("__version__",))


def test_errors_are_the_documented_family(tmp_path):
    with pytest.raises(wapflow.ConfigError) as e:
        wapflow.connect(None, warehouse=str(tmp_path), master=3)
    assert "master" in str(e.value) and e.value.retryable is False and e.value.exit_code == 2
    lh = wapflow.connect(None, warehouse=str(tmp_path))
    with pytest.raises(wapflow.ConfigError) as e2:
        wapflow.ingest(lh, "nope")
    assert "sources.nope" in str(e2.value)
    with pytest.raises(wapflow.UsageError):
        wapflow.backfill(lh, "nope", since="not a date")
    with pytest.raises(wapflow.NotFound):
        wapflow.report(lh, "run_missing")
