"""A local S3-compatible server on 127.0.0.1 for the tests and `wap demo --s3`: moto's standalone server.

moto (`moto[server]` from PyPI) speaks the S3 REST API over HTTP, verifies SigV4 signatures and,
when asked, evaluates IAM policies for S3 calls; it installs with pip in seconds. MinIO would be the
closer stand-in for production but must be built from its Go module (minutes of CI, a Go toolchain).
State lives in the server's memory and is gone when it stops.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx

from wapflow.errors import EnvironmentProblem
from wapflow.lakehouse.processes import free_port
from wapflow.storage.errors import MissingDependency

HOST = "127.0.0.1"


def _die_with_parent() -> None:
    """Linux: the server gets SIGTERM when the thread that started it ends, even by SIGKILL.

    Start it from a thread that outlives it (the main thread, as the tests and the demo do).
    """
    import ctypes
    import signal

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class LocalS3Server:
    """Start with `with LocalS3Server() as srv:` (or start()/stop()); srv.endpoint is its URL."""

    def __init__(self, *, port: int | None = None, startup_timeout: float = 60.0) -> None:
        self.port = port
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    @property
    def endpoint(self) -> str:
        if self.port is None:
            raise RuntimeError("the local S3 server is not started")
        return f"http://{HOST}:{self.port}"

    def start(self) -> LocalS3Server:
        try:
            import moto.server  # noqa: F401 - only checks that moto's server extra is installed
        except ImportError:
            raise MissingDependency(
                "the local S3 server needs moto, which is not installed",
                hint='pip install "wapflow[s3-demo]"  (or "moto[server]")',
            ) from None
        last_error = ""
        for _ in range(3):  # the free port may be taken between choosing and binding it
            port = self.port or free_port()
            fd, log = tempfile.mkstemp(prefix="wapflow-s3-server-", suffix=".log")
            os.close(fd)
            self._log = Path(log)
            with self._log.open("wb") as out:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
                )
            self.port = port
            if self._wait_ready():
                return self
            last_error = self._log.read_text(errors="replace")[-800:]
            self.stop()
            self.port = None
        raise EnvironmentProblem(
            f"the local S3 server (moto) did not start: {last_error.strip() or 'no output'}",
            hint="check that `python -m moto.server` runs in this environment",
        )

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                if httpx.get(f"{self.endpoint}/moto-api/", timeout=2.0).status_code < 500:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        return False

    def enforce_auth(self, enabled: bool) -> None:
        """On: every request must be signed by a known IAM access key and allowed by its policies."""
        r = httpx.post(f"{self.endpoint}/moto-api/reset-auth", content=b"0" if enabled else b"inf", timeout=10.0)
        r.raise_for_status()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None
        if self._log is not None:
            self._log.unlink(missing_ok=True)
            self._log = None

    def __enter__(self) -> LocalS3Server:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
