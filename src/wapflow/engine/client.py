"""The `wap` side of the engine: hand a command to the warm engine of its configuration, or start one.

Cheap on purpose (the standard library and wapflow.stopping): it runs in every `wap` process before the
commands are imported, and for a served command it is all that runs here. Which commands, and when: the
command needs Spark (runtime.COMMANDS), `--no-engine` is not given, WAP_ENGINE is not `off`, and the
configuration says `engine = "auto"` (or WAP_ENGINE=auto). Anything that keeps the engine from serving the
command (Java missing, a runtime folder that is not writable, a start that times out) is one line on stderr,
and the command runs in this process as it always did.

Stops: before the engine has begun the command, Ctrl-C or SIGTERM stop this process like any `wap` start-up
(wapflow.stopping); once it has, they are sent to the engine as a stop frame and this process waits for the
command's own end (exit 130, the run resumes later). An engine that dies under a command: one line, exit 3.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import socket
import sys
import time
from pathlib import Path
from typing import Any

from wapflow.engine import protocol as P
from wapflow.engine.runtime import (
    COMMANDS,
    ENGINE_ENV,
    METADATA_COMMANDS,
    MIN_FREE_ENV,
    EnginePaths,
    EngineUnavailable,
    config_path,
    engine_key,
    engine_limits,
    engine_setting,
    ensure_runtime_dir,
    is_engine,
    lost_message,
    make_room,
    memory_available,
    metadata_needs_spark,
    read_info,
    remove_files,
    scope_of,
    served,
)
from wapflow.errors import EXIT_RUNTIME
from wapflow.lakehouse.processes import alive
from wapflow.stopping import STOP

NO_ENGINE_FLAG = "--no-engine"
# The engine process's module (in the CLI package: what it runs for clients is the CLI).
ENGINE_MODULE = "wapflow.cli.engine_main"
# How long a starting engine may take to listen (Python's imports; Spark starts after it listens).
LISTEN_TIMEOUT = 60.0


def strip_flag(argv: list[str]) -> bool:
    """Remove --no-engine from argv (before `--`); whether it was there."""
    cut = argv.index("--") if "--" in argv else len(argv)
    if NO_ENGINE_FLAG not in argv[:cut]:
        return False
    del argv[argv.index(NO_ENGINE_FLAG)]
    return True


def _command(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


# `wap run`'s options that take a value (the table is the first argument that is neither one nor its value).
_RUN_VALUE_OPTIONS = frozenset({"--branch", "--not-null", "--run-id", "--config", "-c"})


def _misspelt_table(argv: list[str], path: Any) -> bool:
    """`wap run TABLE ...` of a table whose section's name is misspelt in wap.toml (WapConfig.misspelt_section)."""
    from wapflow.config import load_config
    from wapflow.sql.identifiers import TableName

    args = argv[argv.index("run") + 1 :]
    table = None
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in _RUN_VALUE_OPTIONS:
            skip = True
        elif not a.startswith("-"):
            table = a
            break
    if table is None:
        return False
    try:
        return load_config(path).misspelt_section(TableName.parse(table).dotted) is not None
    except Exception:  # noqa: BLE001 - a wap.toml or a name that does not load: the command itself says what
        return False


def handoff(argv: list[str], prog: str) -> int | None:
    """The exit code of the command `argv` run by the engine, or None: this process runs it (with one line on
    stderr when the engine was asked for but cannot serve it)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    command = _command(argv)
    if command not in COMMANDS | METADATA_COMMANDS or "--help" in argv[:cut]:
        return None
    forced = os.environ.get(ENGINE_ENV, "").strip().lower()
    if forced == "off":
        return None
    try:
        cwd = os.getcwd()
        path = config_path(argv, os.environ, cwd)
    except (EngineUnavailable, OSError):
        return None  # the command says what is wrong with --config / $WAP_CONFIG
    mode, data = engine_setting(path)
    if not (mode == "auto" or (forced == "auto" and mode == "off")):
        return None
    if served(path, cwd):
        return None  # `wap serve` runs for this configuration: the command is its client, as it says
    if command in METADATA_COMMANDS and not metadata_needs_spark(command, data, os.environ):
        return None  # it reads the catalog itself, no JVM
    if command == "run" and _misspelt_table(argv[:cut], path):
        return None  # the command says so from wap.toml alone, before any JVM: no engine to start for it
    for _ in range(2):  # an engine that was stopping as we came: once more, with a new one
        try:
            return Client(argv, prog, cwd, path, data).run()
        except _Retry:
            continue
        except _ConfigProblem:
            return None  # the command itself reports what is wrong with wap.toml, as without an engine
        except (EngineUnavailable, OSError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            progress(f"the wapflow engine is not used: {why}; running the command in this process")
            return None
    progress("the wapflow engine is not used: it was stopping twice; running the command in this process")
    return None


class _ConfigProblem(EngineUnavailable):
    """wap.toml does not load: no line about the engine, the command says what is wrong."""


class _Retry(Exception):
    """The engine was stopping when this client came: start or find another."""


def progress(msg: str) -> None:
    """A line as the CLI's progress lines look (wapflow.cli.output.Output.progress): dim on a terminal."""
    dim = sys.stderr.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    sys.stderr.write(f"\x1b[2m· {msg}\x1b[0m\n" if dim else f"· {msg}\n")
    sys.stderr.flush()


def _terminal() -> dict[str, Any]:
    """This process's terminal as Rich would see it: which streams are terminals, the size, the encodings."""
    size = None
    for fd in (0, 1, 2):
        try:
            size = os.get_terminal_size(fd)
            break
        except OSError:
            continue
    return {
        "stdout": os.isatty(1),
        "stderr": os.isatty(2),
        "columns": size.columns if size else None,
        "lines": size.lines if size else None,
        "stdout_encoding": getattr(sys.stdout, "encoding", None),
        "stderr_encoding": getattr(sys.stderr, "encoding", None),
    }


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BrokenPipeError:
            return
        except InterruptedError:
            continue
        view = view[n:]


class Client:
    """One command handed to the engine of its configuration."""

    def __init__(self, argv: list[str], prog: str, cwd: str, path: Path | None, data: bytes) -> None:
        self.argv, self.prog, self.cwd, self.path = argv, prog, cwd, path
        self.key = engine_key(path, data, cwd, os.environ)
        self.paths = EnginePaths(ensure_runtime_dir(), self.key)
        self.started_it = False
        self.chan: P.Channel | None = None

    def run(self) -> int:
        refused = self._caller_cannot_read()
        if refused is not None:
            return refused
        chan = self._connect() or self._start()
        self.chan = chan
        try:
            return self._converse(chan)
        finally:
            chan.close()

    # --- finding or starting the engine -----------------------------------------------------------

    def _connect(self) -> P.Channel | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.paths.sock))
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            return None
        except OSError as e:
            sock.close()
            raise EngineUnavailable(f"cannot connect to {self.paths.sock}: {e.strerror}") from None
        return P.Channel(sock)

    def _start(self) -> P.Channel:
        """Start the engine under the key's lock (a client racing this one waits, then finds it)."""
        fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            chan = self._connect()
            if chan is not None:
                return chan
            doc = read_info(self.paths.info)
            pid = int(doc.get("pid") or 0) if doc else 0
            if pid and alive(pid) and is_engine(pid, self.key) and not (doc or {}).get("retiring"):
                raise EngineUnavailable(f"the engine (pid {pid}) does not answer on {self.paths.sock}")
            self._before_start()
            remove_files(self.paths)  # a dead (or retiring) engine's socket and record
            self._spawn()
            chan = self._connect()
            if chan is None:
                raise EngineUnavailable(f"the engine did not listen on {self.paths.sock}; see {self.paths.log}")
            return chan
        finally:
            os.close(fd)  # releases the lock

    def _before_start(self) -> None:
        """What is checked and done before an engine starts: wap.toml loads (else the command reports it, with
        nothing started), the configuration's other engine and the least recently used beyond WAP_ENGINE_MAX
        retire, and the memory to hold one is free (else the command runs in this process)."""
        from wapflow.config import load_config
        from wapflow.errors import WapError

        try:
            load_config(self.path)
        except WapError as e:
            raise _ConfigProblem(str(e)) from None
        most, need = engine_limits(os.environ)
        free = memory_available()
        scope = scope_of(self.path, self.cwd)
        if free is not None and free < need:
            make_room(self.key, scope, None, self.paths.folder)  # this configuration's old engine all the same
            raise EngineUnavailable(
                f"{free / 2**20:.0f} MB of memory is free and an engine needs {need / 2**20:.0f} MB ({MIN_FREE_ENV})"
            )
        make_room(self.key, scope, most, self.paths.folder)

    def _spawn(self) -> None:
        """The engine as a detached process (its own session, not this process's child), its output in its log;
        back once it listens."""
        args = [sys.executable, "-m", ENGINE_MODULE, "--key", self.key]
        if self.path is not None:
            args += ["--config", str(self.path)]
        r, w = os.pipe()
        log = os.open(self.paths.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        args += ["--ready-fd", str(w)]
        progress("starting the wapflow engine")
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child process
            try:
                os.setsid()
                if os.fork() != 0:
                    os._exit(0)
                os.close(r)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(log, 1)
                os.dup2(log, 2)
                os.set_inheritable(w, True)
                os.chdir(self.cwd)
                os.execv(sys.executable, args)
            finally:
                os._exit(127)
        os.close(w)
        os.close(log)
        os.waitpid(pid, 0)
        self.started_it = True
        answer = b""
        deadline = time.monotonic() + LISTEN_TIMEOUT
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise EngineUnavailable(
                        f"the engine did not start within {LISTEN_TIMEOUT:.0f}s; see {self.paths.log}"
                    )
                ready, _, _ = select.select([r], [], [], left)
                if not ready:
                    continue
                chunk = os.read(r, 4096)
                if not chunk:
                    break
                answer += chunk
        finally:
            os.close(r)
        line = answer.decode(errors="replace").strip()
        if line.startswith("config:"):
            raise _ConfigProblem(line)
        if not line.startswith("ready"):
            why = line.removeprefix("error: ") or "it exited while starting"
            raise EngineUnavailable(f"{why}; see {self.paths.log}")

    # --- the command ------------------------------------------------------------------------------

    def _caller_cannot_read(self) -> int | None:
        """The engine reads with its own rights: a local file of the run this process may not open (or a
        folder it may not list) ends the command here, with the error and exit code of a run in this process;
        None when it reads them all."""
        from wapflow.files.readable import unreadable_source

        e = unreadable_source(self.argv, self.cwd, self._source_location)
        if e is None:
            return None
        cut = self.argv.index("--") if "--" in self.argv else len(self.argv)
        if "--json" in self.argv[:cut]:  # as the CLI's Output.fail: one JSON document on stdout
            _write(
                1, (json.dumps({"status": "failed", "error": {**e.to_dict(), "log": None}}, indent=2) + "\n").encode()
            )
        else:
            _write(2, f"error: {e}\n".encode())
        return e.exit_code

    def _source_location(self, source: str) -> list[str]:
        """The local location of wap.toml's [sources.SOURCE] as an ingest resolves it; [] for one that is not
        local, or a source or configuration the command itself reports."""
        from wapflow.config import load_config
        from wapflow.errors import WapError

        try:
            location = load_config(self.path).resolve_source(source).cfg.location
        except WapError:
            return []
        return [location] if "://" not in location or location.startswith("file://") else []

    def _request(self) -> bytes:
        return json.dumps(
            {
                "v": P.VERSION,
                "key": self.key,
                "argv": self.argv,
                "prog": self.prog,
                "cwd": self.cwd,
                "env": dict(os.environ),
                "tty": _terminal(),
            }
        ).encode()

    def _converse(self, chan: P.Channel) -> int:
        try:
            chan.send(P.REQUEST, self._request())
        except OSError as e:
            raise EngineUnavailable(f"the engine closed the connection: {e.strerror}") from None
        began = False
        with contextlib.ExitStack() as stack:
            while True:
                try:
                    kind, payload = chan.recv()
                except P.Closed:
                    if not began:
                        raise EngineUnavailable("the engine closed the connection before the command began") from None
                    return self._lost()
                if kind == P.STDOUT:
                    _write(1, payload)
                elif kind == P.STDERR:
                    _write(2, payload)
                elif kind == P.STARTED:
                    began = True
                    # From here a stop is the engine's to carry out: sent to it, not raised here.
                    stack.enter_context(STOP.graceful(self._ask_stop))
                elif kind == P.EXIT:
                    return int(payload or EXIT_RUNTIME)
                elif kind == P.WAITING:
                    why, _, line = payload.decode().partition(":")
                    if not (why == "starting" and self.started_it):
                        progress(line)
                elif kind == P.REFUSED:
                    reason = payload.decode(errors="replace")
                    if reason.startswith("stopping:"):
                        raise _Retry(reason)
                    raise EngineUnavailable(reason)

    def _ask_stop(self) -> None:
        """Ctrl-C or SIGTERM here: the engine stops the command (once; a second one changes nothing)."""
        if self.chan is not None:
            with contextlib.suppress(OSError):
                self.chan.send(P.STOP, str(STOP.signum or 2).encode())

    def _lost(self) -> int:
        doc = read_info(self.paths.info) or {}
        pid = doc.get("pid", "?")
        sys.stderr.write(lost_message(pid, self.paths.log))
        return EXIT_RUNTIME
