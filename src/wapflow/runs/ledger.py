"""The file ledger: which landed file (identity) is where on its way to main, so each is published once.

One row per (source, file identity). A file rewritten under the same name has another identity (its
version changed) and is a new row, unless the source says `on_change = "ignore"`, in which case the key
is the uri alone. Rows live in the run store's database (SQLite by default, any SQLAlchemy URL), so a
claim is a conditional UPDATE that exactly one process wins.

States: pending (seen, not yet run) -> claimed (by run X, owned by a process) -> published (snapshot id)
| blocked (the audit said no; branch or report kept) | failed (terminal error, or retries used up) |
awaiting_review (the audit passed, the table's `review` holds the run for a person) -> published
(`wap approve`) | rejected (`wap reject`) | pending again (a split batch, a transient error, `wap retry`);
skipped (`wap skip`); reverted (`wap revert`). The states are wapflow.vocabulary's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from wapflow.runs.schema import METADATA, ensure_schema
from wapflow.runs.store import current_owner, owner_alive
from wapflow.storage.files import FileIdentity
from wapflow.vocabulary import FILE_STATES as FILE_STATES
from wapflow.vocabulary import SETTLED as SETTLED
from wapflow.vocabulary import FileState as FileState

files_table = sa.Table(
    "wap_files",
    METADATA,
    sa.Column("key", sa.String(64), primary_key=True),  # sha256(source, uri[, size, version])
    sa.Column("source", sa.String(128), nullable=False),
    sa.Column("uri", sa.Text, nullable=False),
    sa.Column("size", sa.BigInteger),
    sa.Column("version", sa.String(256)),
    sa.Column("modified", sa.DateTime(timezone=True)),  # the file's own time: batches run oldest first
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("run_id", sa.String(256)),  # a user's --run-id may be 128 characters (PostgreSQL enforces it)
    sa.Column("snapshot_id", sa.BigInteger),
    sa.Column("error", sa.Text),  # JSON of the run's error (kind, message, hint, ...)
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    # Claims ever made on this file (never reset, unlike attempts): with the run id it names the durable
    # workflow of a claim, so a claim after `wap retry` is a new workflow, a repeated one the same.
    sa.Column("claims", sa.Integer, nullable=False, default=0),
    sa.Column("batch_limit", sa.Integer),  # at most this many files per run (its batch was split in halves)
    sa.Column("reason", sa.Text),  # why skipped / retried / split, in words
    sa.Column("owner", sa.Text),  # JSON {host, pid, start} of the process holding the claim
    sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("ix_wap_files_source_state", "source", "state"),
    sa.Index("ix_wap_files_run_id", "run_id"),
)


def file_key(source: str, f: FileIdentity, *, track_changes: bool = True) -> str:
    """The ledger key of a file of a source: its identity, or only its uri when changes are ignored."""
    parts = [source, f.uri] + ([str(f.size), f.version or ""] if track_changes else [])
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


@dataclass
class LedgerRow:
    key: str
    source: str
    uri: str
    size: int | None
    version: str | None
    state: str
    modified: datetime | None = None
    run_id: str | None = None
    snapshot_id: int | None = None
    error: dict[str, Any] | None = None
    attempts: int = 0
    claims: int = 0
    batch_limit: int | None = None
    reason: str | None = None
    owner: dict[str, Any] | None = None
    first_seen: datetime = field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def identity(self) -> FileIdentity:
        return FileIdentity(self.uri, self.size, self.version, self.modified)

    @property
    def orphaned(self) -> bool:
        """Claimed by a process that is gone (killed mid-run): its run is resumed by the next ingest."""
        return self.state == "claimed" and owner_alive(self.owner) is False

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "uri": self.uri,
            "size": self.size,
            "version": self.version,
            "state": "claimed (orphaned)" if self.orphaned else self.state,
            "run_id": self.run_id,
            "snapshot_id": self.snapshot_id,
            "error": self.error,
            "attempts": self.attempts,
            "reason": self.reason,
            "modified": self.modified.isoformat() if self.modified else None,
            "first_seen": self.first_seen.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }

    @classmethod
    def from_row(cls, row: sa.Row[Any]) -> LedgerRow:
        m = row._mapping  # SQLAlchemy's public mapping view of a row
        return cls(
            key=m["key"],
            source=m["source"],
            uri=m["uri"],
            size=m["size"],
            version=m["version"],
            state=m["state"],
            modified=_utc(m["modified"]),
            run_id=m["run_id"],
            snapshot_id=m["snapshot_id"],
            error=json.loads(m["error"]) if m["error"] else None,
            attempts=int(m["attempts"] or 0),
            claims=int(m["claims"] or 0),
            batch_limit=m["batch_limit"],
            reason=m["reason"],
            owner=json.loads(m["owner"]) if m["owner"] else None,
            first_seen=_utc(m["first_seen"]) or datetime.now(UTC),
            updated_at=_utc(m["updated_at"]) or datetime.now(UTC),
        )


def _utc(t: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; every time here is UTC."""
    if t is None:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


_CHUNK = 500  # keys per IN (...) clause: well under SQLite's variable limit


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i : i + _CHUNK]


def _insert_new(conn: sa.Connection) -> sa.Insert:
    """INSERT that leaves a key another process recorded meanwhile as it is (two listings racing)."""
    name = conn.dialect.name
    if name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(files_table).on_conflict_do_nothing(index_elements=["key"])
    if name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(files_table).on_conflict_do_nothing(index_elements=["key"])
    return files_table.insert()  # other databases: a racing listing fails and is run again


class Ledger:
    """The file ledger in the run store's database (the engine is the run store's)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        ensure_schema(engine)

    # --- reading ---------------------------------------------------------------------------

    def states(self, source: str) -> dict[str, str]:
        """key -> state of every file of the source: one query, so a listing is diffed in memory."""
        t = files_table
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.c.key, t.c.state).where(t.c.source == source)).all()
        return {str(k): str(s) for k, s in rows}

    def rows(
        self,
        source: str | None = None,
        *,
        state: str | None = None,
        run_id: str | None = None,
        uri: str | None = None,
        keys: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[LedgerRow]:
        """Oldest file first (by its own modification time, then uri)."""
        t = files_table
        if keys is not None:
            found: dict[str, LedgerRow] = {}
            with self.engine.connect() as conn:
                for chunk in _chunks(list(keys)):
                    for r in conn.execute(sa.select(t).where(t.c.key.in_(chunk))).all():
                        found[r._mapping["key"]] = LedgerRow.from_row(r)
            return [found[k] for k in keys if k in found]
        # NULLS FIRST: SQLite's order, which PostgreSQL reverses unless told.
        q = sa.select(t).order_by(t.c.modified.asc().nulls_first(), t.c.uri.asc())
        if source is not None:
            q = q.where(t.c.source == source)
        if state is not None:
            q = q.where(t.c.state == state)
        if run_id is not None:
            q = q.where(t.c.run_id == run_id)
        if uri is not None:
            q = q.where(t.c.uri == uri)
        if limit is not None:
            q = q.limit(limit)
        with self.engine.connect() as conn:
            return [LedgerRow.from_row(r) for r in conn.execute(q).all()]

    def get(self, key: str) -> LedgerRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(files_table).where(files_table.c.key == key)).first()
        return LedgerRow.from_row(row) if row else None

    # --- writing ---------------------------------------------------------------------------

    def add(
        self,
        source: str,
        files: Sequence[tuple[str, FileIdentity]],
        published: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> int:
        """Record newly listed files as pending; keys already known are left as they are. Returns how many
        were new. `published`: keys recorded `published` at once instead, with their run_id, snapshot_id and
        reason (files another command published already: in the same transaction, so no crash leaves them
        pending to be published twice)."""
        if not files:
            return 0
        now = datetime.now(UTC)
        known: set[str] = set()
        keys = [k for k, _ in files]
        t = files_table
        with self.engine.begin() as conn:
            for chunk in _chunks(keys):
                known.update(conn.execute(sa.select(t.c.key).where(t.c.key.in_(chunk))).scalars())
            new = [
                {
                    "key": k,
                    "source": source,
                    "uri": f.uri,
                    "size": f.size,
                    "version": f.version,
                    "modified": f.modified,
                    "state": "pending",
                    "attempts": 0,
                    "claims": 0,
                    "first_seen": now,
                    "updated_at": now,
                }
                for k, f in sorted(dict(files).items())  # sorted: two listings inserting at once cannot deadlock
                if k not in known
            ]
            for row in new:  # every row the same keys: one executemany
                done = (published or {}).get(str(row["key"]))
                row["run_id"] = done.get("run_id") if done else None
                row["snapshot_id"] = done.get("snapshot_id") if done else None
                row["reason"] = done.get("reason") if done else None
                if done:
                    row["state"] = "published"
            if new:
                conn.execute(_insert_new(conn), new)
        return len(new)

    def claim(self, keys: Sequence[str], run_id: str) -> list[str]:
        """Take pending files for a run. Each key is a conditional UPDATE (state = pending), so when two
        processes race for a file exactly one wins; returns the keys this call won (in the order given).
        Keys are updated in sorted order: on PostgreSQL each UPDATE locks its row until the commit, and two
        claims locking overlapping files in different orders would deadlock."""
        now = datetime.now(UTC)
        owner = json.dumps(current_owner())
        t = files_table
        won: list[str] = []
        with self.engine.begin() as conn:
            for k in sorted(set(keys)):
                res = conn.execute(
                    t.update()
                    .where(t.c.key == k, t.c.state == "pending")
                    .values(
                        state="claimed",
                        run_id=run_id,
                        owner=owner,
                        attempts=t.c.attempts + 1,
                        claims=t.c.claims + 1,
                        updated_at=now,
                    )
                )
                if res.rowcount == 1:
                    won.append(k)
        order = {k: i for i, k in enumerate(keys)}
        return sorted(won, key=order.__getitem__)

    def take_over(self, keys: Sequence[str], run_id: str) -> list[str]:
        """Adopt the claim of a run whose process is gone (same run id, same files): the run resumes."""
        now = datetime.now(UTC)
        owner = json.dumps(current_owner())
        t = files_table
        taken: list[str] = []
        with self.engine.begin() as conn:
            for k in sorted(set(keys)):  # sorted: see claim()
                row = conn.execute(
                    sa.select(t.c.owner).where(t.c.key == k, t.c.state == "claimed", t.c.run_id == run_id)
                ).first()
                if row is None or owner_alive(json.loads(row[0]) if row[0] else None) is not False:
                    continue
                res = conn.execute(
                    t.update()
                    .where(t.c.key == k, t.c.state == "claimed", t.c.run_id == run_id, t.c.owner == row[0])
                    .values(owner=owner, updated_at=now)
                )
                if res.rowcount == 1:
                    taken.append(k)
        order = {k: i for i, k in enumerate(keys)}
        return sorted(taken, key=order.__getitem__)

    def adopt(self, keys: Sequence[str], run_id: str) -> list[str]:
        """The process running a batch's durable workflow holds its claim, whoever claimed it (a workflow
        enqueued by one worker may run in another, or resume in a restarted one)."""
        t = files_table
        values = {"owner": json.dumps(current_owner()), "updated_at": datetime.now(UTC)}
        self._update(keys, values, t.c.state == "claimed", t.c.run_id == run_id)
        return [r.key for r in self.rows(keys=list(keys)) if r.state == "claimed" and r.run_id == run_id]

    def settle(
        self,
        keys: Sequence[str],
        state: FileState,
        *,
        run_id: str | None = None,
        snapshot_id: int | None = None,
        error: dict[str, Any] | None = None,
        reason: str | None = None,
        batch_limit: int | None = None,
    ) -> None:
        """Record a run's outcome for its files (or put them back in line with state = pending)."""
        if state not in FILE_STATES:
            raise ValueError(f"unknown file state {state!r}")
        now = datetime.now(UTC)
        values: dict[str, Any] = {
            "state": state,
            "snapshot_id": snapshot_id,
            "error": json.dumps(error, default=str) if error else None,
            "reason": reason,
            "owner": None,
            "updated_at": now,
        }
        if run_id is not None:
            values["run_id"] = run_id
        if batch_limit is not None:
            values["batch_limit"] = batch_limit
        self._update(keys, values)

    def release(self, keys: Sequence[str]) -> None:
        """Give claimed files back unrun (a batch lost part of its files to another worker)."""
        t = files_table
        values = {"state": "pending", "owner": None, "attempts": t.c.attempts - 1, "updated_at": datetime.now(UTC)}
        self._update(keys, values, t.c.state == "claimed")

    def retry(self, keys: Sequence[str], reason: str) -> None:
        """Put settled files back in line with a fresh attempt count (`wap retry`)."""
        values = {"state": "pending", "attempts": 0, "error": None, "reason": reason, "owner": None}
        self._update(keys, {**values, "batch_limit": None, "updated_at": datetime.now(UTC)})

    def _update(self, keys: Sequence[str], values: dict[str, Any], *where: Any) -> None:
        """One UPDATE of these files (in chunks of keys, one transaction; sorted, see claim())."""
        t = files_table
        with self.engine.begin() as conn:
            for chunk in _chunks(sorted(set(keys))):
                conn.execute(t.update().where(t.c.key.in_(chunk), *where).values(**values))
