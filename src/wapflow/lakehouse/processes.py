"""Local server processes wapflow starts (Nessie, a Spark Connect server): a free port, is one alive, stop one.

One place for the SIGTERM-then-SIGKILL rule, so every server gets the same grace to shut down cleanly
(Quarkus closes RocksDB, Spark's shutdown hook stops the context) before it is killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now, for a local server (or a test's refused connection) to use."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def alive(pid: int) -> bool:
    """The process exists and has not exited; a zombie (exited, not yet reaped) is not a server."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def terminate(pid: int, gone: Callable[[], bool], *, group: bool = False, grace: float = 20.0) -> None:
    """SIGTERM to the process (or its whole process group), SIGKILL only if `gone()` stays false for `grace` s."""
    send = os.killpg if group else os.kill
    try:
        send(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if gone():
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        send(pid, signal.SIGKILL)


def children(pid: int | None = None) -> list[int]:
    """The live direct children of a process (this one by default): /proc on Linux, `pgrep -P` elsewhere."""
    parent = os.getpid() if pid is None else pid
    proc = Path("/proc")
    if proc.is_dir():
        found = []
        for p in proc.iterdir():
            if not p.name.isdigit():
                continue
            try:
                fields = (p / "stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if int(fields[1]) == parent and fields[0] != "Z":
                found.append(int(p.name))
        return found
    import subprocess

    out = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True, check=False).stdout
    return [int(x) for x in out.split()]


def end_children(grace: float = 10.0) -> list[int]:
    """Stop every child this process started (a JVM cut off in its start-up would otherwise outlive it: it
    exits on its parent's end only once its gateway is up); SIGKILL what is left after `grace` s."""
    kids = children()
    for pid in kids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in kids):
        time.sleep(0.1)
    for pid in kids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return kids
