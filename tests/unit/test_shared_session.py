"""wapflow.spark.shared_session: one use of a session's shared state at a time across forked processes (the
engine's commands share one SparkSession), and a process killed while it holds the lock releases it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from wapflow.spark import shared_session


def _child(journal: Path, name: str, hold: float, ready: int | None = None) -> int:
    """A forked process that records when it enters and leaves session_change()."""
    pid = os.fork()
    if pid:
        return pid
    try:
        with shared_session.session_change():
            with journal.open("a") as f:
                f.write(f"{name} in\n")
            if ready is not None:
                os.write(ready, b"x")
            time.sleep(hold)
            with journal.open("a") as f:
                f.write(f"{name} out\n")
    finally:
        os._exit(0)


def _wait(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _holder_then_waiter(journal: Path, hold: float, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """This process shares its session; child a takes the lock (and holds it `hold` s), then child b asks."""
    monkeypatch.setattr(shared_session, "_across", None)
    shared_session.share_with_children()
    r, w = os.pipe()
    holder = _child(journal, "a", hold, ready=w)
    os.read(r, 1)  # a holds the lock
    return holder, _child(journal, "b", 0.0)


def test_children_of_a_sharing_process_take_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = tmp_path / "journal"
    first, second = _holder_then_waiter(journal, 0.6, monkeypatch)
    assert _wait(first) == 0 and _wait(second) == 0
    assert journal.read_text().split("\n")[:4] == ["a in", "a out", "b in", "b out"]


def test_a_child_killed_while_holding_it_releases_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = tmp_path / "journal"
    holder, waiter = _holder_then_waiter(journal, 60.0, monkeypatch)
    time.sleep(0.3)
    assert journal.read_text() == "a in\n"  # b waits
    os.kill(holder, signal.SIGKILL)
    assert _wait(holder) == -signal.SIGKILL
    assert _wait(waiter) == 0
    assert journal.read_text() == "a in\nb in\nb out\n"


def test_without_sharing_only_this_process_is_serialised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_session, "_across", None)
    with shared_session.session_change():
        assert shared_session._in_process.locked()
    assert not shared_session._in_process.locked()
