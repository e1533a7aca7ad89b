"""Named crash points, so crash-safety is proven by killing real processes at exact places.

When the environment variable WAP_CRASH_AT names a point (comma-separated for several), the
process sends itself SIGKILL there: no exception handler, `finally` or atexit runs, exactly as
when the OOM killer or a power cut strikes. Tests start `wap run` with it, then run the same
command again and check that the run completes exactly once. Unset, a point costs one dict lookup.

WAP_RAISE_AT names points where a plain RuntimeError is raised instead: an exception no part of
wapflow names, so tests can check that it comes out as a bug (terminal, naming the run and step),
never as something a scheduler would retry.

WAP_PAUSE_AT names points where the process stops itself (SIGSTOP) until it is continued (SIGCONT): a test
changes the world at that exact moment (fills a disk, moves main) and lets the run go on.
"""

from __future__ import annotations

import os
import signal

ENV = "WAP_CRASH_AT"
RAISE_ENV = "WAP_RAISE_AT"
PAUSE_ENV = "WAP_PAUSE_AT"

# Every point, in the order a run passes them (docs/guides/crashes.md: what a crash at each leaves behind).
POINTS = (
    "ingest:claimed",  # wap ingest: a batch's files are claimed by this process in the ledger; no run yet
    "pipeline:ran",  # wap pipelines run: the engine wrote every dataset on the run's branch; nothing recorded
    "prepare",  # the run is recorded as running; nothing written
    "write:table-created",  # a new table exists (empty); no branch yet
    "write:branch-created",  # the run's branch exists at main's head; no rows on it
    "write:quarantine-appended",  # failing rows are on the quarantine table's branch; good rows not yet
    "write:appended",  # the run's rows are committed on its branch (or staging table)
    "audit",  # the audit report is stored; nothing published
    "publish:locked",  # the table's publish lock is held; nothing published
    "publish:quarantine-published",  # quarantined rows are on the quarantine table's main
    "publish:columns-added",  # add_columns: main's schema has the new columns; rows not yet appended
    "publish:group-planned",  # a multi-table publish: every table's change planned; nothing written or committed
    "publish:group-staged",  # a multi-table publish: new metadata files written, no table's pointer moved yet
    "publish:moved",  # main carries the run's rows; a re-applied run's branch is not dropped yet
    "publish:recorded",  # the run store says published
    "ingest:ran",  # wap ingest: a batch's run has ended; the ledger does not say so yet
    "alert:claimed",  # an alert's delivery row is claimed (at most once); nothing sent yet
    "revert:planned",  # wap revert: what comes off each table is decided; nothing committed
    "revert:committed",  # wap revert: the run's rows are off main; its record still says published
    "maintain:compact",  # wap maintain: the compaction is committed on main, its record still running
    "maintain:expire_snapshots",  # wap maintain: snapshots expired (record still running); orphans not removed
)


def _named(var: str, name: str) -> bool:
    wanted = os.environ.get(var, "")
    return name in wanted.split(",") if wanted else False


def crash_point(name: str) -> None:
    """SIGKILL this process if WAP_CRASH_AT names this point; raise RuntimeError if WAP_RAISE_AT does; stop
    until continued if WAP_PAUSE_AT does."""
    if _named(PAUSE_ENV, name):
        os.kill(os.getpid(), signal.SIGSTOP)
    if _named(ENV, name):
        os.kill(os.getpid(), signal.SIGKILL)
    if _named(RAISE_ENV, name):
        raise RuntimeError(f"injected fault at {name}")
