"""Deliveries: a producer's files and the manifest that declares them, kept together on their way to a run.

A table whose `control_totals` check sets `wait` is fed whole deliveries by `wap ingest` and `wap watch`:
- a landed file whose manifest is not there yet, or whose manifest names a file that has not landed, is held
  (not taken into the ledger) until the delivery is complete, at most `wait` after the file landed; then it
  is taken and the check judges it (a missing manifest blocks, or warns with without_manifest = "warn");
- a delivery's files go in one batch, never split by max_files_per_run (the check compares whole deliveries).
`wap run` names its files itself and never waits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from wapflow.audit.batch_checks.control import ControlTotalsCheck, ManifestError, manifest_for, parse_manifest
from wapflow.storage.files import FileIdentity
from wapflow.vocabulary import parse_duration

T = TypeVar("T")


@dataclass
class Held:
    """Files held back this listing: how many, the first manifest missing or incomplete, and when the last
    hold ends (then they are taken whatever has arrived)."""

    files: int = 0
    until: datetime | None = None
    why: list[str] = field(default_factory=list)

    def add(self, n: int, until: datetime, why: str) -> None:
        self.files += n
        self.until = max(self.until or until, until)
        if why not in self.why:
            self.why.append(why)


class Deliveries:
    """The waiting control_totals check of one table (the first, if several set `wait`)."""

    def __init__(self, check: ControlTotalsCheck, read: Callable[[str], bytes | None]) -> None:
        self.pattern = check.manifest
        self.wait = timedelta(seconds=parse_duration(check.wait or 0))
        self.read = read

    @classmethod
    def of(cls, checks: Iterable[object], read: Callable[[str], bytes | None]) -> Deliveries | None:
        waiting = [c for c in checks if isinstance(c, ControlTotalsCheck) and c.wait]
        return cls(waiting[0], read) if waiting else None

    def manifest(self, uri: str) -> str:
        return manifest_for(self.pattern, uri)

    def hold(
        self,
        fresh: Sequence[tuple[str, FileIdentity]],
        landed: set[str],
        *,
        now: datetime | None = None,
    ) -> tuple[list[tuple[str, FileIdentity]], Held]:
        """The fresh files to take now, and what is held: a delivery is complete when its manifest is there and
        every file it names has landed (`landed`: the uris the listing holds). A manifest that cannot be read
        holds nothing: the check reports it."""
        now = now or datetime.now(UTC)
        groups: dict[str, list[tuple[str, FileIdentity]]] = {}
        for k, f in fresh:
            groups.setdefault(self.manifest(f.uri), []).append((k, f))
        take: list[tuple[str, FileIdentity]] = []
        held = Held()
        for m, files in groups.items():
            why = self._incomplete(m, landed)
            if why is None:
                take += files
                continue
            first = min((f.modified for _, f in files if f.modified is not None), default=now)
            until = first + self.wait
            if now >= until:
                take += files  # waited long enough: the check judges what came
            else:
                held.add(len(files), until, why)
        return take, held

    def _incomplete(self, manifest: str, landed: set[str]) -> str | None:
        try:
            data = self.read(manifest)
        except OSError:
            return None
        if data is None:
            return f"no manifest at {manifest} yet"
        try:
            declared = parse_manifest(manifest, data)
        except ManifestError:
            return None
        folder = manifest.rpartition("/")[0]
        absent = sorted(n for n in declared.files or {} if f"{folder}/{n}" not in landed)
        if absent:
            more = f" and {len(absent) - 3} more" if len(absent) > 3 else ""
            return f"{manifest} names {len(absent)} file(s) not landed yet: {', '.join(absent[:3])}{more}"
        return None

    def batch(self, pending: Sequence[T], uri: Callable[[T], str], fits: Callable[[list[T], T], bool]) -> list[T]:
        """The next batch, whole deliveries oldest first: a delivery joins while `fits` says its files do (the
        first one always, however many files it has)."""
        groups: dict[str, list[T]] = {}
        for row in pending:
            groups.setdefault(self.manifest(uri(row)), []).append(row)
        batch: list[T] = []
        for rows in groups.values():
            trial = list(batch)
            for row in rows:
                if batch and not fits(trial, row):
                    return batch
                trial.append(row)
            batch = trial
        return batch
