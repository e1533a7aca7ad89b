"""Run records the run store could not take (its disk full), kept aside until a command can write them.

A run that fails because a disk filled up often cannot record that either: the run store may live on the
same disk. Its process then ends, and without this the run would read as `interrupted` for ever after. So a
record the store refused is written here instead, to a folder on another filesystem when there is one (the
user's runtime folder, /dev/shm, the cache, the temp folder: the first that takes the write), one file per
run, under a name derived from the store's URL. Every RunStore applies what waits for it when it opens, which
is "at the latest by the next command that can write the store" (RunStore applies them):

- the store has no record of the run, or its record is the same attempt still `running` (same owner): the
  kept record is written;
- the store's record moved on meanwhile (a resume, a decision): it wins, and the kept one is dropped.

Best effort both ways: a spool nobody can write, or a kept record that cannot be applied yet, changes nothing
else (the run reads as interrupted, with the command that resumes it, as before).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

# Where kept records go (tests point it at a folder of their own).
ENV = "WAP_PENDING_DIR"
_DATES = ("started_at", "finished_at", "reviewed_at")


def _candidates() -> list[Path]:
    if os.environ.get(ENV):
        return [Path(os.environ[ENV])]
    uid = os.getuid()
    out = []
    if os.environ.get("XDG_RUNTIME_DIR"):
        out.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "wapflow" / "pending")
    out += [
        Path("/dev/shm") / f"wapflow-{uid}" / "pending",
        Path.home() / ".cache" / "wapflow" / "pending",
        Path(tempfile.gettempdir()) / f"wapflow-{uid}" / "pending",
    ]
    return out


def _store_key(url: str) -> str:
    """A folder name per run store (a hash: the URL may hold a password, which must not reach a file name)."""
    from wapflow.config.urls import normalize_url

    return hashlib.sha256(normalize_url(url).encode()).hexdigest()[:20]


def _encode(row: dict[str, Any]) -> str:
    row = dict(row)
    for k in _DATES:
        if row.get(k) is not None:
            row[k] = row[k].isoformat()
    return json.dumps(row)


def read(path: Path) -> dict[str, Any]:
    """A kept record as the run store's row (RunRecord.to_row's shape); OSError / ValueError if unreadable."""
    row: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    for k in _DATES:
        if row.get(k) is not None:
            row[k] = datetime.fromisoformat(row[k])
    return row


def keep(url: str, run_id: str, row: dict[str, Any]) -> Path | None:
    """Keep a run's record (RunRecord.to_row) the store at `url` refused; the path it went to, None when no
    folder took it."""
    data = _encode(row)
    for folder in _candidates():
        target = folder / _store_key(url) / f"{run_id}.json"
        tmp = target.with_suffix(".tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
            return target
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
    return None


def waiting(url: str) -> list[Path]:
    """The kept records of the store at `url`, in every folder they may be in."""
    found: list[Path] = []
    for folder in _candidates():
        with contextlib.suppress(OSError):
            found += sorted((folder / _store_key(url)).glob("*.json"))
    return found
