"""The version of wapflow's own tables (run store, file ledger, alert deliveries) and their upgrades.

One owner for "is this database's schema the one this code needs": every component that opens wapflow's
database calls `ensure_schema(engine)`. It applies the Alembic migrations in wapflow/runs/migrations under a
lock (a file lock beside a SQLite store, a PostgreSQL advisory lock), so two workers starting at once migrate
once; a store written before migrations existed is adopted by the baseline revision with its rows; a store
stamped by a newer wapflow is refused (exit 2) instead of being written with the wrong idea of its tables.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from wapflow.errors import ConfigError

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from alembic.script import ScriptDirectory

# wapflow's own version table: a PostgreSQL database shared with other Alembic users keeps theirs apart.
VERSION_TABLE = "wap_schema_version"
MIGRATIONS = Path(__file__).parent / "migrations"
# The models of every wapflow table (runs/store.py, ledger.py, alerts.py add theirs): what the head revision
# must match (tests/unit/test_schema.py).
METADATA = sa.MetaData()
# The newest revision in migrations/versions. A database stamped with it is opened after one SELECT, without
# loading Alembic (with its templates, Alembic is about a third of a plain command's import time);
# tests/unit/test_schema.py holds this to Alembic's own head, so a new revision must bump it.
HEAD = "0010"

_done: set[str] = set()  # engines (by URL) already checked in this process
_done_lock = threading.Lock()


@dataclass(frozen=True)
class SchemaVersion:
    current: str | None  # None: nothing stamped (a new database, or a store from before migrations)
    head: str  # what this wapflow writes

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head


def _script() -> ScriptDirectory:
    """Alembic's view of the revisions (imported lazily: alembic costs import time a plain command avoids)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS))


def head() -> str:
    rev = _script().get_current_head()
    assert rev is not None
    return str(rev)


def version(engine: sa.Engine) -> SchemaVersion:
    """The database's stamped revision and this code's head (what `wap doctor` shows)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        current = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()
    return SchemaVersion(current, head())


def _stamped(engine: sa.Engine) -> str | None:
    """The one revision stamped in the database, read without Alembic (None: no version table, or not one row)."""
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table(VERSION_TABLE):
            return None
        table = sa.table(VERSION_TABLE, sa.column("version_num"))
        stamps = list(conn.execute(sa.select(table.c.version_num)).scalars())
    return str(stamps[0]) if len(stamps) == 1 else None


def check_known(current: str | None, where: str) -> None:
    from alembic.util import CommandError

    if current is None:
        return
    try:
        _script().get_revision(current)
    except CommandError:
        raise ConfigError(
            f"{where} was written by a newer wapflow (its tables are at schema revision {current}; this wapflow "
            f"knows up to {head()})",
            hint="upgrade wapflow on this machine (pip install -U wapflow), or point it at another database",
        ) from None


def _lock(engine: sa.Engine) -> AbstractContextManager[None]:
    from wapflow.runs.locks import publish_lock

    url = engine.url
    if url.get_backend_name() == "sqlite" and url.database:
        lock_dir = Path(url.database).parent / "locks"
    else:
        lock_dir = Path.home() / ".cache" / "wapflow" / "locks"
    return publish_lock(engine, lock_dir, "wapflow-schema", timeout=300.0)


def ensure_schema(engine: sa.Engine, *, where: str = "the run store") -> SchemaVersion:
    """Bring the database's tables to this code's head, once per process and database."""
    key = engine.url.render_as_string(hide_password=False)
    with _done_lock:
        if key in _done:
            return SchemaVersion(HEAD, HEAD)
    try:
        if _stamped(engine) == HEAD:  # the usual case: no Alembic needed
            with _done_lock:
                _done.add(key)
            return SchemaVersion(HEAD, HEAD)
        now = version(engine)
    except sa.exc.DBAPIError as e:
        if engine.dialect.name != "postgresql":
            raise
        from wapflow.runs.databases import connection_error

        raise connection_error(e, engine.url.render_as_string(hide_password=False), what=where) from None
    check_known(now.current, where)
    if not now.up_to_date:
        from alembic import command
        from alembic.config import Config

        with _lock(engine):
            now = version(engine)  # another worker may have migrated while this one waited for the lock
            check_known(now.current, where)
            if not now.up_to_date:
                cfg = Config()
                cfg.set_main_option("script_location", str(MIGRATIONS))
                with engine.begin() as conn:
                    cfg.attributes["connection"] = conn
                    command.upgrade(cfg, "head")
        now = version(engine)
    with _done_lock:
        _done.add(key)
    return now
