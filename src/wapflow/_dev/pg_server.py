"""A local PostgreSQL server for the production profile: `make pg-up` / `make pg-down` and the tests.

One real PostgreSQL (Debian's `postgresql` package: binaries in /usr/lib/postgresql/<major>/bin) serves
what several wapflow processes, or machines, must share: the Iceberg JDBC catalog, the run store and file
ledger, and DBOS's system database. It listens on 127.0.0.1 only, with its own data folder and its Unix
socket inside that folder (no system-wide service, no /var/run). initdb and postgres refuse to run as
root, so as root (CI, containers) they run as the `postgres` system user, which then owns the folder.

    python -m wapflow._dev.pg_server up     # start (initdb on first use); prints what to put in wap.toml
    python -m wapflow._dev.pg_server down   # stop (the data stays in the folder)
    python -m wapflow._dev.pg_server status

The password is a local development password (password authentication over TCP, trust only on the
socket inside the folder); a production server is yours to run and secure.
"""

from __future__ import annotations

import argparse
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from wapflow.errors import EnvironmentProblem
from wapflow.lakehouse.processes import free_port

HOST = "127.0.0.1"
DEFAULT_PORT = 55432
DEFAULT_DIR = Path(".wap/postgres")
DEFAULT_USER = "wap"
DEFAULT_PASSWORD = "wap"  # a local development password, nothing more
DEFAULT_DATABASE = "wap"
BIN_ENV = "WAP_PG_BIN"
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def find_bin_dir() -> Path:
    """Where initdb, pg_ctl and postgres are: $WAP_PG_BIN, else the newest /usr/lib/postgresql/*/bin, else PATH."""
    env = os.environ.get(BIN_ENV)
    if env:
        return Path(env)
    versions = []
    for d in Path("/usr/lib/postgresql").glob("*/bin"):
        if (d / "initdb").is_file() and d.parent.name.split(".")[0].isdigit():
            versions.append((int(d.parent.name.split(".")[0]), d))
    if versions:
        return max(versions)[1]
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise EnvironmentProblem(
        "PostgreSQL's server programs (initdb, pg_ctl, postgres) were not found",
        hint=f"install Debian's postgresql package (`apt-get install postgresql`), or set ${BIN_ENV} to their folder",
    )


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((HOST, port)) == 0


@dataclass(frozen=True)
class Urls:
    """How wapflow reaches one database of the server."""

    jdbc: str  # the Iceberg JDBC catalog's uri (user and password are separate properties)
    sqlalchemy: str  # run store, ledger, DBOS, PyIceberg's SqlCatalog
    user: str
    password: str


class LocalPostgres:
    """A PostgreSQL server in `folder` (data/, run/ for the socket, postgres.log) on 127.0.0.1:`port`.

    `fast` (tests): no fsync; a crash of the machine may lose the last commits, which a test server
    does not mind and a shared test machine is grateful for.
    """

    def __init__(
        self,
        folder: Path,
        *,
        port: int | None = None,
        user: str = DEFAULT_USER,
        password: str = DEFAULT_PASSWORD,
        database: str = DEFAULT_DATABASE,
        fast: bool = False,
    ) -> None:
        for what, name in (("user", user), ("database", database)):
            if not _NAME.match(name):
                raise EnvironmentProblem(f"{name!r} is not a plain PostgreSQL {what} name", hint="use [a-z0-9_]")
        self.folder = Path(folder).expanduser().absolute()
        self.port = port
        self.user = user
        self.password = password
        self.database = database
        self.fast = fast
        self.bin = find_bin_dir()

    @property
    def data_dir(self) -> Path:
        return self.folder / "data"

    @property
    def socket_dir(self) -> Path:
        return self.folder / "run"

    @property
    def log_path(self) -> Path:
        return self.folder / "postgres.log"

    # --- running the server's programs ----------------------------------------------------------

    def _as_owner(self) -> list[str]:
        """Root runs PostgreSQL's programs as the `postgres` system user (they refuse to run as root)."""
        if os.geteuid() != 0:
            return []
        return ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self._as_owner(), *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )

    def _prepare_folder(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if os.geteuid() != 0:
            return
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            raise EnvironmentProblem(
                "running as root, but there is no `postgres` system user to run PostgreSQL as",
                hint="install Debian's postgresql package (it creates the user), or run as another user",
            ) from None
        for p in (self.folder, self.socket_dir, *self.folder.rglob("*")):
            os.chown(p, owner.pw_uid, owner.pw_gid, follow_symlinks=False)
        if self._run("test", "-w", str(self.folder)).returncode != 0:
            raise EnvironmentProblem(
                f"the postgres system user cannot reach {self.folder} (a parent folder is private to root)",
                hint="pass a folder every user can traverse, e.g. --dir /var/tmp/wapflow-postgres",
            )

    def _initdb(self) -> None:
        pwfile = self.folder / ".pwfile"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o600)
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        try:
            args = [str(self.bin / "initdb"), "-D", str(self.data_dir), "-U", self.user, f"--pwfile={pwfile}"]
            args += ["--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-locale"]
            if self.fast:
                args.append("--no-sync")
            res = self._run(*args)
        finally:
            pwfile.unlink(missing_ok=True)
        if res.returncode != 0:
            raise EnvironmentProblem(
                f"initdb failed in {self.data_dir}: {_last_lines(res.stderr or res.stdout)}",
                hint="remove the folder to start afresh, or pick another with --dir",
            )
        conf = self.data_dir / "postgresql.conf"
        with conf.open("a", encoding="utf-8") as f:
            f.write("\n# wapflow: where and how this server listens (rewritten at each start)\n")
            f.write("include_if_exists = 'wapflow.conf'\n")

    def _write_settings(self, port: int) -> None:
        """listen_addresses, port and socket folder: written before each start, so a new port just works."""
        lines = [
            f"listen_addresses = '{HOST}'",
            f"port = {port}",
            f"unix_socket_directories = '{self.socket_dir}'",
            # Two `wap watch` workers each hold a run-store pool and DBOS's pool (about 35 connections).
            "max_connections = 200",
        ]
        if self.fast:
            lines += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
        path = self.data_dir / "wapflow.conf"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(path, owner.pw_uid, owner.pw_gid)

    # --- lifecycle -------------------------------------------------------------------------------

    def running_port(self) -> int | None:
        """The port of the server running on this data folder (from postmaster.pid), or None."""
        pidfile = self.data_dir / "postmaster.pid"
        try:
            lines = pidfile.read_text().splitlines()
            pid, port = int(lines[0]), int(lines[3])
        except (OSError, IndexError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return port

    def start(self) -> LocalPostgres:
        """initdb on first use, start the server (waits until it accepts connections), create the database.
        A server already running on this folder is reused."""
        self._prepare_folder()
        if not (self.data_dir / "PG_VERSION").is_file():
            self._initdb()
        running = self.running_port()
        if running is not None:
            self.port = running
        else:
            self._start_server()
        self.create_database(self.database)
        return self

    def _start_server(self) -> None:
        last = ""
        for _ in range(3):  # a free port may be taken between choosing and binding it
            port = self.port or free_port()
            if _port_open(port):
                raise EnvironmentProblem(
                    f"port {port} of {HOST} is already in use", hint="pick another with --port, or stop what uses it"
                )
            self._write_settings(port)
            res = self._run(
                str(self.bin / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_path), "-w", "-t", "60", "start"
            )
            if res.returncode == 0:
                self.port = port
                return
            last = _last_lines(self._log_tail() or res.stderr or res.stdout)
            if self.port is not None:
                break
        raise EnvironmentProblem(
            f"PostgreSQL did not start on {self.data_dir}: {last}", hint=f"its log is {self.log_path}"
        )

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-1500:]
        except OSError:
            return ""

    def stop(self, *, immediate: bool = False) -> bool:
        """Stop the server of this folder; `immediate` (tests): no checkpoint, at once. True if one ran."""
        if self.running_port() is None:
            return False
        mode = "immediate" if immediate else "fast"
        res = self._run(str(self.bin / "pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "-t", "60", "stop")
        if res.returncode != 0 and self.running_port() is not None:
            raise EnvironmentProblem(
                f"PostgreSQL on {self.data_dir} did not stop: {_last_lines(res.stderr or res.stdout)}",
                hint=f"its log is {self.log_path}",
            )
        return True

    # --- databases -------------------------------------------------------------------------------

    def urls(self, database: str | None = None) -> Urls:
        db = database or self.database
        if self.port is None:
            raise EnvironmentProblem("the local PostgreSQL server is not started", hint="start it first")
        return Urls(
            jdbc=f"jdbc:postgresql://{HOST}:{self.port}/{db}",
            sqlalchemy=f"postgresql+psycopg://{self.user}:{self.password}@{HOST}:{self.port}/{db}",
            user=self.user,
            password=self.password,
        )

    def create_database(self, name: str) -> Urls:
        """CREATE DATABASE `name` unless it exists (tests: one database per test, one server)."""
        import psycopg

        if not _NAME.match(name):
            raise EnvironmentProblem(f"{name!r} is not a plain PostgreSQL database name", hint="use [a-z0-9_]")
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(
                    host=HOST,
                    port=self.port,
                    user=self.user,
                    password=self.password,
                    dbname="postgres",
                    autocommit=True,
                    connect_timeout=5,
                ) as conn:
                    if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                        conn.execute(f'CREATE DATABASE "{name}"')
                break
            except psycopg.OperationalError as e:  # just started: may still refuse for a moment
                if time.monotonic() > deadline:
                    raise EnvironmentProblem(
                        f"cannot connect to PostgreSQL on {HOST}:{self.port}: {str(e).strip().splitlines()[-1]}",
                        hint=f"its log is {self.log_path}",
                    ) from None
                time.sleep(0.2)
        return self.urls(name)

    def toml(self, database: str | None = None) -> str:
        """The wap.toml lines that put the catalog, the run store and DBOS on this server."""
        u = self.urls(database)
        return (
            "[lakehouse]\n"
            'catalog = "jdbc"\n'
            "catalog_properties = { "
            f'uri = "{u.jdbc}", "jdbc.user" = "{u.user}", "jdbc.password" = "{u.password}", '
            '"jdbc.schema-version" = "V1" }\n'
            f'run_store = "{u.sqlalchemy}"\n'
            "# [watch] database defaults to the run store's database (DBOS keeps to its own schema, `dbos`)\n"
        )


def _last_lines(text: str, n: int = 3) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return " / ".join(lines[-n:]) or "no output"


# --- `make pg-up` / `make pg-down` -----------------------------------------------------------------


def _say(text: str, end: str = "\n") -> None:
    sys.stdout.write(text + end)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m wapflow._dev.pg_server", description=__doc__.splitlines()[0])
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"data folder (default {DEFAULT_DIR})")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port on {HOST} (default {DEFAULT_PORT})")
    args = p.parse_args(argv)
    try:
        srv = LocalPostgres(args.dir, port=args.port)
        if args.action == "up":
            srv.start()
            _say(f"PostgreSQL is up on {HOST}:{srv.port} (data in {srv.folder}, log {srv.log_path})")
            _say(f"stop it with `make pg-down` (or python -m wapflow._dev.pg_server down --dir {args.dir})\n")
            _say("# wap.toml: the Iceberg catalog, run store, ledger and DBOS on this server")
            _say(srv.toml(), end="")
        elif args.action == "down":
            stopped = srv.stop()
            _say(f"stopped PostgreSQL on {srv.folder}" if stopped else f"no PostgreSQL was running on {srv.folder}")
        else:
            port = srv.running_port()
            if port is None:
                _say(f"no PostgreSQL is running on {srv.folder}")
                return 1
            srv.port = port
            _say(f"PostgreSQL is running on {HOST}:{port} (data in {srv.folder})")
            _say(srv.toml(), end="")
    except EnvironmentProblem as e:
        sys.stderr.write(f"error: {e}\n")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
