"""Maintenance of one table after another: each action an Iceberg procedure, recorded, retried, alerted.

Per table, in this order (each recorded in the run store as one row of `wap_maintenance`):

1. `properties`: old metadata.json files are deleted after each commit
   (`write.metadata.delete-after-commit.enabled`, `write.metadata.previous-versions-max`).
2. `drop_branches`: branches kept by blocked or failed runs older than `keep_blocked_for` are dropped and
   their runs marked as `wap discard` would; a compaction branch left by a killed `wap maintain` too.
3. `compact`: `rewrite_data_files` (bin-pack, or sort when the table has a sort order): small files, and
   files whose deletion vectors delete at least 30% of their rows (merge-on-read merges). On a v2 table,
   files of runs published within `revert_window` are never rewritten, so those runs stay revertable (`wap
   revert` removes exactly the files a run added): when main has such runs, the rewrite runs on a branch
   made at main's newest snapshot before the window, and the same file swap is then committed on main
   (Iceberg's RewriteFiles, validated against anything removed meanwhile). A v3 table is compacted whole at
   once: `wap revert` finds a run's rows by row lineage, wherever compaction moved them.
4. `rewrite_manifests`.
5. `expire_snapshots`: exactly the snapshots wapflow.maintain.plan allows, by id.
6. `remove_orphans`: `remove_orphan_files` for files older than `orphan_older_than` (at least 1 day).

One code path for a local session and a Spark Connect client: every action is an Iceberg procedure or an
ALTER TABLE run as SQL, and every fact is read from SQL (metadata tables, SHOW TBLPROPERTIES). The one
exception is the file swap on main of a compaction before the revert window (Iceberg's RewriteFiles has no
SQL form): a Connect client skips that compaction, saying so, until main's runs leave revert_window.

On Nessie (catalog = "nessie") a table's files and metadata files are shared by the Nessie commits of every
branch, which Iceberg's snapshot expiry, orphan removal and metadata deletion do not see (Iceberg's Nessie
catalog sets gc.enabled = false): those actions are skipped, naming nessie-gc, Nessie's own garbage
collector; compaction and the manifest rewrite commit on Nessie's main, and kept branches are Nessie branches.

Locks: a table is maintained by one process at a time (a lock of its own, `maintain:TABLE`; a second
`wap maintain` skips the table). The table's publish lock is held only around short metadata commits
(branch drops, properties, the file swap, each expiry commit), never around a rewrite, so a publish waits
seconds at most; a commit that loses to a concurrent publish is retried (wapflow.lakehouse.conflicts).

Crash safety: every action is idempotent. A `wap maintain` killed mid-way leaves main readable with all its
rows (a rewrite not committed leaves only unreferenced files, removed later as orphans); its records read
`interrupted`, and the next `wap maintain` does the rest.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from wapflow.config import MaintenanceConfig
from wapflow.errors import EXIT_PUBLISHED, LockTimeout, NotFound, UsageError, WapError, did_you_mean
from wapflow.faults import crash_point
from wapflow.lakehouse import session
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.model import (
    FORMAT_VERSION_PROP,
    FORMAT_VERSIONS,
    LINEAGE_FROM_VERSION,
    METADATA_DELETE_AFTER_COMMIT_PROP,
    METADATA_PREVIOUS_VERSIONS_MAX_PROP,
    row_change_properties,
)
from wapflow.maintain.compaction import Compaction
from wapflow.maintain.plan import plan_expiry, stale_branches
from wapflow.runs.locks import publish_lock
from wapflow.runs.maintenance import MaintenanceLog, MaintenanceRecord
from wapflow.spark import errors as spark_errors
from wapflow.sql.identifiers import TableName, sql_string
from wapflow.vocabulary import MAINTAIN_BRANCH_PREFIX, table_of_quarantine

EXPIRE_CHUNK = 500  # snapshot ids per expiry commit: each commit holds the publish lock briefly
ACTIONS = ("properties", "drop_branches", "compact", "rewrite_manifests", "expire_snapshots", "remove_orphans")
# Iceberg treats older_than as "strictly before": nothing is older than this, so only the ids named expire.
_NOTHING_OLDER = "TIMESTAMP '1970-01-02 00:00:00'"
NESSIE_GC = (
    "left to nessie-gc on a Nessie catalog: Nessie commits of other branches share this table's files, "
    "which Iceberg's expiry and orphan removal do not see (gc.enabled = false)"
)


def new_pass_id() -> str:
    return "m" + datetime.now(UTC).strftime("%Y%m%dt%H%M%S") + "_" + secrets.token_hex(3)


@dataclass
class TableOutcome:
    """What maintenance did (or, in a dry run, would do) to one table."""

    table: str
    status: str = "done"  # done | failed | skipped | dry_run
    message: str = ""
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    actions: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None

    def action(self, name: str) -> dict[str, Any]:
        return next((a for a in self.actions if a["action"] == name), {})

    def figures(self, name: str) -> dict[str, Any]:
        return dict(self.action(name).get("figures") or {})

    def summary(self) -> dict[str, Any]:
        """The figures a person looks at first."""
        compact, expire = self.figures("compact"), self.figures("expire_snapshots")
        return {
            "data_files_before": self.before.get("data_files"),
            "data_files_after": self.after.get("data_files"),
            "data_bytes_before": self.before.get("data_bytes"),
            "data_bytes_after": self.after.get("data_bytes"),
            "files_compacted": compact.get("rewritten_data_files", compact.get("planned_files")),
            "snapshots_expired": expire.get("expired", expire.get("expire")),
            "manifests_rewritten": self.figures("rewrite_manifests").get("rewritten_manifests"),
            "branches_dropped": len(self.figures("drop_branches").get("dropped", [])),
            "orphans": self.figures("remove_orphans").get("orphans"),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "status": self.status,
            "message": self.message,
            "summary": self.summary(),
            "before": self.before,
            "after": self.after,
            "actions": self.actions,
            "error": self.error,
        }


@dataclass
class MaintenanceResult:
    pass_id: str
    dry_run: bool
    tables: list[TableOutcome] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        for t in self.tables:
            if t.status == "failed" and t.error:
                return int(t.error.get("exit_code") or 3)
        return EXIT_PUBLISHED

    def to_dict(self) -> dict[str, Any]:
        return {
            "pass_id": self.pass_id,
            "dry_run": self.dry_run,
            "exit_code": self.exit_code,
            "tables": [t.to_dict() for t in self.tables],
        }


def maintain(
    lh: Lakehouse,
    table: str | None = None,
    *,
    dry_run: bool = False,
    now: datetime | None = None,
    pass_id: str | None = None,
    upgrade_format: int | None = None,
) -> MaintenanceResult:
    """Maintain `table`, or every table of the catalog whose [maintenance] is enabled, one after another.

    `upgrade_format`: instead, raise `table`'s Iceberg format version to this one (the one action of the
    pass, recorded as `upgrade_format`); a lower version than the table's is refused (UsageError)."""
    _usable(lh)
    pass_id = pass_id or new_pass_id()
    result = MaintenanceResult(pass_id, dry_run)
    if upgrade_format is not None and table is None:
        raise UsageError(
            "--upgrade-format needs the table to upgrade",
            hint=f"name it: wap maintain NS.TABLE --upgrade-format {upgrade_format}",
        )
    if upgrade_format is not None and upgrade_format not in FORMAT_VERSIONS:
        raise UsageError(
            f"--upgrade-format {upgrade_format}: wapflow runs on Iceberg format versions "
            f"{', '.join(map(str, FORMAT_VERSIONS))} only",
            hint="use --upgrade-format 3",
        )
    if table is not None:
        name = TableName.parse(table)
        if not lh.tables.exists(name):
            known = [t.dotted for t in lh.tables.list_tables()]
            raise NotFound(
                f"no table {name} in the lakehouse{did_you_mean(name.dotted, known)}",
                hint="see the tables with `wap history` / the dashboard; names are namespace.table",
            )
        names = [name]
    else:
        names = lh.tables.list_tables()
    log = None if dry_run else MaintenanceLog(lh.store.engine)
    if upgrade_format is not None:
        job = TableMaintenance(
            lh, names[0], lh.config.maintenance_for(names[0].dotted), dry_run=dry_run, now=now, pass_id=pass_id, log=log
        )
        job.check_upgrade(upgrade_format)  # a downgrade: refused before anything is recorded
        out = job.run([("upgrade_format", lambda: job.upgrade_format(upgrade_format))])
        if out.status != "failed":
            f = out.figures("upgrade_format")
            verb = "would upgrade" if dry_run else "upgraded"
            out.message = f.get("skipped") or f"{verb} {names[0]} from format version {f['from']} to {upgrade_format}"
        result.tables.append(out)
        return result
    for t in names:
        cfg = lh.config.maintenance_for(t.dotted)
        if not cfg.enabled:
            result.tables.append(TableOutcome(t.dotted, "skipped", "[maintenance] enabled = false"))
            continue
        job = TableMaintenance(lh, t, cfg, dry_run=dry_run, now=now, pass_id=pass_id, log=log)
        result.tables.append(job.run())
    return result


def _usable(lh: Lakehouse) -> None:
    """A local master maintains in this process's own JVM, not through `wap serve`'s server: the file swap of a
    compaction before the revert window needs Iceberg's Java API. A Spark Connect master is used as it is."""
    session.use_server = False


class TableMaintenance(Compaction):
    """One table's pass: its actions in order, each recorded; a failed action does not stop the others."""

    def __init__(
        self,
        lh: Lakehouse,
        table: TableName,
        cfg: MaintenanceConfig,
        *,
        dry_run: bool,
        now: datetime | None,
        pass_id: str,
        log: MaintenanceLog | None,
    ) -> None:
        super().__init__(lh, table, cfg, dry_run=dry_run, now=now, pass_id=pass_id)
        self.log = log
        self.out = TableOutcome(table.dotted, "dry_run" if dry_run else "done")

    # --- the pass ----------------------------------------------------------------------------

    def run(self, steps: list[tuple[str, Callable[[], dict[str, Any]]]] | None = None) -> TableOutcome:
        """The pass's actions (`steps`: these instead, e.g. the format upgrade), each recorded."""
        store = self.lh.store
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(
                    publish_lock(store.engine, store.lock_dir, f"maintain:{self.t.dotted}", timeout=1.0)
                )
            except LockTimeout:
                self.out.status = "skipped"
                self.out.message = f"another `wap maintain` is maintaining {self.t} right now"
                return self.out
            self.lh.progress(f"maintaining {self.t}" + (" (dry run)" if self.dry_run else ""))
            self.out.before = self.stats()
            steps = steps or [
                ("properties", self.properties),
                ("drop_branches", self.drop_branches),
                ("compact", self.compact),
                ("rewrite_manifests", self.rewrite_manifests),
                ("expire_snapshots", self.expire),
                ("remove_orphans", self.orphans),
            ]
            for n, (name, fn) in enumerate(steps, start=1):
                self.action(n, name, fn)
            self.out.after = self.out.before if self.dry_run else self.stats()
        if self.out.status == "failed":
            failed = [a["action"] for a in self.out.actions if a["status"] == "failed"]
            self.out.message = f"{', '.join(failed)} failed: {(self.out.error or {}).get('message')}"
        else:
            s = self.out.summary()
            verb = "would change" if self.dry_run else "maintained"
            self.out.message = (
                f"{verb} {self.t}: data files {s['data_files_before']} -> "
                f"{s['data_files_after'] if not self.dry_run else '?'}, "
                f"{s['snapshots_expired'] or 0} snapshot(s) expired, {s['branches_dropped']} branch(es) dropped"
            )
        return self.out

    def action(self, n: int, name: str, fn: Callable[[], dict[str, Any]]) -> None:
        rec: MaintenanceRecord | None = self.log.start(self.pass_id, n, self.t.dotted, name) if self.log else None
        started = time.monotonic()
        try:
            figures = fn()
            if not self.dry_run:
                crash_point(f"maintain:{name}")  # the action's change is committed; its record says running
        except Exception as e:  # noqa: BLE001 - recorded, alerted and shown; the other actions still run
            err = self._error(e, name)
            if rec is not None and self.log is not None:
                self.log.finish(rec, "failed", {}, err.to_dict())
            self.out.actions.append({"action": name, "status": "failed", "error": err.to_dict()})
            self.out.status = "failed"
            self.out.error = self.out.error or err.to_dict()
            self._alert(name, err)
            return
        figures["seconds"] = round(time.monotonic() - started, 3)
        status = "skipped" if figures.get("skipped") else ("planned" if self.dry_run else "done")
        if rec is not None and self.log is not None:
            self.log.finish(rec, status, figures)
        self.out.actions.append({"action": name, "status": status, "figures": figures})

    def _error(self, e: Exception, action: str) -> WapError:
        if isinstance(e, WapError):
            return e
        return spark_errors.named_or_bug(e, doing=f"{action} of {self.t}", run_id=None, step=f"maintain {action}")

    def _alert(self, action: str, err: WapError) -> None:
        cfg = self.lh.config
        if not cfg.alerts.sinks:
            return
        from wapflow.alerts import AlertEvent, notify

        ev = AlertEvent(
            event="maintenance_failed",
            table=self.t.dotted,
            run_id=None,
            status="failed",
            message=f"maintenance action {action} of {self.t} failed: {err.message}",
            error={k: v for k, v in err.to_dict().items() if k in ("type", "kind", "message", "hint", "retryable")},
            commands=[f"wap maintain {self.t.dotted} --dry-run", f"wap maintain {self.t.dotted}"],
            key=f"{self.pass_id}:{self.t.dotted}:{action}",
        )
        notify(cfg, self.lh.store.engine, [ev], progress=self.lh.progress)

    # --- the actions ------------------------------------------------------------------------

    def properties(self) -> dict[str, Any]:
        if self.on_nessie:  # an older metadata.json may be what another Nessie branch's commit points to
            return {"skipped": "deleting old metadata files is " + NESSIE_GC}
        want = {
            METADATA_DELETE_AFTER_COMMIT_PROP: "true",
            METADATA_PREVIOUS_VERSIONS_MAX_PROP: str(self.cfg.metadata_versions_max),
        }
        have = self._table_properties()
        diff = {k: v for k, v in want.items() if have.get(k) != v}
        if not diff:
            return {"set": {}, "skipped": "already set"}
        if self.dry_run:
            return {"set": diff}
        pairs = ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in diff.items())
        self._short_commit(lambda: self.spark.sql(f"ALTER TABLE {self.ident} SET TBLPROPERTIES ({pairs})"))
        return {"set": diff}

    def format_version(self) -> int:
        """The table's Iceberg format version (Iceberg's Spark table lists it as the `format-version` property)."""
        self.lh.tables.refresh(self.t)
        return int(self._table_properties().get(FORMAT_VERSION_PROP, "1"))

    def check_upgrade(self, version: int) -> None:
        """A downgrade is refused: Iceberg cannot lower a table's format version (its files and metadata may
        already use what the higher one added)."""
        have = self.format_version()
        if version < have:
            raise UsageError(
                f"{self.t} is at Iceberg format version {have}; --upgrade-format {version} would lower it, "
                "and a format version can only go up",
                hint=f"nothing was changed; {self.t} stays at version {have}",
            )

    def upgrade_format(self, version: int) -> dict[str, Any]:
        """ALTER TABLE ... SET TBLPROPERTIES ('format-version' = N): Iceberg's own upgrade, a metadata-only
        commit (no data file is rewritten); idempotent (already there: skipped)."""
        have = self.format_version()
        if have >= version:
            return {"from": have, "to": have, "skipped": f"{self.t} is already at format version {have}"}
        if self.dry_run:
            return {"from": have, "to": version}
        # The row-level write modes wapflow gives a table of that version, unless the table sets its own.
        props = {FORMAT_VERSION_PROP: str(version)}
        existing = self._table_properties()
        props.update({k: v for k, v in row_change_properties(version).items() if k not in existing})
        pairs = ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in props.items())
        self._short_commit(lambda: self.spark.sql(f"ALTER TABLE {self.ident} SET TBLPROPERTIES ({pairs})"))
        props.pop(FORMAT_VERSION_PROP)
        return {"from": have, "to": self.format_version(), "set": props}

    def drop_branches(self) -> dict[str, Any]:
        from wapflow.service.tables import discard

        names = [b.name for b in self.lh.iceberg.list_branches(self.t)]  # Nessie branches on Nessie
        leftovers = [n for n in names if n.startswith(MAINTAIN_BRANCH_PREFIX)]
        stale: list[tuple[str, Any]] = []
        if self.cfg.keep_blocked_for is not None:
            runs = {n: self.lh.store.by_branch(n) for n in names if n not in leftovers}
            keep_for = timedelta(seconds=self.cfg.seconds("keep_blocked_for") or 0)
            stale = stale_branches(self.t.dotted, runs, runs, now=self.now_utc, keep_blocked_for=keep_for)
        figures: dict[str, Any] = {
            "dropped": [{"branch": b, "run_id": r.run_id, "status": r.status} for b, r in stale],
            "leftovers": leftovers,
            "kept": len(names) - len(stale) - len(leftovers),
        }
        if self.dry_run:
            return figures
        for b, _ in stale:
            self._short_commit(lambda b=b: discard(self.lh, b, self.t.dotted))  # type: ignore[misc]  # bound per loop
        for b in leftovers:
            self._drop(b)
        return figures

    def rewrite_manifests(self) -> dict[str, Any]:
        if not self.cfg.rewrite_manifests:
            return {"skipped": "rewrite_manifests = false"}
        self.lh.tables.refresh(self.t)
        if self.lh.tables.head(self.t, "main") is None:
            return {"skipped": "the table has no snapshot yet"}
        n = int(
            self.spark.sql(f"SELECT count(*) AS n FROM {self.t.metadata_sql(self.lh.catalog, 'manifests')}").collect()[
                0
            ]["n"]
        )
        if n <= 1:
            return {"manifests": n, "skipped": "one manifest or none", "rewritten_manifests": 0}
        if self.dry_run:
            return {"manifests": n}
        row = self._retrying(lambda: self._call("rewrite_manifests", f"table => {self._table_arg()}"))[0]
        return {
            "manifests": n,
            "rewritten_manifests": int(row["rewritten_manifests_count"]),
            "added_manifests": int(row["added_manifests_count"]),
            "conflicts_retried": self.conflicts,
        }

    def _plan(self) -> Any:
        self.lh.tables.refresh(self.t)
        base = table_of_quarantine(self.t.dotted)  # a quarantine table's runs are its table's
        return plan_expiry(
            self.lh.tables.snapshots(self.t),
            self.lh.tables.refs(self.t),
            now=self.now_local,
            expire_older_than=timedelta(seconds=self.cfg.seconds("expire_older_than") or 0),
            keep_last=self.cfg.keep_last,
            revert_window=timedelta(seconds=self.cfg.seconds("revert_window") or 0),
            # v3: `wap revert` finds a run's rows by the row lineage its record keeps, not by main's history.
            history_for_revert=self.lh.tables.current_format_version(self.t) < LINEAGE_FROM_VERSION,
            unsettled=self.lh.store.running(base),
        )

    def _record_lineage(self) -> int:
        """On a v3 table, the row lineage of runs within revert_window whose records lack it (published on v2
        before an upgrade, or by an older wapflow) is recorded from main's history before any of it expires,
        so they stay revertable. The runs recorded."""
        if self.dry_run or self.lh.tables.current_format_version(self.t) < LINEAGE_FROM_VERSION:
            return 0
        window = timedelta(seconds=self.cfg.seconds("revert_window") or 0)
        base = table_of_quarantine(self.t.dotted)
        lacking = [
            r.run_id
            for r in self.lh.store.published_since(base, self.now_utc - window)
            if self.t.dotted not in (r.lineage or {})
        ]
        found = self.lh.tables.runs_lineage(self.t, lacking)
        for run_id, lineage in found.items():
            self.lh.store.add_lineage(run_id, {self.t.dotted: lineage})
        return len(found)

    def expire(self) -> dict[str, Any]:
        if self.on_nessie:
            return {"skipped": "snapshot expiry is " + NESSIE_GC}
        recorded = self._record_lineage()
        plan = self._plan()
        figures: dict[str, Any] = plan.to_dict()
        if recorded:
            figures["lineage_recorded"] = recorded
        if self.dry_run:
            figures["snapshot_ids"] = plan.expire[:100]
            return figures
        totals = {"expired": 0, "deleted_data_files": 0, "deleted_manifest_files": 0, "deleted_manifest_lists": 0}
        for i in range(0, len(plan.expire), EXPIRE_CHUNK):
            chunk = plan.expire[i : i + EXPIRE_CHUNK]

            def commit(chunk: list[int] = chunk) -> Any:
                still = set(self._plan().expire)  # under the lock: nothing became needed since planning
                ids = [sid for sid in chunk if sid in still]
                if not ids:
                    return None
                args = (
                    f"table => {self._table_arg()}, older_than => {_NOTHING_OLDER}, "
                    f"snapshot_ids => array({', '.join(str(int(s)) for s in ids)})"
                )
                return ids, self._call("expire_snapshots", args)[0]

            done = self._short_commit(commit)
            if done is None:
                continue
            ids, row = done
            totals["expired"] += len(ids)
            totals["deleted_data_files"] += int(row["deleted_data_files_count"])
            totals["deleted_manifest_files"] += int(row["deleted_manifest_files_count"])
            totals["deleted_manifest_lists"] += int(row["deleted_manifest_lists_count"])
        return {**figures, **totals}

    def orphans(self) -> dict[str, Any]:
        if self.on_nessie:
            return {"skipped": "orphan-file removal is " + NESSIE_GC}
        seconds = self.cfg.seconds("orphan_older_than")
        if seconds is None:
            return {"skipped": 'orphan_older_than = "never"'}
        # The real clock, whatever `now` planning was given: this is about writes running right now.
        older = (min(self.now_utc, datetime.now(UTC)) - timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")
        args = (
            f"table => {self._table_arg()}, older_than => TIMESTAMP '{older}Z', "
            f"dry_run => {'true' if self.dry_run else 'false'}"
        )
        rows = self._call("remove_orphan_files", args)
        found = [str(r["orphan_file_location"]) for r in rows]
        return {
            "older_than": older + "Z",
            "orphans": len(found),
            "removed": 0 if self.dry_run else len(found),
            "sample": found[:5],
        }
