"""The databases wapflow keeps its own state in: URLs, drivers, passwords, and what a failed connection means.

The run store and file ledger, DBOS's system database and (with `catalog = "jdbc"`) the Iceberg catalog
may all live on one PostgreSQL server, which is what lets workers on several machines share them; SQLite
files serve one machine. Three rules hold for every such URL; the first two (`postgresql://` means
psycopg 3; a password is never shown) are string rules in wapflow.config.urls, which wap.toml's model
uses too. Here:

- A connection that fails says why in wapflow's terms: a server that cannot be reached is transient (a
  retry may help), a rejected password or a missing database needs someone to act.

`check_database`, `check_dbos_database` and `check_jdbc_catalog` are what a health check (`wap doctor`)
calls: each connects, looks, and returns a small dict, or raises the WapError a command would.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlsplit

from wapflow.config.urls import normalize_url, password_of, redact_url
from wapflow.errors import ConfigError, EnvironmentProblem, Unreachable, WapError
from wapflow.redact import redact

if TYPE_CHECKING:
    import sqlalchemy as sa

    from wapflow.config import WapConfig

# Every engine this process made: a forked child (a command of the wapflow engine, wapflow.engine.server)
# must not use its parent's pooled connections, which share one socket with the parent.
_ENGINES: weakref.WeakSet[sa.Engine] = weakref.WeakSet()


def _forget_parent_connections() -> None:
    """In a forked child: each engine's pool starts empty, the parent's connections left to the parent
    (SQLAlchemy's rule for os.fork: dispose(close=False))."""
    for engine in list(_ENGINES):
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_forget_parent_connections)

# A driver's module for each SQLAlchemy dialect+driver wapflow can be asked to use, to name what is missing.
_DRIVER_MODULES = {
    "postgresql+psycopg": "psycopg",
    "postgresql+psycopg2": "psycopg2",
    "postgresql+pg8000": "pg8000",
    "postgresql+asyncpg": "asyncpg",
}


def sqlite_pragmas(dbapi_conn: Any) -> None:
    """How wapflow's own SQLite files are opened (the run store's, DBOS's): WAL, so concurrent `wap` processes
    share the file; synchronous=NORMAL, durable through a killed process (the WAL is written before a commit
    returns) without FULL's fsync per commit (3.0 -> 0.9 ms a save; a small run makes five, a DBOS workflow a
    dozen): only an OS crash may roll back the last commits, which a re-run finds on main by its snapshot's run
    id anyway; and a 30 s wait for a competing writer."""
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def create_engine(url: str, *, what: str, reached_as: str | None = None) -> sa.Engine:
    """An SQLAlchemy engine for `url` (normalized), or a ConfigError naming the missing driver.

    `what` names the setting in messages, e.g. "[lakehouse] run_store"; `reached_as` the database in
    messages about reaching it later (default: `what`), e.g. "the run store".
    """
    import sqlalchemy as sa

    url = normalize_url(url)
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        raise ConfigError(
            f"{what} {redact_url(url)!r} is not a database URL",
            hint="use sqlite:////abs/path/file.db or postgresql://user:password@host:5432/database",
        ) from None
    try:
        engine = sa.create_engine(parsed, future=True)
    except sa.exc.NoSuchModuleError:
        raise ConfigError(
            f"{what} {redact_url(url)}: SQLAlchemy knows no database called {parsed.drivername!r}",
            hint="use sqlite:///... or postgresql://... (psycopg 3, installed with wapflow)",
        ) from None
    except ImportError as e:
        module = _DRIVER_MODULES.get(parsed.drivername, e.name or parsed.drivername)
        raise ConfigError(
            f"{what} {redact_url(url)} needs the Python driver {module}, which is not installed",
            hint="write postgresql://... or postgresql+psycopg://... (psycopg 3 comes with wapflow), "
            f"or install {module}",
        ) from None
    if parsed.drivername.startswith("postgresql"):
        _name_lost_connections(engine, url, reached_as or what)
    _ENGINES.add(engine)
    return engine


def _name_lost_connections(engine: sa.Engine, url: str, what: str) -> None:
    """A PostgreSQL server that stops or restarts while a command uses it (a store save in the middle of a
    run) is said in wapflow's terms, transient when the server cannot be reached, instead of as a driver
    error that no code above recognises. Errors the server names about a statement (SQLSTATE other than
    connection and shutdown classes) are left to their callers, which handle some (concurrent CREATE)."""
    import sqlalchemy as sa

    def on_error(ctx: sa.engine.ExceptionContext) -> None:
        orig = ctx.original_exception
        state = str(getattr(orig, "sqlstate", None) or "")
        failed_connect = not state and isinstance(ctx.sqlalchemy_exception, sa.exc.OperationalError)
        if ctx.is_disconnect or state.startswith(("08", "57P0")) or failed_connect:
            e = ctx.sqlalchemy_exception or orig
            raise connection_error(e, url, what=what, lost=ctx.is_disconnect) from None

    sa.event.listen(engine, "handle_error", on_error)


def connection_error(e: BaseException, url: str, *, what: str, lost: bool = False) -> WapError:
    """What a failed connection to `url` means, without its password. psycopg gives no error code when a
    connection fails, so the server's port is tried: a server that cannot be reached is transient (a retry
    may help); one that answers but refused the login or the database needs someone to act, as does an
    error the server named (SQLSTATE) that is not about the connection. `lost`: an open connection was cut
    (the server stopped or restarted), which is transient whatever the port says now."""
    import sqlalchemy as sa

    orig = e.orig if isinstance(e, sa.exc.DBAPIError) else e
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    url = normalize_url(url)
    lines = [x.strip() for x in str(orig).strip().splitlines() if x.strip()]
    detail = redact(" ".join(lines) or type(orig).__name__, password_of(url))
    where = f"{what} at {redact_url(url)}"
    # 57P01-57P03: the server is shutting down, crashed or is starting up: transient, like a cut connection.
    if lost or str(state or "").startswith("57P0"):  # the server went away (stopped, restarted, network)
        return Unreachable(
            f"lost the connection to {where}: {detail}",
            hint="the database server stopped or restarted: run the command again once it is back",
        )
    if state is not None and not str(state).startswith("08"):  # 08: connection exceptions
        return EnvironmentProblem(
            f"{where} answered with an error: {detail}",
            hint="check that this user may create and write tables in that database",
        )
    if _answers(url):
        return EnvironmentProblem(
            f"{where} refused the connection: {detail}",
            hint="check the user, password and database name in the URL (the database must exist: "
            "`createdb NAME`), and the server's pg_hba.conf",
        )
    return Unreachable(
        f"cannot reach {where}: {detail}",
        hint="check that the database server is running and reachable from this machine",
    )


def _answers(url: str) -> bool:
    """The database server's TCP port accepts connections (False for SQLite and Unix sockets)."""
    import socket

    import sqlalchemy as sa

    try:
        u = sa.make_url(url)
    except sa.exc.ArgumentError:
        return False
    if not u.drivername.startswith("postgresql") or not u.host or u.host.startswith("/"):
        return False
    try:
        with socket.create_connection((u.host, u.port or 5432), timeout=3):
            return True
    except OSError:
        return False


def check_database(url: str, *, what: str = "database") -> dict[str, Any]:
    """Connect to `url` once: {"url": redacted, "dialect", "server_version"}; raises what a command would."""
    import sqlalchemy as sa

    engine = create_engine(url, what=what)
    try:
        with engine.connect() as conn:
            version = (
                conn.execute(sa.text("SHOW server_version")).scalar()
                if engine.dialect.name == "postgresql"
                else conn.execute(sa.text("SELECT sqlite_version()")).scalar()
                if engine.dialect.name == "sqlite"
                else None
            )
    except sa.exc.DBAPIError as e:
        raise connection_error(e, url, what=what) from None
    finally:
        engine.dispose()
    return {"url": redact_url(normalize_url(url)), "dialect": engine.dialect.name, "server_version": version}


def dbos_database_url(cfg: WapConfig, url: str | None = None) -> str:
    """DBOS's system database: the one named (--database / [watch] database), else beside the run store (a
    SQLite file of its own, or the run store's PostgreSQL database, where DBOS keeps to its own schema)."""
    url = url or cfg.watch.database
    if url:
        return normalize_url(url)
    store = cfg.run_store_url()
    if store.startswith("sqlite:///"):
        return "sqlite:///" + str(Path(store[len("sqlite:///") :]).with_name("dbos.sqlite"))
    return store


def check_dbos_database(cfg: WapConfig, url: str | None = None) -> dict[str, Any]:
    """check_database on DBOS's system database, and whether DBOS created its tables there yet (it does at
    the first `wap watch`): {"url", "dialect", "server_version", "initialized"}."""
    import sqlalchemy as sa

    db = dbos_database_url(cfg, url)
    info = check_database(db, what="DBOS's system database")
    engine = create_engine(db, what="DBOS's system database")
    try:
        schema = "dbos" if engine.dialect.name == "postgresql" else None
        info["initialized"] = sa.inspect(engine).has_table("workflow_status", schema=schema)
    except sa.exc.DBAPIError as e:
        raise connection_error(e, db, what="DBOS's system database") from None
    finally:
        engine.dispose()
    return info


def jdbc_catalog_url(cfg: WapConfig) -> str | None:
    """The SQLAlchemy URL of a JDBC catalog's database (PostgreSQL or SQLite), with the user and password of
    catalog_properties (jdbc.user / jdbc.password, or user= / password= in the uri); None for other catalogs."""
    lh = cfg.lakehouse
    uri = lh.catalog_properties.get("uri", "")
    if lh.catalog == "sqlite":
        return f"sqlite:///{cfg.embedded_catalog_path()}"
    if uri.startswith("jdbc:sqlite:"):
        return "sqlite:///" + uri[len("jdbc:sqlite:") :].split("?", 1)[0]
    if not uri.startswith("jdbc:postgresql:"):
        return None
    parts = urlsplit(uri[len("jdbc:") :])
    query = parse_qs(parts.query)
    user = lh.catalog_properties.get("jdbc.user") or next(iter(query.get("user", [])), None)
    password = lh.catalog_properties.get("jdbc.password") or next(iter(query.get("password", [])), None)
    auth = ""
    if user:
        auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "") + "@"
    host = parts.netloc.rsplit("@", 1)[-1] or "localhost"
    return f"postgresql+psycopg://{auth}{host}{parts.path or '/'}"


def check_jdbc_catalog(cfg: WapConfig) -> dict[str, Any]:
    """For a JDBC catalog (the embedded SQLite one, or jdbc:postgresql): connect to its database without a
    JVM and count this catalog's tables: {"url", "dialect", "server_version", "initialized", "tables"}. Other
    catalogs: {"checked": False} (they need Spark or their own client)."""
    import sqlalchemy as sa

    url = jdbc_catalog_url(cfg)
    if url is None:
        return {"checked": False, "catalog": cfg.lakehouse.catalog}
    what = "the Iceberg catalog's database"
    info = check_database(url, what=what)
    engine = create_engine(url, what=what)
    try:
        initialized = sa.inspect(engine).has_table("iceberg_tables")
        tables = 0
        if initialized:
            with engine.connect() as conn:
                tables = int(
                    conn.execute(
                        sa.text("SELECT COUNT(*) FROM iceberg_tables WHERE catalog_name = :c"),
                        {"c": cfg.lakehouse.catalog_name},
                    ).scalar()
                    or 0
                )
    except sa.exc.DBAPIError as e:
        raise connection_error(e, url, what=what) from None
    finally:
        engine.dispose()
    return {**info, "checked": True, "initialized": initialized, "tables": tables}
