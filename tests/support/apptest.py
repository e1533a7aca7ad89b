"""Streamlit's AppTest on the dashboard, after the interpreter's garbage is collected.

Earlier tests in the same worker leave garbage behind, for example Dagster's in-memory SQLite connections. If
the collector runs their finalizers while Streamlit compiles the page's script in its script thread, CPython
3.11's ast.parse fails with "SystemError: AST constructor recursion depth mismatch". Streamlit then shows a
compilation error instead of the page: no widgets, no metrics, no error element. Collecting the garbage first
runs those finalizers here, in the test's own thread.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

APP = Path(__file__).resolve().parents[2] / "src" / "wapflow" / "dashboard" / "app.py"


def app_test(timeout: float = 60) -> Any:
    """A fresh AppTest of the dashboard (not yet run)."""
    from streamlit.testing.v1 import AppTest

    gc.collect()
    return AppTest.from_file(str(APP), default_timeout=timeout)
