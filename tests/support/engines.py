"""The warm engine (wapflow.engine) for a test's `wap` processes (a pytest plugin, see tests/conftest.py).

The suite runs `wap` with WAP_ENGINE=off (tests/conftest.py). A test whose commands run one after the other on
one wap.toml asks for `engine` and passes it to support.cli_harness.wap: its commands then run through one
engine (one JVM instead of one per command), as a user's do by default, and the CLI is tested both ways. The
engines live under a runtime folder of the test's own (short: a Unix socket path has ~100 bytes) and are
killed with their JVMs when the test ends (servers started by tests are stopped by them).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from wapflow.lakehouse.processes import alive, children


def stop_engines(folder: Path) -> None:
    """Every engine under this runtime folder, and its JVM, killed."""
    for info in (folder / "wapflow").glob("engine-*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            pid = int(json.loads(info.read_text())["pid"])
            if alive(pid):
                kids = children(pid)
                os.kill(pid, signal.SIGKILL)
                for k in kids:
                    if alive(k):
                        os.kill(k, signal.SIGKILL)


@contextlib.contextmanager
def engine_runtime() -> Iterator[Path]:
    """XDG_RUNTIME_DIR of some `wap` processes: their own, and every engine under it stopped at the end."""
    folder = Path(tempfile.mkdtemp(prefix="wre", dir="/tmp"))
    try:
        yield folder
    finally:
        stop_engines(folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def engine() -> Iterator[dict[str, str]]:
    """Environment for support.cli_harness.wap(..., **engine): this test's commands through one warm engine."""
    with engine_runtime() as folder:
        yield {"XDG_RUNTIME_DIR": str(folder), "WAP_ENGINE": "auto"}
