"""One table as a maintenance pass reads and commits to it: its clock, its commits, its Iceberg procedures, its figures.

The commits are short: each under the table's publish lock, held for that commit only, and tried again on the
refreshed table when a publish won (wapflow.lakehouse.conflicts). The pass and its actions: wapflow.maintain.run
(TableMaintenance builds on this class, through the compaction of wapflow.maintain.compaction).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from wapflow.config import MaintenanceConfig
from wapflow.lakehouse.conflicts import retry_on_conflict
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.spark.kind import is_connect
from wapflow.sql.identifiers import TableName, quote, validate_branch

T = TypeVar("T")

CONFLICT_ATTEMPTS = 6


class MaintainedTable:
    """One table of a pass: the session, the clock the policy reads, commits, procedures and figures."""

    def __init__(
        self,
        lh: Lakehouse,
        table: TableName,
        cfg: MaintenanceConfig,
        *,
        dry_run: bool,
        now: datetime | None,
        pass_id: str,
    ) -> None:
        self.lh = lh
        self.t = table
        self.cfg = cfg
        self.dry_run = dry_run
        self._now = now.astimezone(UTC) if now is not None else None
        self.pass_id = pass_id
        self.spark = lh.spark
        self.ident = lh.tables.ident(table)
        self.conflicts = 0
        self.on_nessie = lh.config.lakehouse.catalog == "nessie"
        self.java = not is_connect(self.spark)  # Iceberg's Java API in this process (not a Connect client)

    @property
    def now_utc(self) -> datetime:
        """The clock the policy reads: the one given (tests, what-if), else the time of each action."""
        return self._now if self._now is not None else datetime.now(UTC)

    @property
    def now_local(self) -> datetime:
        """now_utc as Tables.snapshots gives snapshot times: naive local time."""
        return self.now_utc.astimezone().replace(tzinfo=None)

    # --- commits -----------------------------------------------------------------------------

    def _retrying(self, fn: Callable[[], T]) -> T:
        """A commit that lost to another writer (a publish) is tried again on the refreshed table."""

        def lost() -> None:
            self.conflicts += 1
            self.lh.tables.refresh(self.t)

        return retry_on_conflict(
            fn,
            what=f"a maintenance commit to {self.t}",
            on_conflict=lost,
            attempts=CONFLICT_ATTEMPTS,
            hint=f"main is unchanged by this commit; run `wap maintain {self.t.dotted}` again",
        )

    def _short_commit(self, fn: Callable[[], T]) -> T:
        """A metadata commit under the table's publish lock (held for this commit only)."""
        timeout = self.lh.config.lakehouse.publish_lock_timeout
        with self.lh.store.publish_lock(self.t.dotted, timeout=timeout):
            self.lh.tables.refresh(self.t)
            return self._retrying(fn)

    def _jtable(self) -> Any:
        """Iceberg's table API: only for the file swap on main (no SQL form); never on a Connect client."""
        return self.lh.tables.java_table(self.t)

    def _table_arg(self) -> str:
        return self.t.procedure_arg(self.lh.catalog)

    def _call(self, procedure: str, args: str) -> list[Any]:
        return self.spark.sql(f"CALL {quote(self.lh.catalog)}.system.{procedure}({args})").collect()

    # --- figures -----------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Files, bytes, snapshots and manifests of main; metadata files of a local table."""
        self.lh.tables.refresh(self.t)
        files = self.t.metadata_sql(self.lh.catalog, "data_files")
        row = self.spark.sql(f"SELECT count(*) AS n, coalesce(sum(file_size_in_bytes), 0) AS b FROM {files}").collect()
        manifests = self.spark.sql(f"SELECT count(*) AS n FROM {self.t.metadata_sql(self.lh.catalog, 'manifests')}")
        out: dict[str, Any] = {
            "snapshots": len(self.lh.tables.snapshots(self.t)),
            "data_files": int(row[0]["n"]),
            "data_bytes": int(row[0]["b"]),
            "manifests": int(manifests.collect()[0]["n"]),
        }
        folder = self._local_metadata_folder()
        if folder is not None and folder.is_dir():
            sizes = [e.stat().st_size for e in os.scandir(folder) if e.is_file()]
            out["metadata_files"] = len(sizes)
            out["metadata_bytes"] = sum(sizes)
        return out

    def _table_properties(self) -> dict[str, str]:
        """The table's properties as Iceberg's Spark table gives them (with `sort-order` when it has one)."""
        rows = self.spark.sql(f"SHOW TBLPROPERTIES {self.ident}").collect()
        return {str(r["key"]): str(r["value"]) for r in rows}

    def _local_metadata_folder(self) -> Path | None:
        """The folder of the table's current metadata.json, when it is on this machine's filesystem."""
        log = self.t.metadata_sql(self.lh.catalog, "metadata_log_entries")
        rows = self.spark.sql(f"SELECT file FROM {log} ORDER BY timestamp DESC LIMIT 1").collect()
        if not rows:
            return None
        loc = str(rows[0]["file"]).rsplit("/", 1)[0]
        if loc.startswith("file:"):
            loc = loc[len("file:") :]
            while loc.startswith("//"):
                loc = loc[1:]
        elif "://" in loc:
            return None
        return Path(loc)

    def _drop(self, branch: str) -> None:
        validate_branch(branch)
        self._short_commit(lambda: self.spark.sql(f"ALTER TABLE {self.ident} DROP BRANCH IF EXISTS {quote(branch)}"))
