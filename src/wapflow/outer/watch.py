"""`wap watch`: the long-running worker. It lists sources (every [watch] interval, or on their cron schedule),
reads their S3 events, claims new files in batches and hands each batch to its durable workflow.

Everything a crash could lose is elsewhere: the ledger (which file is where), the run store (each run) and
DBOS's database (how far each batch's workflow got). So the loop itself is simple and restartable: each tick
takes over orphaned claims, records what events and listings found, and claims and enqueues what is
pending. Spark starts once, before the first tick, and stays warm.

Stopping (SIGTERM, SIGINT): no new batch is claimed or started; running steps finish (up to [watch]
stop_timeout); a workflow interrupted then stays PENDING in DBOS and resumes, step by step, when a worker of
the same name starts again. Nothing is left half done: every step is idempotent.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from wapflow.config import Source, WatchConfig
from wapflow.errors import UsageError, WapError
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.outer.events import Landed, SqsEvents
from wapflow.outer.ingest import Ingest, files_exit_code
from wapflow.runs.ledger import LedgerRow
from wapflow.stopping import STOP
from wapflow.storage.files import FileIdentity, glob_regex, has_glob, skipped_as_bookkeeping
from wapflow.storage.notify import FolderEvents, folder_of
from wapflow.storage.settings import is_s3_uri, parse_s3_uri

TICK_SECONDS = 0.25  # how often pending files and finished workflows are looked at (cheap ledger queries)
REVIEW_RETRY_SECONDS = 60.0  # after review timeouts could not be applied (e.g. the catalog unreachable)
# Alerts whose delivery failed are sent again this often (the first pass one interval after the start), while
# they are younger than RESEND_WITHIN: a sink down for an hour still gets the blocked and failed runs it missed.
# Lineage events a receiver missed are sent again on the same passes (for lineage.RESEND_WITHIN).
RESEND_SECONDS = 300.0
RESEND_WITHIN = timedelta(days=1)


def in_location(location: str, landed: Landed) -> bool:
    """Whether an event's object belongs to an s3:// source location (its prefix or its glob) and is data."""
    if not is_s3_uri(location):
        return False
    loc = parse_s3_uri(location)
    if loc.bucket != landed.bucket or landed.key.endswith("/"):
        return False
    if loc.key and has_glob(loc.key):
        if not glob_regex(loc.key).match(landed.key):
            return False
        base = loc.key[: loc.key.find("/") + 1] if "/" in loc.key else ""
    else:
        base = loc.key if not loc.key or loc.key.endswith("/") else loc.key + "/"
        if landed.key != loc.key and not landed.key.startswith(base):
            return False
    return skipped_as_bookkeeping(landed.uri, landed.key[len(base) :], "events") is None


@dataclass
class _Source:
    """A watched source and its listing schedule."""

    source: Source
    events: SqsEvents | None = None
    next_listing: float = 0.0  # time.time() of the next listing
    listed: bool = False
    notified: bool = False  # a local folder whose landings wake the loop (inotify): listed at once


@dataclass
class WatchResult:
    """What a watch did (`--once`: before it stopped)."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    files: list[LedgerRow] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return files_exit_code({f.state for f in self.files}, self.files)

    def to_dict(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for f in self.files:
            counts[f.state] = counts.get(f.state, 0) + 1
        return {
            "exit_code": self.exit_code,
            "counts": counts,
            "runs": self.runs,
            "files": [f.to_dict() for f in self.files],
        }


class Watcher:
    def __init__(
        self, lh: Lakehouse, names: list[str], *, once: bool = False, say: Callable[[str], None] | None = None
    ) -> None:
        self.lh = lh
        self.once = once
        self.say = say or lh.progress
        self.cfg: WatchConfig = lh.config.watch
        names = names or list(lh.config.sources)
        if not names:
            raise UsageError("no source to watch", hint="declare [sources.NAME] (table, location) in wap.toml")
        # Everything checkable is checked before anything runs: names first, then locations and queues.
        resolved = [lh.config.resolve_source(n) for n in names]
        self.sources = [self._source(src) for src in resolved]
        self.stopping = threading.Event()
        self.events: FolderEvents | None = None
        self.inflight: dict[str, Any] = {}  # workflow id -> DBOS handle
        self.result = WatchResult()
        self._keys: dict[str, None] = {}
        # [maintenance] every: each watched table's maintenance, as a durable workflow per schedule slot.
        self.maintenance_every: dict[str, float] = {}
        for table in dict.fromkeys(s.source.table for s in self.sources):
            m = lh.config.maintenance_for(table)
            every = m.seconds("every")
            if m.enabled and every:
                self.maintenance_every[table] = every
        self.next_maintenance: dict[str, float] = {}
        self.maintenance_inflight: dict[str, Any] = {}
        # Tables with a review_timeout: their runs awaiting review past it are rejected or alerted on each tick.
        self.review_tables = [
            t
            for t in dict.fromkeys(s.source.table for s in self.sources)
            if lh.config.table(t).review_timeout is not None
        ]
        self.next_review_check = 0.0
        self.next_resend = time.time() + RESEND_SECONDS

    def _source(self, src: Source) -> _Source:
        self.lh.storage.scan(src.location, what=f"source {src.name}")
        events = None
        if src.cfg.events:
            events = SqsEvents(self.lh.storage.s3, src.cfg.events, warn=self.say)
        return _Source(src, events)

    # --- schedule --------------------------------------------------------------------------

    def _next_listing(self, s: _Source, now: float) -> float:
        if s.source.cfg.schedule:
            from croniter import croniter

            return float(croniter(s.source.cfg.schedule, datetime.fromtimestamp(now, UTC)).get_next(float))
        return now + (self.cfg.relist_seconds if s.events else self.cfg.interval)

    # --- the loop --------------------------------------------------------------------------

    def run(self) -> WatchResult:
        _ = self.lh.spark  # warm: the first file does not wait for a JVM (a stop meanwhile ends the command at once)
        own = not STOP.installed  # the CLI installed it first thing; a Python caller gets it for the watch
        STOP.install()
        self.events = FolderEvents()
        try:
            # From here a stop only asks: the loop ends at its next tick, then running steps get stop_timeout.
            with STOP.graceful(self._ask_stop):
                self._loop()
        finally:
            self.events.close()
            if own:
                STOP.uninstall()
        self.result.files = self.lh.ledger.rows(keys=list(self._keys))
        return self.result

    def _ask_stop(self) -> None:
        self.stopping.set()
        if self.events is not None:
            self.events.wake()

    def _watch_folders(self) -> None:
        """Local sources listed on an interval (no cron schedule, no S3 events) are also listed as soon as a
        file lands in their folder; the interval's listing stays, so a missed event only waits for it."""
        if self.events is None or not self.events.available:
            return
        for s in self.sources:
            if s.events is not None or s.source.cfg.schedule:
                continue
            folder = folder_of(s.source.location)
            if folder is not None and self.events.watch(s.source.name, folder):
                s.notified = True

    def _wait(self, seconds: float) -> None:
        """Until the next tick, or a file landing in a watched folder (its source is then listed at once)."""
        if self.events is None:
            self.stopping.wait(seconds)
            return
        landed = self.events.wait(seconds)
        if landed:
            now = time.time()
            for s in self.sources:
                if s.notified and s.source.name in landed:
                    s.next_listing = min(s.next_listing, now)

    def _loop(self) -> None:
        from wapflow.outer.durable import Durable

        durable = Durable(self.lh, worker=self.cfg.worker, concurrency=self.cfg.concurrency, database=self.cfg.database)
        self.durable = durable
        now = time.time()
        for s in self.sources:
            s.next_listing = now if not s.source.cfg.schedule else self._next_listing(s, now)
        # The first maintenance one interval after the start: a restarted worker does not maintain at once.
        self.next_maintenance = {t: now + every for t, every in self.maintenance_every.items()}
        self._watch_folders()
        self.say(
            f"watching {', '.join(s.source.name for s in self.sources)} as worker {self.cfg.worker!r}"
            + (" (until done)" if self.once else "; stop with Ctrl-C or SIGTERM")
        )
        try:
            while not self.stopping.is_set():
                self.tick()
                if self.once and self._idle():
                    break
                self._wait(TICK_SECONDS)
        finally:
            if self.stopping.is_set():
                self.say(f"stopping: waiting up to {self.cfg.stop_timeout:.0f}s for running steps")
            # Workflows in flight end (or the wait runs out: they resume at the next start) while DBOS still
            # answers for them; then DBOS stops.
            deadline = time.monotonic() + self.cfg.stop_timeout
            while (self.inflight or self.maintenance_inflight) and time.monotonic() < deadline:
                time.sleep(TICK_SECONDS)
                self._collect()
            durable.stop(max(0.0, deadline - time.monotonic()))

    def tick(self) -> None:
        now = time.time()
        for s in self.sources:
            if self.stopping.is_set():
                return
            ing = Ingest(self.lh, s.source)
            ing.runner = functools.partial(self._enqueue, s)
            ing.revive = self._revive
            ing.resume_orphans()
            if s.events is not None:
                self._read_events(s, ing)
            if now >= s.next_listing:
                ing.discover()
                s.listed = True
                s.next_listing = self._next_listing(s, now)
            for run_id, batch in ing.claimed_batches():
                ing.runner(run_id, batch)
                if self.stopping.is_set():
                    return
        self._maintain_due(now)
        self._expire_reviews(now)
        self._resend(now)
        self._collect()

    def _resend(self, now: float) -> None:
        """Every RESEND_SECONDS: alerts whose delivery failed in the last RESEND_WITHIN, and lineage events the
        receiver missed, sent again (never fatal: what fails again is said, and tried at the next pass)."""
        cfg = self.lh.config
        if now < self.next_resend or self.stopping.is_set() or not (cfg.alerts.sinks or cfg.lineage):
            return
        from wapflow.alerts import resend_failed
        from wapflow.pipeline import lineage

        self.next_resend = now + RESEND_SECONDS
        resend_failed(cfg, self.lh.store.engine, RESEND_WITHIN, progress=self.say)
        if cfg.lineage is not None:
            lineage.resend(cfg, progress=self.say)

    def _expire_reviews(self, now: float) -> None:
        """review_timeout of the watched tables (wapflow.outer.review): one run store query while nothing is due.
        A failure (the catalog down while rejecting) is said and tried again a minute later, never fatal."""
        if not self.review_tables or now < self.next_review_check or self.stopping.is_set():
            return
        from wapflow.outer.review import expire_reviews

        try:
            done = expire_reviews(self.lh, tables=self.review_tables)
        except WapError as e:
            self.next_review_check = now + REVIEW_RETRY_SECONDS
            self.say(f"warning: review timeouts not applied now ({e.message}); trying again in a minute")
            return
        for d in done:
            if d["action"] in ("rejected", "alerted", "decided meanwhile"):
                self.say(d["message"])

    def _maintain_due(self, now: float) -> None:
        """Enqueue the maintenance of each table whose `every` has come round (one workflow per slot)."""
        for table, every in self.maintenance_every.items():
            if now < self.next_maintenance.get(table, now) or self.stopping.is_set():
                continue
            self.next_maintenance[table] = now + every
            wid = self.durable.enqueue_maintenance(table, int(now // every))
            if wid not in self.maintenance_inflight:
                from dbos import DBOS

                self.maintenance_inflight[wid] = DBOS.retrieve_workflow(wid)
                self.say(f"maintenance of {table} queued")

    def _read_events(self, s: _Source, ing: Ingest) -> None:
        assert s.events is not None
        landed, handles = s.events.receive()
        if not handles:
            return
        found: list[FileIdentity] = []
        for obj in dict.fromkeys(landed):
            if not in_location(s.source.location, obj):
                continue
            listing = self.lh.storage.scan(obj.uri, what="event for") if self._exists(obj) else None
            if listing is not None:
                found.extend(listing.files)
        ing.note(found)
        s.events.delete(handles)

    def _exists(self, obj: Landed) -> bool:
        """An event for an object deleted since names nothing to ingest."""
        try:
            self.lh.storage.s3.client.head_object(Bucket=obj.bucket, Key=obj.key)
            return True
        except Exception as e:  # only "not found" is an answer; the rest is raised as ours
            code = str(getattr(e, "response", {}).get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchKey", "NotFound"):
                return False
            raise self.lh.storage.s3.error_for(e, action="read", bucket=obj.bucket, key=obj.key) from e

    def _revive(self, run_id: str, batch: list[LedgerRow]) -> None:
        """A batch whose worker died: its durable workflow back on the queue (Durable.revive)."""
        self.durable.revive(run_id, batch)

    def _enqueue(self, s: _Source, run_id: str, batch: list[LedgerRow]) -> None:
        for r in batch:
            self._keys[r.key] = None
        wid = self.durable.enqueue(s.source.name, s.source.table, run_id, batch)
        if wid not in self.inflight:
            from dbos import DBOS

            self.inflight[wid] = DBOS.retrieve_workflow(wid)
            self.say(f"run {run_id}: {len(batch)} file(s) of source {s.source.name} queued")

    def _collect(self) -> None:
        """Say what finished; a workflow that ended in an error (a bug) fails its files, visibly."""
        for wid, handle in list(self.maintenance_inflight.items()):
            status = handle.get_status().status
            if status == "SUCCESS":
                out = handle.get_result()
                self.say(f"maintenance of {out['table']}: {out['status']}: {out['message']}")
            elif status in ("ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"):
                self.say(f"maintenance workflow {wid} ended {status} (see `wap maintain --dry-run`)")
            else:
                continue
            del self.maintenance_inflight[wid]
        for wid, handle in list(self.inflight.items()):
            status = handle.get_status().status
            if status == "SUCCESS":
                out = handle.get_result()
                self.result.runs.append(out)
                self.say(f"run {out['run_id']}: {out['status']} ({out['files']} file(s))")
            elif status in ("ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"):
                self._failed_workflow(wid, status)
            else:
                continue
            del self.inflight[wid]

    def _failed_workflow(self, wid: str, status: str) -> None:
        run_id = wid.rsplit(".c", 1)[0]
        rows = [r for r in self.lh.ledger.rows(state="claimed") if r.run_id == run_id]
        message = f"the durable workflow {wid} ended {status}: a bug in wapflow; `wap retry {run_id}` after a fix"
        error = {"kind": "bug", "message": message, "retryable": False}
        self.lh.ledger.settle([r.key for r in rows], "failed", run_id=run_id, error=error, reason=message)
        self.result.runs.append({"run_id": run_id, "status": "failed", "files": len(rows), "snapshot_id": None})
        self.say(f"run {run_id}: {message}")

    def _idle(self) -> bool:
        """--once: every source listed, nothing pending, nothing running here (recovered workflows too)."""
        if self.inflight or self.maintenance_inflight or not all(s.listed for s in self.sources):
            return False
        for s in self.sources:
            if self.lh.ledger.rows(s.source.name, state="pending") or self.lh.ledger.rows(
                s.source.name, state="claimed"
            ):
                return False
        return True
