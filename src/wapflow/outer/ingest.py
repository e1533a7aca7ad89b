"""Ingest a source: list its location, skip what the ledger knows, run the rest in batches, record each file.

`ingest(lh, name)` is the one path every trigger feeds (a one-off `wap ingest`, and later a watcher,
a schedule or S3 events). It is stateless for the caller and safe to repeat or to run in two processes at
once: files are claimed in the ledger before a run (one claim wins), a batch's run id is derived from its
source and file identities (a repeated batch resumes its run instead of writing twice), and a claim left by
a killed process is taken over and its run resumed.

Batching and the split rule: pending files run oldest first, up to max_files_per_run and max_bytes_per_run
per run. A batch of several files that does not publish (blocked by the audit, or failed on an unreadable
file) is split in two halves (its branch is discarded), and each half runs as a batch of its own, split
again if it does not publish: good files are never held back by a bad one, and one bad file among n costs
about 2*log2(n) extra runs instead of n. A file that blocks alone is `blocked` (its branch or report
kept); one that fails alone on its input is `failed`. A transient failure runs the same batch again (same
run id: it resumes), at most max_attempts times, then its files are `failed`. Other terminal failures
(configuration, environment, conflict, a bug) fail the batch's files: splitting would meet the same
error; `wap retry` after the fix. A batch whose table's `review` held its run is `awaiting_review` as a
whole (never split: it passed) until `wap approve` or `wap reject` decides it.

Alerts ([alerts] in wap.toml) are collected while the ledger is settled and sent after it is: a file
alone blocked (`blocked`) or failed (`file_failed`, and `retries_exhausted` or `failed` by the cause), a
published run above the quarantine threshold, a claim of a dead process resumed (`recovered`). A batch
being split sends nothing: its files end up in one of those states. The occurrence is the run id and the
claim count, so a `wap retry` that fails again alerts again, a replay of the same claim does not.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from wapflow.alerts import AlertEvent, notify
from wapflow.alerts.event import from_run
from wapflow.config import NO_CHECKS_FLAG, Source, SourceConfig
from wapflow.config.models import downstream_models
from wapflow.errors import (
    EXIT_BLOCKED,
    EXIT_PUBLISHED,
    EXIT_REVIEW,
    EXIT_RUNTIME,
    EXIT_TRANSIENT,
    EXIT_USAGE,
    ConfigError,
    RunInProgress,
    UsageError,
)
from wapflow.faults import crash_point
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.outer.deliveries import Deliveries, Held
from wapflow.pipeline import RunResult, drive, new_state, quarantine_of
from wapflow.pipeline import result as run_result
from wapflow.pipeline.models import run_batch
from wapflow.pipeline.retry import RetryPolicy, backoff, retryable
from wapflow.pipeline.state import AWAITING_REVIEW
from wapflow.runs.ledger import Ledger, LedgerRow, file_key
from wapflow.runs.store import RunStore
from wapflow.sql.identifiers import TableName
from wapflow.storage.files import FileIdentity
from wapflow.vocabulary import DISCARDED


def files_exit_code(states: set[str], failed: Sequence[LedgerRow] = ()) -> int:
    """The exit code of a pass over files, by the ledger states they ended in: failed before blocked, blocked
    before awaiting review. Files that all failed on wap.toml (a model's SQL: exit 2 as the run's own) exit 2,
    as `wap run-models` does: fixing wap.toml is the way on, not trying the files again."""
    if "failed" in states:
        codes = {(f.error or {}).get("exit_code") for f in failed if f.state == "failed"}
        return EXIT_USAGE if codes == {EXIT_USAGE} else EXIT_RUNTIME
    if "blocked" in states:
        return EXIT_BLOCKED
    if "awaiting_review" in states:
        return EXIT_REVIEW
    return EXIT_PUBLISHED


def batch_run_id(source: str, keys: Sequence[str]) -> str:
    """The same files of the same source always make the same run id: a repeated batch resumes its run."""
    digest = hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:16]
    return f"ing_{source[:40]}_{digest}"


@dataclass
class IngestResult:
    source: str
    table: str
    listed: int = 0  # data files in the location
    new: int = 0  # files the ledger had not seen
    unsettled: int = 0  # local files still changing (not taken this time)
    settle_seconds: float = 0.0  # the source's settle_seconds, for the message about unsettled files
    held: Held = field(default_factory=Held)  # files whose delivery is not complete yet (control_totals wait)
    runs: list[RunResult] = field(default_factory=list)
    planned: list[list[str]] = field(default_factory=list)  # --dry-run: the batches that would run, in order
    files: list[LedgerRow] = field(default_factory=list)  # every file this call ran, as the ledger has it now
    failed_before: list[str] = field(default_factory=list)  # listed files an earlier run failed (not run again)

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.files:
            out[f.state] = out.get(f.state, 0) + 1
        return out

    @property
    def exit_code(self) -> int:
        """0: every file run was published (or nothing new); 1: some blocked; 3: some failed; 5: files left
        that were still being written, so a one-off job (cron, CI) must run again (a retry helps)."""
        code = files_exit_code({f.state for f in self.files}, self.files)
        if code == EXIT_PUBLISHED and (self.unsettled or self.held.files) and not self.planned:
            return EXIT_TRANSIENT
        return code

    @property
    def status(self) -> str:
        return {
            EXIT_PUBLISHED: "ok",
            EXIT_BLOCKED: "blocked",
            EXIT_RUNTIME: "failed",
            EXIT_USAGE: "failed",
            EXIT_TRANSIENT: "unsettled",
            EXIT_REVIEW: "awaiting_review",
        }[self.exit_code]

    def message(self) -> str:
        if self.planned:
            n = sum(len(b) for b in self.planned)
            return f"dry run: {n} file(s) of source {self.source} would run in {len(self.planned)} batch(es)"
        still = "; ".join(
            w
            for w in (
                f"{self.unsettled} file(s) are still being written (changed within the last "
                f"{self.settle_seconds:g}s, settle_seconds); run again after {self.settle_seconds:g}s"
                if self.unsettled
                else "",
                self._held(),
            )
            if w
        )
        if not self.files:
            if still:
                return f"nothing published from source {self.source}: {still}"
            return f"nothing new in source {self.source} ({self.listed} file(s) listed, all known)" + self._failed()
        parts = [f"{n} {state}" for state, n in sorted(self.counts.items())]
        return (
            f"source {self.source} -> {self.table}: {len(self.files)} file(s) in {len(self.runs)} run(s): "
            + ", ".join(parts)
            + (f"; {still}" if still else "")
        )

    def _held(self) -> str:
        h = self.held
        if not h.files or h.until is None:
            return ""
        return (
            f"{h.files} file(s) held until their delivery is complete ({'; '.join(h.why[:2])}): taken when it is, "
            f"or at {h.until:%Y-%m-%d %H:%M:%S} UTC whatever came (control_totals wait); run again then"
        )

    def _failed(self) -> str:
        """Listed files that failed before and wait for a person: which, and the command that runs them again."""
        if not self.failed_before:
            return ""
        shown = ", ".join(self.failed_before[:3]) + (" ..." if len(self.failed_before) > 3 else "")
        first = self.failed_before[0]
        return (
            f"; {len(self.failed_before)} of them failed before and are not run again by themselves ({shown}): "
            f"`wap retry {first}` puts a file back in line once its cause is fixed (`wap files --state failed` "
            "lists them)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "table": self.table,
            "status": self.status,
            "exit_code": self.exit_code,
            "message": self.message(),
            "listed": self.listed,
            "new": self.new,
            "unsettled": self.unsettled,
            "held": self.held.files,
            "counts": self.counts,
            "failed_before": self.failed_before,
            "runs": [r.to_dict() for r in self.runs],
            "planned": self.planned,
            "files": [f.to_dict() for f in self.files],
        }


def _quiet(_: str) -> None:
    return None


class Ingest:
    """One pass over a source. Holds nothing a crash could lose: the ledger and the run store hold it all."""

    def __init__(
        self,
        lh: Lakehouse,
        source: Source,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        sleep: Callable[[float], None] = time.sleep,
        no_checks: bool = False,
    ) -> None:
        if since is not None and until is not None and since >= until:
            raise UsageError(f"--since {since:%Y-%m-%d %H:%M} is not before --until {until:%Y-%m-%d %H:%M}")
        self.lh = lh
        self.source = source
        self.name = source.name
        self.since, self.until = since, until
        self.src: SourceConfig = source.cfg
        self.ledger: Ledger = lh.ledger
        self.sleep = sleep
        self.no_checks = no_checks  # --no-checks: the source's table may publish without checks if it has none
        self.retry = RetryPolicy.of_source(self.src, sleep)
        self.out = IngestResult(source.name, source.table, settle_seconds=self.src.settle_seconds)
        self._settled_by: datetime | None = None  # when the last file found still changing will have settled
        self._ran: dict[str, None] = {}  # ledger keys this call ran, in order
        # What runs a claimed batch: here, in this process; `wap watch` hands it to a durable workflow.
        self.runner: Callable[[str, list[LedgerRow]], None] = self._run_batch
        # What brings back a run whose process died, before it runs again: nothing here (the run itself resumes);
        # `wap watch` puts the batch's durable workflow back on the queue, where any worker takes it.
        self.revive: Callable[[str, list[LedgerRow]], None] | None = None
        self.alerts: list[AlertEvent] = []  # collected while settling, sent by flush_alerts()
        # The models that read the source's table (and theirs): run with each batch, published with it in one commit.
        self.models = models_of(lh, source)
        # The table's control_totals check that waits for whole deliveries (a manifest and the files it names).
        self.deliveries = Deliveries.of(
            lh.config.table(source.table, source=source.name).checks, lh.storage.read_if_exists
        )

    # --- listing ---------------------------------------------------------------------------

    def key(self, f: FileIdentity) -> str:
        return file_key(self.name, f, track_changes=self.src.on_change == "new_file")

    def in_window(self, modified: datetime | None) -> bool:
        """A backfill's time window (the file's own modification time); no window: every file."""
        if self.since is None and self.until is None:
            return True
        if modified is None:
            return False
        return (self.since is None or modified >= self.since) and (self.until is None or modified < self.until)

    def _fresh(self) -> list[tuple[str, FileIdentity]]:
        """Listed files the ledger has not seen, settled and inside the window."""
        listing = self.lh.storage.scan(self.src.location, what=f"source {self.name}")
        self.out.listed = len(listing.files)
        settle = timedelta(seconds=self.src.settle_seconds)
        cutoff = datetime.now(UTC) - settle
        known = self.ledger.states(self.name)
        self.out.unsettled, self._settled_by = 0, None
        fresh: list[tuple[str, FileIdentity]] = []
        for f in listing.files:
            k = self.key(f)
            if known.get(k) == "failed" and f.uri not in self.out.failed_before:
                self.out.failed_before.append(f.uri)
            if k in known or not self.in_window(f.modified):
                continue
            if f.bucket is None and f.modified is not None and f.modified > cutoff:
                self.out.unsettled += 1  # still being written (or just landed): next time
                self._settled_by = max(self._settled_by or f.modified + settle, f.modified + settle)
                continue
            fresh.append((k, f))
        if self.deliveries is not None:
            fresh, self.out.held = self.deliveries.hold(fresh, {f.uri for f in listing.files})
        return fresh

    def _pending(self) -> list[LedgerRow]:
        return [r for r in self.ledger.rows(self.name, state="pending") if self.in_window(r.modified)]

    def discover(self) -> None:
        """List the location and record files the ledger has not seen as pending."""
        self._record(self._fresh())

    def note(self, found: Sequence[FileIdentity]) -> int:
        """Files an event named (their identity read from the store): pending, as if a listing found them.
        A key the ledger knows (a duplicated event, an unchanged upload) adds nothing. Returns how many
        were new."""
        fresh = [(self.key(f), f) for f in found if self.in_window(f.modified)]
        if self.deliveries is not None and fresh:  # a file held is taken by a later listing (relist_seconds)
            landed = {f.uri for f in found} | {r.uri for r in self.ledger.rows(self.name)}
            fresh, _ = self.deliveries.hold(fresh, landed)
        return self._record(fresh)

    def _record(self, fresh: list[tuple[str, FileIdentity]]) -> int:
        """Record fresh files as pending. A pending file rewritten before it ran is superseded by its new
        version (the old one is skipped, saying so)."""
        if self.src.on_change == "new_file" and fresh:
            waiting = {r.uri: r for r in self.ledger.rows(self.name, state="pending")}
            for k, f in fresh:
                old = waiting.get(f.uri)
                if old is not None and old.key != k:
                    why = f"replaced by a newer version ({f.version}) before it ran"
                    self.ledger.settle([old.key], "skipped", reason=why)
                    self.lh.progress(f"{f.uri}: {why}")
        before = published_before(self.lh.store, self.src.table, fresh)
        added = self.ledger.add(self.name, fresh, published=before)
        self.out.new += added
        if added:
            self.lh.progress(f"source {self.name}: {added} new file(s) of {self.out.listed or added}")
            for k, f in fresh:
                if k in before:
                    self.lh.progress(f"{f.uri}: {before[k]['reason']}")
        return added

    # --- batching --------------------------------------------------------------------------

    def next_batch(self, pending: list[LedgerRow]) -> list[LedgerRow]:
        """Oldest first, up to max_files_per_run and max_bytes_per_run. Files of a split batch carry a batch
        limit and go only with files of the same limit, at most that many (the older half first)."""
        first = pending[0]
        limit = min(first.batch_limit or self.src.max_files_per_run, self.src.max_files_per_run)
        if self.deliveries is not None and first.batch_limit is None:  # whole deliveries (not a split's halves)
            whole = [r for r in pending if r.batch_limit is None]
            return self.deliveries.batch(
                whole,
                lambda r: r.uri,
                lambda trial, r: (
                    len(trial) < limit and sum(x.size or 0 for x in trial) + (r.size or 0) <= self.src.max_bytes_per_run
                ),
            )
        batch: list[LedgerRow] = []
        size = 0
        for row in pending:
            if row.batch_limit != first.batch_limit:
                continue
            if batch and (len(batch) >= limit or size + (row.size or 0) > self.src.max_bytes_per_run):
                break
            batch.append(row)
            size += row.size or 0
        return batch

    # --- running ---------------------------------------------------------------------------

    def run(self) -> IngestResult:
        """One pass. Files that were still being written when listed (copied in just before the command) are
        waited for once, at most settle_seconds, then listed again and run: a one-off job started right after
        its files landed does what it was started for. Still changing after that: exit 5, saying when to
        run again."""
        self.resume_orphans()
        self.discover()
        self._run_claimed()
        if self.out.unsettled and self._settled_by is not None:
            wait = min(self.src.settle_seconds, max(0.0, (self._settled_by - datetime.now(UTC)).total_seconds()))
            self.lh.progress(
                f"source {self.name}: {self.out.unsettled} file(s) still being written; "
                f"waiting {wait:.1f}s for them to settle (settle_seconds)"
            )
            self.sleep(wait + 0.05)
            self.discover()
            self._run_claimed()
        self.out.files = self.ledger.rows(keys=list(self._ran))
        return self.out

    def _run_claimed(self) -> None:
        for run_id, batch in self.claimed_batches():
            self.runner(run_id, batch)

    def claimed_batches(self) -> Iterator[tuple[str, list[LedgerRow]]]:
        """Claim pending files batch by batch, oldest first, and yield each batch this process won (its
        rows as claimed). Pending files are listed again after each batch: a split puts files back."""
        while True:
            pending = self._pending()
            if not pending:
                return
            batch = self.next_batch(pending)
            keys = [r.key for r in batch]
            run_id = batch_run_id(self.name, keys)
            won = self.ledger.claim(keys, run_id)
            if len(won) < len(keys):
                # Another worker took some of these files meanwhile: give ours back and batch again.
                self.ledger.release(won)
                if won:
                    self.sleep(0.05)
                continue
            crash_point("ingest:claimed")
            yield run_id, self.ledger.rows(keys=keys)

    def plan(self) -> IngestResult:
        """What a run would do, changing nothing (`--dry-run`): the batches of new and pending files."""
        now = datetime.now(UTC)
        fresh = self._fresh()
        self.out.new = len(fresh)
        todo = self._pending() + [
            LedgerRow(k, self.name, f.uri, f.size, f.version, "pending", modified=f.modified) for k, f in fresh
        ]
        todo.sort(key=lambda r: (r.modified or now, r.uri))
        while todo:
            batch = self.next_batch(todo)
            self.out.planned.append([r.uri for r in batch])
            taken = {r.key for r in batch}
            todo = [r for r in todo if r.key not in taken]
        return self.out

    def resume_orphans(self) -> None:
        """Claims left by a killed process: take them over and run the same batch again (it resumes). And files
        held for review whose run has ended since (settle_reviewed)."""
        self.settle_reviewed()
        orphans: dict[str, list[LedgerRow]] = {}
        for row in self.ledger.rows(self.name, state="claimed"):
            if row.orphaned and row.run_id:
                orphans.setdefault(row.run_id, []).append(row)
        for run_id, rows in orphans.items():
            taken = set(self.ledger.take_over([r.key for r in rows], run_id))
            batch = [r for r in rows if r.key in taken]
            if batch:
                self.lh.progress(f"resuming run {run_id} ({len(batch)} file(s)), left by a process that is gone")
                self._recovered(run_id, batch)
                if self.revive is not None:
                    self.revive(run_id, batch)
                self.runner(run_id, batch)
                self.flush_alerts()

    def settle_reviewed(self) -> None:
        """Files held for review (`awaiting_review`) whose run the run store says has ended: `wap approve` settles
        them itself, but an approval killed after it was given completes by the run's resume command, which
        knows nothing of the ledger; the next pass makes the files follow their run."""
        held = {r.run_id for r in self.ledger.rows(self.name, state="awaiting_review") if r.run_id}
        for run_id in sorted(held):
            rec = self.lh.store.get(run_id)
            if rec is None or rec.status not in ("published", "blocked", "rejected"):
                continue
            keys = [r.key for r in self.ledger.rows(run_id=run_id, state="awaiting_review")]
            if rec.status == "published":
                self.ledger.settle(keys, "published", run_id=run_id, snapshot_id=rec.snapshot_id)
            elif rec.status == "blocked":
                self.ledger.settle(keys, "blocked", run_id=run_id, reason=f"run {run_id} was blocked after review")
            else:
                self.ledger.settle(keys, "rejected", run_id=run_id, reason=f"run {run_id} was rejected")
            self.lh.progress(f"run {run_id} was {rec.status} after review: {len(keys)} file(s) settled with it")

    # --- alerts ----------------------------------------------------------------------------

    def _occurrence(self, run_id: str, batch: list[LedgerRow]) -> str:
        return f"{run_id}.c{max((r.claims for r in batch), default=0)}"

    def _alert(self, res: RunResult, event: str, batch: list[LedgerRow], *, message: str | None = None) -> None:
        if not self.lh.config.alerts.sinks:
            return
        ev = from_run(res, event, source=self.name, key=self._occurrence(res.run_id, batch), message=message)
        ev.files = [r.uri for r in batch]
        if event in ("file_failed", "retries_exhausted"):
            ev.status = "failed"
        self.alerts.append(ev)

    def _recovered(self, run_id: str, batch: list[LedgerRow]) -> None:
        if not self.lh.config.alerts.sinks:
            return
        from wapflow.alerts.event import commands_for

        self.alerts.append(
            AlertEvent(
                event="recovered",
                table=self.src.table,
                run_id=run_id,
                status="resumed",
                message=f"run {run_id} of source {self.name} ({len(batch)} file(s)) was left by a process that is "
                "gone; resumed from where it stopped",
                source=self.name,
                files=[r.uri for r in batch],
                commands=commands_for(self.src.table, run_id, None),
                key=self._occurrence(run_id, batch),
            )
        )

    def flush_alerts(self) -> None:
        """Send the alerts collected so far (after the ledger recorded what they are about); never raises."""
        events, self.alerts = self.alerts, []
        notify(self.lh.config, self.lh.store.engine, events, progress=self.lh.progress)

    def _run_batch(self, run_id: str, batch: list[LedgerRow]) -> None:
        keys = [r.key for r in batch]
        for k in keys:
            self._ran[k] = None
        self.lh.progress(f"run {run_id}: {len(batch)} file(s) of source {self.name}")
        uris = [r.uri for r in batch]
        if self.models:
            self.lh.progress(f"run {run_id}: then model(s) {', '.join(self.models)}, published with the batch")
            group = run_batch(self.lh, self.src.table, uris, run_id=run_id, source=self.name, no_checks=self.no_checks)
            res = group.for_table(self.src.table)
        else:
            state = drive(
                self.lh, new_state(self.src.table, uris, run_id=run_id, source=self.name, no_checks=self.no_checks)
            )
            res = run_result(self.lh, state)
        crash_point("ingest:ran")
        self.out.runs.append(res)
        self.settle(res, batch)
        self.flush_alerts()

    def settle(self, res: RunResult, batch: list[LedgerRow], *, retry: bool = True) -> None:
        """Record a batch's run in the ledger. retry=False: a transient failure has used up its attempts
        already (the durable workflow retries in place), so its files fail."""
        keys = [r.key for r in batch]
        if res.status == "published":
            swapped = {} if self.src.on_change == "ignore" else read_in_place(self.lh.store, res.run_id, batch)
            ok = [r.key for r in batch if r.uri not in swapped]
            self.ledger.settle(ok, "published", run_id=res.run_id, snapshot_id=res.snapshot_id)
            for row in batch:
                if row.uri in swapped:
                    self._record_swap(res, row, swapped[row.uri])
            if self.lh.config.alerts.sinks:
                from wapflow.alerts.event import events_for_run

                limit = self.lh.config.alerts.quarantine_rate_above
                key = self._occurrence(res.run_id, batch)
                self.alerts += events_for_run(res, quarantine_rate_above=limit, source=self.name, key=key)
            return
        if res.status == AWAITING_REVIEW:
            # The whole batch passed its audit: it waits as one for a person (`wap approve` / `wap reject`);
            # the files are settled, so this pass, and a watch, go on with other files.
            self.ledger.settle(keys, "awaiting_review", run_id=res.run_id, reason=res.message)
            self._alert_held(res, batch)
            return
        error = res.error or {}
        kind = error.get("kind")
        if error.get("type") == RunInProgress.__name__:
            # Another live process runs this run (a durable workflow another worker resumed): it settles the
            # files; they stay claimed by the run, and this pass leaves them.
            self.lh.progress(f"run {res.run_id}: {error.get('message')}; its files are left to that process")
            return
        if res.status == "blocked" or kind == "input":
            if len(batch) > 1:
                self._split(res, batch)
            elif res.status == "blocked":
                self.ledger.settle(keys, "blocked", run_id=res.run_id, reason=res.message)
                self._alert(res, "blocked", batch)
            else:
                self.ledger.settle(keys, "failed", run_id=res.run_id, error=error, reason=res.message)
                self._alert(res, "file_failed", batch)
            return
        if retryable(error):
            # Each attempt is a claim of the batch (the ledger counts them); the next one runs after the wait.
            attempts = max(r.attempts for r in batch) if retry else self.retry.max_attempts
            if retry and self.retry.again(error, attempts):
                self.lh.progress(f"run {res.run_id}: {error.get('message')}; retrying in {backoff(attempts):.0f}s")
                self.ledger.settle(keys, "pending", reason=f"attempt {attempts} failed: {error.get('message')}")
                self.retry.wait(attempts)
                return
            reason = f"gave up after {attempts} attempts: {error.get('message')}"
            self.ledger.settle(keys, "failed", run_id=res.run_id, error=error, reason=reason)
            self._alert(res, "retries_exhausted", batch, message=reason)
            self._alert(res, "file_failed", batch, message=reason)
            return
        self.ledger.settle(keys, "failed", run_id=res.run_id, error=error, reason=res.message)
        self._alert(res, "failed", batch)
        self._alert(res, "file_failed", batch)

    def _alert_held(self, res: RunResult, batch: list[LedgerRow]) -> None:
        """A batch held for review: the `awaiting_review` alert (its diff read only when a sink wants it)."""
        from wapflow.outer.review import held_event, wanted

        rec = self.lh.store.get(res.run_id) if wanted(self.lh) else None
        if rec is not None:
            self.alerts.append(held_event(self.lh, rec, source=self.name, key=self._occurrence(res.run_id, batch)))

    def _record_swap(self, res: RunResult, row: LedgerRow, read: FileIdentity) -> None:
        """The version the run read is the one on main: record it published (a later listing must not run
        it again) and the listed version skipped, saying why, loudly."""
        key = self.key(read)
        self.ledger.add(self.name, [(key, read)])
        self.ledger.settle(
            [key],
            "published",
            run_id=res.run_id,
            snapshot_id=res.snapshot_id,
            reason="read in place of the listed version",
        )
        why = f"changed before run {res.run_id} read it; the version read ({read.version}) was published instead"
        self.ledger.settle([row.key], "skipped", run_id=res.run_id, reason=why)
        self._ran[key] = None
        self.lh.progress(f"warning: {row.uri} {why}")

    def _split(self, res: RunResult, batch: list[LedgerRow]) -> None:
        """A batch of several files that did not publish: drop its branch, run each half as a batch."""
        if res.branch:
            drop_split(self.lh, res, [TableName.parse(t) for t in [self.src.table, *self.models]])
        why = "blocked" if res.status == "blocked" else "failed on its input"
        half = (len(batch) + 1) // 2
        self.lh.progress(f"run {res.run_id} {why}: splitting its {len(batch)} files into batches of {half}")
        self.ledger.settle(
            [r.key for r in batch], "pending", reason=f"batch {res.run_id} {why}; split", batch_limit=half
        )


def models_of(lh: Lakehouse, source: Source) -> list[str]:
    """The models each batch of `source` runs and publishes with it: those reading its table, and theirs."""
    return downstream_models(lh.config.models, source.table) if source.cfg.models else []


def check_consent(lh: Lakehouse, source: Source, *, no_checks: bool, flag: str | None = NO_CHECKS_FLAG) -> None:
    """Before any file is listed or claimed: the source's table has checks, or the user said it may publish
    without (config.audit_consent); else the ConfigError every batch's run would fail with (exit 2)."""
    checks = lh.config.table(source.table, source=source.name).checks
    lh.config.audit_consent(source.table, checks=len(checks), no_checks=no_checks, flag=flag)
    models = models_of(lh, source)
    for name in models:
        own = len(lh.config.table(name).checks) + len(lh.config.models[name].checks)
        lh.config.audit_consent(name, checks=own, no_checks=no_checks, flag=flag)
    why = lh.iceberg.why_not_together() if models else None
    if why is not None:
        raise ConfigError(
            f"source {source.name}'s batches run the models that read {source.table} ({', '.join(models)}) and "
            f"publish them with the batch in one commit, and {why}",
            hint=f"set models = false in [sources.{source.name}] (the batch alone; `wap run-models` afterwards), "
            'or use a catalog that commits several tables at once (the embedded catalog, catalog = "jdbc", a '
            'REST catalog with multi-table commits, or "nessie")',
        )


def ingest(lh: Lakehouse, name: str, *, no_checks: bool = False) -> IngestResult:
    """List source `name`, run what is new in batches, record every file in the ledger. `no_checks`: its table
    may publish without checks if it has none (--no-checks)."""
    if not name:
        raise UsageError("name a source", hint="e.g. wap ingest trips ([sources.trips] in wap.toml)")
    source = lh.config.resolve_source(name)
    check_consent(lh, source, no_checks=no_checks)
    return Ingest(lh, source, no_checks=no_checks).run()


def parse_when(value: str | datetime | None, flag: str) -> datetime | None:
    """2026-01-01 or 2026-01-01T12:00, or a datetime (UTC unless an offset is given)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        t = value
    else:
        try:
            t = datetime.fromisoformat(value)
        except ValueError:
            raise UsageError(f"{flag} {value!r} is not a date", hint="e.g. 2026-01-01 or 2026-01-01T06:00") from None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def backfill(
    lh: Lakehouse,
    name: str,
    *,
    since: datetime | None,
    until: datetime | None,
    dry_run: bool = False,
    no_checks: bool = False,
) -> IngestResult:
    """The source's files modified in [since, until), oldest first, in batches. The same ledger as `ingest`:
    a backfill and an ingest of one source never run a file twice, and a killed backfill resumes where it
    stopped when started again."""
    source = lh.config.resolve_source(name)
    check_consent(lh, source, no_checks=no_checks)
    ing = Ingest(lh, source, since=since, until=until, no_checks=no_checks)
    return ing.plan() if dry_run else ing.run()


def published_before(
    store: RunStore, table_name: str, fresh: list[tuple[str, FileIdentity]]
) -> dict[str, dict[str, Any]]:
    """Fresh files (ledger key, identity) a run of this table published already, by identity (path, size,
    version: a `wap run` of the file before its source's ingest saw it), each with that run: recorded
    `published` as they enter the ledger, never published twice. The same file rewritten is a new version."""
    if not fresh:
        return {}
    table = TableName.parse(table_name).dotted
    keys: dict[tuple[Any, ...], str] = {(f.uri, f.size, f.version): k for k, f in fresh}
    out: dict[str, dict[str, Any]] = {}
    for f, rec in store.published_with(table, [f.to_dict() for _, f in fresh]):
        key = keys.get((f.get("uri"), f.get("size"), f.get("version")))
        if key is not None:
            why = f"published to {table} already by run {rec.run_id} (the same path, size and version)"
            out[key] = {"run_id": rec.run_id, "snapshot_id": rec.snapshot_id, "reason": why}
    return out


def read_in_place(store: RunStore, run_id: str, batch: list[LedgerRow]) -> dict[str, FileIdentity]:
    """Files of the batch rewritten between the listing and the run: the run read (and published) another
    version than the ledger lists, by uri."""
    rec = store.get(run_id)
    read = {d["uri"]: FileIdentity.from_dict(d) for d in (rec.file_ids if rec else [])}
    return {
        r.uri: read[r.uri]
        for r in batch
        if r.uri in read and (read[r.uri].size, read[r.uri].version) != (r.size, r.version)
    }


def drop_split(lh: Lakehouse, res: RunResult, tables: list[TableName]) -> None:
    """A batch about to be split: its branch dropped from its tables (and their quarantines), and its runs'
    records (the models' too) no longer keeping one; a blocked run is then discarded."""
    assert res.branch is not None
    try:
        lh.iceberg.discard(res.branch, [*tables, *(quarantine_of(t) for t in tables)])
    except Exception as e:  # noqa: BLE001 - a leftover branch is clutter, not a reason to stop
        lh.progress(f"warning: could not drop branch {res.branch} of the split batch: {e}")
    rec = lh.store.get(res.run_id)
    recs = [rec] if rec is not None else []
    if rec is not None and rec.group_id:
        recs = lh.store.group(rec.group_id) or recs  # the models' records went with the batch
    for r in recs:
        r.branch_kept = False
        r.status = DISCARDED if r.status == "blocked" else r.status
        lh.store.save(r)
