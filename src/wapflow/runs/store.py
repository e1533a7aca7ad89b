"""The run store: one row per run in SQLite beside the catalog, or any SQLAlchemy database.

A run that is `running` records which process runs it (host, pid and that process's start time).
When that process is gone, whatever killed it (SIGKILL, OOM, power cut), the record reads as
`interrupted`, with the command that resumes it, instead of `running` forever.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from wapflow.runs.schema import METADATA, ensure_schema
from wapflow.vocabulary import APPROVED as APPROVED
from wapflow.vocabulary import INTERRUPTED, run_branch
from wapflow.vocabulary import REJECTED as REJECTED
from wapflow.vocabulary import Decision as Decision

runs_table = sa.Table(
    "wap_runs",
    METADATA,
    # 256: a run id may be a user's --run-id (up to 128 characters, a branch name); PostgreSQL enforces it.
    sa.Column("run_id", sa.String(256), primary_key=True),
    sa.Column("table_name", sa.String(512), nullable=False, index=True),
    sa.Column("branch", sa.String(256)),
    # running / published / blocked / failed / awaiting_review / rejected (pipeline.state.Status) / discarded / reverted
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("files", sa.Text, nullable=False, default="[]"),
    sa.Column("rows_written", sa.BigInteger),
    sa.Column("base_snapshot_id", sa.BigInteger),
    sa.Column("branch_snapshot_id", sa.BigInteger),
    sa.Column("snapshot_id", sa.BigInteger),
    sa.Column("checks", sa.Text, nullable=False, default="[]"),
    sa.Column("error", sa.Text),
    sa.Column("timings", sa.Text, nullable=False, default="{}"),
    sa.Column("branch_kept", sa.Boolean, default=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True)),
    # Added after the first release (the baseline migration adds them to older stores).
    sa.Column("file_ids", sa.Text),  # JSON list of {uri, size, version}
    sa.Column("owner", sa.Text),  # JSON {host, pid, start} of the process while status is running
    sa.Column("reverted", sa.Text),  # JSON {at, snapshots: {table: snapshot id}} after `wap revert`
    # A person's decision on a run held for review (migration 0004): approved / rejected, by whom, why, when.
    sa.Column("review", sa.String(16)),
    sa.Column("review_by", sa.String(256)),
    sa.Column("review_reason", sa.Text),
    sa.Column("reviewed_at", sa.DateTime(timezone=True)),
    # The multi-table run this table's run is part of (migration 0005); null for a run of one table.
    sa.Column("group_id", sa.String(256), index=True),
    # JSON {table: {sequence_numbers, rows}} of a run published to v3 tables (migration 0009): what its rows'
    # row lineage says, so `wap revert` finds them once maintenance expired the run's snapshots.
    sa.Column("lineage", sa.Text),
    # Listings newest first, a branch's runs, a table's running runs (migration 0010).
    sa.Index("ix_wap_runs_started_at", "started_at"),
    sa.Index("ix_wap_runs_table_started", "table_name", "started_at"),
    sa.Index("ix_wap_runs_branch", "branch"),
    sa.Index("ix_wap_runs_table_status", "table_name", "status"),
)


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), so a reused pid is not mistaken for it."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


# The process a run, claim or maintenance record belongs to: this one, or, in the engine (wapflow.engine), the
# `wap` client it runs the command for. The record is then orphaned exactly when that command's process is gone.
_acting_for: int | None = None


@contextmanager
def acting_for(pid: int) -> Iterator[None]:
    """Records made in the block belong to process `pid` (the engine's client), not to this process."""
    global _acting_for
    previous, _acting_for = _acting_for, pid
    try:
        yield
    finally:
        _acting_for = previous


def current_owner() -> dict[str, Any]:
    pid = _acting_for or os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": _process_start(pid)}


def owner_alive(owner: dict[str, Any] | None) -> bool | None:
    """True/False for a process on this host; None when it runs elsewhere (cannot tell from here)."""
    if not owner or owner.get("host") != socket.gethostname():
        return None
    pid = int(owner.get("pid") or 0)
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    start = _process_start(pid)
    return start is None or owner.get("start") in (None, start)


@dataclass
class RunRecord:
    run_id: str
    table_name: str
    status: str
    branch: str | None = None
    files: list[str] = field(default_factory=list)
    rows_written: int | None = None
    base_snapshot_id: int | None = None
    branch_snapshot_id: int | None = None
    snapshot_id: int | None = None
    checks: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    branch_kept: bool = False
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime | None = None
    file_ids: list[dict[str, Any]] = field(default_factory=list)  # {uri, size, version} of each file read
    owner: dict[str, Any] | None = None  # the process running it (while status is running)
    reverted: dict[str, Any] | None = None  # when and by which snapshots `wap revert` took its rows off main
    review: Decision | None = None  # a person's decision on a run held for review
    review_by: str | None = None  # who decided (the OS user, or `--by`)
    review_reason: str | None = None  # why, in their words
    reviewed_at: datetime | None = None
    group_id: str | None = None  # the multi-table run this run is part of (`wap run-tables`)
    # On v3 tables, per table the run published to: {"sequence_numbers": [...], "rows": n} (RunLineage)
    lineage: dict[str, dict[str, Any]] | None = None

    @property
    def interrupted(self) -> bool:
        """Recorded as running, but the process that ran it is gone."""
        return self.status == "running" and owner_alive(self.owner) is False

    @property
    def shown_status(self) -> str:
        return INTERRUPTED if self.interrupted else self.status

    def resume_command(self) -> str:
        """The command that completes this run exactly once (same run id, same files)."""
        files = [f["uri"] for f in self.file_ids] or self.files
        parts = ["wap", "run", self.table_name, *files, "--run-id", self.run_id]
        if self.branch and self.branch != run_branch(self.run_id):
            parts += ["--branch", self.branch]
        return shlex.join(parts)

    def to_row(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "table_name": self.table_name,
            "branch": self.branch,
            "status": self.status,
            "files": json.dumps(self.files),
            "rows_written": self.rows_written,
            "base_snapshot_id": self.base_snapshot_id,
            "branch_snapshot_id": self.branch_snapshot_id,
            "snapshot_id": self.snapshot_id,
            "checks": json.dumps(self.checks, default=str),
            "error": json.dumps(self.error, default=str) if self.error else None,
            "timings": json.dumps(self.timings),
            "branch_kept": self.branch_kept,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "file_ids": json.dumps(self.file_ids),
            "owner": json.dumps(self.owner) if self.owner else None,
            "reverted": json.dumps(self.reverted) if self.reverted else None,
            "review": self.review,
            "review_by": self.review_by,
            "review_reason": self.review_reason,
            "reviewed_at": self.reviewed_at,
            "group_id": self.group_id,
            "lineage": json.dumps(self.lineage) if self.lineage else None,
        }

    @classmethod
    def from_row(cls, row: sa.Row[Any]) -> RunRecord:
        m = row._mapping
        return cls(
            run_id=m["run_id"],
            table_name=m["table_name"],
            status=m["status"],
            branch=m["branch"],
            files=json.loads(m["files"] or "[]"),
            rows_written=m["rows_written"],
            base_snapshot_id=m["base_snapshot_id"],
            branch_snapshot_id=m["branch_snapshot_id"],
            snapshot_id=m["snapshot_id"],
            checks=json.loads(m["checks"] or "[]"),
            error=json.loads(m["error"]) if m["error"] else None,
            timings=json.loads(m["timings"] or "{}"),
            branch_kept=bool(m["branch_kept"]),
            started_at=m["started_at"],
            finished_at=m["finished_at"],
            file_ids=json.loads(m["file_ids"] or "[]"),
            owner=json.loads(m["owner"]) if m["owner"] else None,
            reverted=json.loads(m["reverted"]) if m["reverted"] else None,
            review=m["review"],
            review_by=m["review_by"],
            review_reason=m["review_reason"],
            reviewed_at=m["reviewed_at"],
            group_id=m["group_id"],
            lineage=json.loads(m["lineage"]) if m.get("lineage") else None,
        )


def upsert(conn: sa.Connection, table: sa.Table, row: dict[str, Any], key: str) -> None:
    """Insert `row`, or update the row with its `key`, in one statement where the database can (SQLite,
    PostgreSQL): two processes saving the same run at once both succeed, the later one's values win."""
    name = conn.dialect.name
    update = {k: v for k, v in row.items() if k != key}
    if name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        conn.execute(sqlite_insert(table).values(**row).on_conflict_do_update(index_elements=[key], set_=update))
        return
    if name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        conn.execute(pg_insert(table).values(**row).on_conflict_do_update(index_elements=[key], set_=update))
        return
    if conn.execute(sa.select(table.c[key]).where(table.c[key] == row[key])).first():
        conn.execute(table.update().where(table.c[key] == row[key]).values(**row))
    else:
        conn.execute(table.insert().values(**row))


class _Row:
    """What RunRecord.from_row reads of a row (its `_mapping`), for a record kept outside the database."""

    def __init__(self, mapping: dict[str, Any]) -> None:
        self._mapping = mapping


_URIS_PER_QUERY = 20  # up to this many files, published_with asks the database by uri; more: one pass over runs


def _identity(file_id: dict[str, Any]) -> tuple[Any, ...]:
    """A file's identity in a run record (FileIdentity's equality: uri, size, version; not when it was modified)."""
    return (file_id.get("uri"), file_id.get("size"), file_id.get("version"))


def _same_files(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Two runs' files are the same files, by identity, in any order."""
    return sorted(map(_identity, a), key=repr) == sorted(map(_identity, b), key=repr)


class RunStore:
    """Run records in one database; every `wap` process opens its own and they share the file (WAL)."""

    def __init__(self, url: str) -> None:
        from wapflow.config.urls import normalize_url
        from wapflow.runs.databases import create_engine, sqlite_pragmas

        url = normalize_url(url)
        self.url = url
        if url.startswith("sqlite:///"):
            from wapflow.config import ensure_folder

            ensure_folder(Path(url[len("sqlite:///") :]).parent, "the run store's folder")
        self.engine = create_engine(url, what="[lakehouse] run_store", reached_as="the run store")
        if self.engine.dialect.name == "sqlite":
            # Concurrent wap processes share the file (see sqlite_pragmas).
            sa.event.listen(self.engine, "connect", lambda dbapi_conn, _rec: sqlite_pragmas(dbapi_conn))

        ensure_schema(self.engine)
        self.applied_pending = self._apply_pending()

    def _apply_pending(self) -> list[str]:
        """Write the records earlier processes kept aside because this store could not take them (runs.pending)
        while they still describe their run: the store has none, or the same attempt still `running`; a record
        that moved on meanwhile wins. Returns the run ids written."""
        from wapflow.runs import pending

        written: list[str] = []
        for path in pending.waiting(self.url):
            try:
                kept = RunRecord.from_row(_Row(pending.read(path)))  # type: ignore[arg-type]
            except (OSError, ValueError, KeyError):
                continue
            try:
                now = self.get(kept.run_id)
                if now is None or (now.status == "running" and now.owner == kept.owner):
                    self.save(kept)
                    written.append(kept.run_id)
            except Exception:  # noqa: BLE001 - the store still cannot take it: tried again at the next open
                continue
            with contextlib.suppress(OSError):
                path.unlink()
        return written

    def save(self, rec: RunRecord) -> None:
        with self.engine.begin() as conn:
            upsert(conn, runs_table, rec.to_row(), "run_id")

    def transition(self, run_id: str, expected: str, **values: Any) -> bool:
        """Change a run's record only if its status is still `expected`: one conditional UPDATE, so of two
        processes deciding the same run at once exactly one wins (True); the other gets False."""
        known = set(runs_table.c.keys())
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"no run store column(s) {sorted(unknown)}")
        row = {k: (json.dumps(v) if k == "owner" and v is not None else v) for k, v in values.items()}
        t = runs_table
        with self.engine.begin() as conn:
            res = conn.execute(t.update().where(t.c.run_id == run_id, t.c.status == expected).values(**row))
        return res.rowcount == 1

    def get(self, run_id: str) -> RunRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(runs_table).where(runs_table.c.run_id == run_id)).first()
        return RunRecord.from_row(row) if row else None

    def group(self, group_id: str) -> list[RunRecord]:
        """The runs of the tables of one multi-table run, in the order the run named its tables (`<id>-1`, ...)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(runs_table).where(runs_table.c.group_id == group_id)).all()
        found = [RunRecord.from_row(r) for r in rows]

        def index(rec: RunRecord) -> int:
            tail = rec.run_id.rsplit("-", 1)[-1]
            return int(tail) if tail.isdigit() else 0

        return sorted(found, key=index)

    def by_branch(self, branch: str) -> list[RunRecord]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(runs_table).where(runs_table.c.branch == branch).order_by(runs_table.c.started_at.desc())
            ).all()
        return [RunRecord.from_row(r) for r in rows]

    def published_with(self, table: str, file_ids: list[dict[str, Any]]) -> list[tuple[dict[str, Any], RunRecord]]:
        """Each of these files (by identity: uri, size, version) that a published run of `table` read, with that
        run (its latest); the uris narrow the query, the identities decide."""
        wanted = {_identity(f): f for f in file_ids}
        if not wanted:
            return []
        uris = sorted({str(f["uri"]) for f in file_ids})
        t = runs_table.c
        mine = (t.table_name == table, t.status == "published")
        with self.engine.connect() as conn:
            if len(uris) <= _URIS_PER_QUERY:  # a few files: the database finds the runs naming them
                named = sa.or_(*(t.file_ids.contains(json.dumps(u), autoescape=True) for u in uris))
                rows = conn.execute(sa.select(runs_table).where(*mine, named)).all()
            else:
                # Many (a backfill's listing): one pass over the table's runs' file lists here costs what one
                # LIKE per file would cost for every run (measured: 500 files against 10,000 runs), and keeps
                # clear of SQLite's limit on an expression's depth (1,000).
                hits = [
                    rid
                    for rid, ids in conn.execute(sa.select(t.run_id, t.file_ids).where(*mine, t.file_ids.is_not(None)))
                    if any(_identity(f) in wanted for f in json.loads(ids or "[]"))
                ]
                rows = []
                for k in range(0, len(hits), 500):
                    rows += conn.execute(sa.select(runs_table).where(t.run_id.in_(hits[k : k + 500]))).all()
        records = sorted((RunRecord.from_row(r) for r in rows), key=lambda r: r.started_at)
        found: dict[tuple[Any, ...], tuple[dict[str, Any], RunRecord]] = {}
        for rec in records:
            for f in rec.file_ids:
                if _identity(f) in wanted:
                    found[_identity(f)] = (wanted[_identity(f)], rec)
        return list(found.values())

    def interrupted_with(self, tables: list[str], file_ids: list[dict[str, Any]]) -> RunRecord | None:
        """The latest run of one of `tables` over exactly these files (by identity) whose process is gone while
        it was running (shown interrupted): the run `wap run` of the same files resumes."""
        if not file_ids:
            return None
        q = sa.select(runs_table).where(
            runs_table.c.table_name.in_(tables),
            runs_table.c.status == "running",
            # One uri narrows the query (the runs running are few); the identities decide. All of them here
            # would be an AND SQLite parses as a tree 1,000 deep at most.
            runs_table.c.file_ids.contains(json.dumps(file_ids[0]["uri"]), autoescape=True),
        )
        with self.engine.connect() as conn:
            records = [RunRecord.from_row(r) for r in conn.execute(q).all()]
        same = [r for r in records if r.interrupted and _same_files(r.file_ids, file_ids)]
        return max(same, key=lambda r: r.started_at) if same else None

    def interrupted_group(
        self, places: list[tuple[list[str], list[dict[str, Any]]]], branch: str | None = None
    ) -> list[RunRecord]:
        """The interrupted tables' runs of one multi-table run over these places (each: the names of its table,
        its files' identities), the run `wap run-tables` of the same tables and files resumes; [] if none.
        The table at place n ran as `<group>-<n>`; each such record is interrupted over the same files, or
        published over them (killed while recording the publish), or absent (not started). Nothing matches
        when two places name different runs, or the run had another table, other files or (given) branch."""
        found = [self.interrupted_with(names, ids) for names, ids in places]
        groups = {r.group_id for r in found if r is not None and (branch is None or r.branch == branch)}
        if len(groups) != 1 or None in groups:
            return []
        (gid,) = groups
        for i, (names, ids) in enumerate([*places, ([], [])]):  # and no table beyond the last
            rec = self.get(f"{gid}-{i + 1}")
            mine = found[i] if i < len(found) else None
            if rec is None or (mine is not None and mine.run_id == rec.run_id):
                continue
            if not (rec.status == "published" and rec.table_name in names and _same_files(rec.file_ids, ids)):
                return []
        return [r for r in found if r is not None]

    def published_since(self, table: str, since: datetime) -> list[RunRecord]:
        """`table`'s runs recorded published that started at or after `since`."""
        t = runs_table
        q = sa.select(t).where(t.c.table_name == table, t.c.status == "published", t.c.started_at >= since)
        with self.engine.connect() as conn:
            return [RunRecord.from_row(r) for r in conn.execute(q).all()]

    def add_lineage(self, run_id: str, lineage: dict[str, dict[str, Any]]) -> None:
        """Merge these tables' row lineage into a run's record (RunRecord.lineage), its other columns untouched."""
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(runs_table.c.lineage).where(runs_table.c.run_id == run_id)).first()
            if row is None:
                return
            merged = {**(json.loads(row[0]) if row[0] else {}), **lineage}
            conn.execute(runs_table.update().where(runs_table.c.run_id == run_id).values(lineage=json.dumps(merged)))

    def running(self, table: str) -> set[str]:
        """The ids of `table`'s runs recorded as running (alive, or interrupted and not yet resumed)."""
        q = sa.select(runs_table.c.run_id).where(runs_table.c.table_name == table, runs_table.c.status == "running")
        with self.engine.connect() as conn:
            return {str(r[0]) for r in conn.execute(q).all()}

    def list(self, table: str | None = None, limit: int = 100) -> list[RunRecord]:
        q = sa.select(runs_table).order_by(runs_table.c.started_at.desc()).limit(limit)
        if table:
            q = q.where(runs_table.c.table_name == table)
        with self.engine.connect() as conn:
            return [RunRecord.from_row(r) for r in conn.execute(q).all()]

    @property
    def lock_dir(self) -> Path:
        """Where file locks live: beside a SQLite run store, else in this user's cache (one machine)."""
        if self.url.startswith("sqlite:///"):
            return Path(self.url[len("sqlite:///") :]).parent / "locks"
        return Path.home() / ".cache" / "wapflow" / "locks"

    def publish_lock(self, table: str, *, timeout: float = 600.0) -> AbstractContextManager[None]:
        """Context manager: the one publisher of `table` at a time (wapflow.runs.locks); LockTimeout
        (transient) after `timeout` seconds of waiting."""
        from wapflow.runs.locks import publish_lock

        return publish_lock(self.engine, self.lock_dir, f"publish:{table}", timeout=timeout)

    def close(self) -> None:
        self.engine.dispose()
