"""A Python driver of a crash test in a process group of its own, so a kill takes its JVM with it."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from support.cli_harness import env


def run_driver(
    argv: list[str],
    *,
    kill_after: float | None = None,
    start: re.Pattern[str],
    log: Path | None = None,
    **extra_env: str,
) -> tuple[int, list[str]]:
    """`python *argv` run to its end, or killed (with its JVM) `kill_after` seconds after its first line matching
    `start`; its lines, also appended to `log` if given. A driver that killed itself at a crash point leaves its
    JVM: that is killed too, as a crash of the machine would. Returns the exit code and the lines."""
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env(**extra_env),
        start_new_session=True,
    )

    def kill_group() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    lines: list[str] = []
    timer: threading.Timer | None = None
    assert proc.stdout is not None
    try:
        with contextlib.ExitStack() as stack:
            out = stack.enter_context(log.open("a")) if log is not None else None
            for line in proc.stdout:
                lines.append(line.rstrip())
                if out is not None:
                    out.write(line)
                    out.flush()
                if kill_after is not None and timer is None and start.match(line):
                    timer = threading.Timer(kill_after, kill_group)
                    timer.start()
        code = proc.wait(timeout=300)
    finally:
        if timer is not None:
            timer.cancel()
        kill_group()
        proc.wait()
    return code, lines


def stopped(pid: int) -> bool:
    """The process stopped itself (WAP_PAUSE_AT: SIGSTOP), as /proc says."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
