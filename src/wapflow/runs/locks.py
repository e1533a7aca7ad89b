"""Publish locks: one publisher per table at a time, across processes.

Checks that read main (unique_in_table, foreign_key, volume, custom_sql over other tables) are
only true for the main they read. A run re-checks them under this lock right before it moves main,
so two runs whose batches collide cannot both land, whatever the interleaving.

The lock lives where the run store lives, because that is what every wapflow process of a lakehouse
shares: beside a SQLite run store an OS file lock (flock: released by the kernel when the holder
dies, even by SIGKILL); on PostgreSQL a session advisory lock (released when the connection drops).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa

from wapflow.errors import LockTimeout

_HINT = "another run is publishing to this table; retry when it is done (`wap runs` shows it)"


def _key(name: str) -> int:
    """A stable signed 64-bit key for pg_advisory_lock."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


@contextlib.contextmanager
def publish_lock(engine: sa.Engine, lock_dir: Path, name: str, *, timeout: float = 600.0) -> Iterator[None]:
    """Hold the lock called `name` (e.g. the table's dotted name) for the duration of the block."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            deadline = time.monotonic() + timeout
            while not conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": _key(name)}).scalar():
                if time.monotonic() > deadline:
                    raise LockTimeout(
                        f"timed out after {timeout:.0f} s waiting for the publish lock of {name}", hint=_HINT
                    )
                time.sleep(0.1)
            try:
                yield
            finally:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _key(name)})
                conn.commit()
        return
    lock_dir.mkdir(parents=True, exist_ok=True)
    path = lock_dir / (hashlib.sha256(name.encode()).hexdigest()[:24] + ".lock")
    with open(path, "a+b") as f:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockTimeout(
                        f"timed out after {timeout:.0f} s waiting for the publish lock of {name}", hint=_HINT
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
