"""How the engine runs one command: in a child forked from itself, as the client's `wap` process would be.

The child has the client's argv, folder and environment, its stdout and stderr (frames back to it), its
terminal, its own Spark job group and the warm session; it tells the engine which modules it imported, and
the engine reaps it and tells the client how it ended (wapflow.engine.server: the engine's life, its signals
and its clients, builds on EngineCommands). The engine's state and its record (the info file) live here too.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from wapflow.engine import protocol as P
from wapflow.engine.runtime import RETIRE_SIGNAL, EnginePaths, read_info, write_info
from wapflow.errors import EXIT_RUNTIME
from wapflow.stopping import STOP

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# A command in argv form, run in this process for a client: returns its exit code, never raises.
Runner = Callable[[list[str], str], int]
# A stop that reached the engine before the runner could handle it: its line and exit code (as the runner's).
OnStop = Callable[[BaseException], int]
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
PR_SET_PDEATHSIG = 1


def log(msg: str) -> None:
    """A line of the engine's own log (its stderr is the log file)."""
    stream = sys.__stderr__
    if stream is not None:
        stream.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [engine {os.getpid()}] {msg}\n")
        stream.flush()


@dataclass(eq=False)
class Request:
    """One client's command and what happened to it so far."""

    chan: P.Channel
    pid: int
    argv: list[str]
    prog: str
    cwd: str
    env: dict[str, str]
    tty: dict[str, Any]
    gone: threading.Event = field(default_factory=threading.Event)
    stop_signum: int | None = None
    stop_delivered: bool = False  # the stop was sent to the command's child while it ran
    group: str = "wap-engine"  # the command's Spark job group
    early: bool = False  # stopped before it began: nothing of it reached Spark
    child: int | None = None  # the pid of the process running it
    report: int | None = None  # the read end of the pipe its child names the modules it imported on
    number: int = 0
    began: float = 0.0

    def send(self, kind: bytes, payload: bytes = b"") -> None:
        """To the client; a client that is gone is not an error (its command is being stopped)."""
        try:
            self.chan.send(kind, payload)
        except OSError:
            self.gone.set()


class _ClientStream(io.RawIOBase):
    """The client's stdout or stderr: bytes written here are frames to it; isatty() is the client's."""

    def __init__(self, req: Request, kind: bytes, tty: bool) -> None:
        super().__init__()
        self._req, self._kind, self._tty = req, kind, tty

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._tty

    def write(self, b: Any) -> int:
        data = bytes(b)
        if data:
            self._req.send(self._kind, data)
        return len(data)


def _text_stream(req: Request, kind: bytes, tty: bool, encoding: str) -> io.TextIOWrapper:
    return io.TextIOWrapper(
        _ClientStream(req, kind, tty),  # type: ignore[arg-type]  # a raw stream: write_through, no buffer needed
        encoding=encoding or "utf-8",
        errors="backslashreplace" if kind == P.STDERR else "strict",
        write_through=True,
    )


class EngineCommands:
    """The engine's state and record, and its commands: each forked, run as its client's process, reaped."""

    def __init__(
        self,
        paths: EnginePaths,
        *,
        config: Path | None,
        idle_seconds: float,
        warm_up: Callable[[], SparkSession],
        runner: Runner,
        on_stop: OnStop,
        shut_down: Callable[[SparkSession | None], None],
        scope: str = "",
        reload: Callable[[], float] | None = None,
    ) -> None:
        self.on_stop = on_stop
        self.scope = scope or (str(config) if config else f"defaults of {os.getcwd()}")
        self.folder = str(config.parent) if config is not None else os.getcwd()
        self.reload = reload
        self.seen_config = _stamp(config)
        self.retire_asked = False  # set by the signal handler, carried out by the main loop
        self.retiring: str | None = None  # why it takes no new command and stops once its commands ended
        self.paths = paths
        self.config = config
        self.idle = idle_seconds
        self.warm_up, self.runner, self.shut_down = warm_up, runner, shut_down
        self.spark: SparkSession | None = None
        self.ready = False
        self.broken: str | None = None
        self.stopping = threading.Event()
        self.queue: queue.Queue[Request] = queue.Queue()
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.running: dict[int, Request] = {}  # child pid -> its command
        self.held: list[tuple[Request, int | None]] = []  # told how they ended once the JVM has ended
        self.conns: set[socket.socket] = set()
        self.learned: queue.SimpleQueue[str] = queue.SimpleQueue()  # modules commands imported, to import here
        self.requests = 0
        self.started = time.time()
        self.last_used = time.time()
        self.listener: socket.socket | None = None
        self.closed = False

    def _mine(self) -> bool:
        """The record under this key is still this engine's (a retiring engine's key may have a new one)."""
        doc = read_info(self.paths.info)
        return doc is not None and int(doc.get("pid") or 0) == os.getpid()

    def _write_info(self) -> None:
        if self.retiring and not self._mine():
            return  # a new engine of the same key has started: the record is its
        write_info(
            self.paths.info,
            {
                "pid": os.getpid(),
                "key": self.paths.key,
                "config": str(self.config) if self.config else None,
                "scope": self.scope,
                "retiring": self.retiring,
                "started": self.started,
                "last_used": self.last_used,
                "requests": self.requests,
                "idle_seconds": self.idle,
                "log": str(self.paths.log),
                "socket": str(self.paths.sock),
            },
        )

    # --- one command, in a child ------------------------------------------------------------------

    def _start(self, req: Request) -> None:
        """Fork the child that runs the command (under self.lock: a stop either finds its pid or, not yet
        begun, is taken by the child from the request it copied)."""
        self.requests += 1
        req.number = self.requests
        req.group = f"wap-engine-{os.getpid()}-{req.number}"
        req.early = req.stop_signum is not None or req.gone.is_set()
        req.began = time.monotonic()
        log(f"command {req.number} for pid {req.pid}: {' '.join(req.argv)[:300]}")
        me = os.getpid()
        report, told = os.pipe()
        gc.freeze()  # what the engine holds now is never collected by a child (its collections stay short)
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)  # until the child has its handlers
        try:
            pid = os.fork()
            if pid == 0:
                os.close(report)
                self._child(req, me, blocked, told)  # never returns
            os.close(told)
            req.child, req.report = pid, report
            self.running[pid] = req
        finally:
            gc.unfreeze()  # the engine's own garbage stays collectable here; the child keeps its heap frozen
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        threading.Thread(target=self._reap, args=(req,), name="engine-reap", daemon=True).start()

    def _reap(self, req: Request) -> None:
        """The child's end: the client hears its exit code, or, if it was stopped or killed while it ran,
        the engine ends with its JVM first."""
        assert req.child is not None and req.report is not None
        with os.fdopen(req.report, "rb") as report:  # read to its end first: a child never blocks on a full pipe
            for name in report.read().decode(errors="replace").split():
                self.learned.put(name)
        _, status = os.waitpid(req.child, 0)
        code: int | None = os.waitstatus_to_exitcode(status)
        if code is not None and code < 0:
            log(f"command {req.number}: its process was killed by signal {-code}")
            code = None
        hold = code is None or (req.stop_delivered and not req.early)
        with self.changed:
            del self.running[req.child]
            self.last_used = time.time()
            if hold:
                self.held.append((req, code))
                self.stopping.set()
            self.changed.notify_all()
        log(f"command {req.number} ended with {code} in {time.monotonic() - req.began:.2f}s")
        if hold:
            log(f"command {req.number} was stopped or killed inside Spark: the engine ends with its JVM")
        else:
            req.send(P.EXIT, str(code).encode())
        self._write_info()

    def _child(self, req: Request, parent: int, blocked: set[int | signal.Signals], told: int) -> NoReturn:
        """The forked child: the client's `wap` process, on the warm session. It tells the engine which modules
        it imported (on `told`), for the engine to import for the next child."""
        code = EXIT_RUNTIME
        modules = set(sys.modules)
        try:
            _die_with(parent)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(RETIRE_SIGNAL, signal.SIG_IGN)  # the engine's, not its commands'
            STOP.install()
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            for other in [self.listener, *self.conns]:
                if other is not None and other is not req.chan.sock:
                    with contextlib.suppress(OSError):
                        other.close()
            req.chan = P.Channel(req.chan.sock)  # its own send lock (the parent's may be held by a thread gone here)
            code = self._execute(req)
        except BaseException as e:  # noqa: BLE001 - whatever happened, the child ends here with a code
            with contextlib.suppress(Exception):
                req.send(P.STDERR, f"error: the wapflow engine could not run the command: {_first_line(e)}\n".encode())
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            with contextlib.suppress(Exception):
                os.write(told, " ".join(sorted(set(sys.modules) - modules)).encode())
            os._exit(code)

    def _execute(self, req: Request) -> int:
        """The runner, the client's stop deliverable from the moment it starts."""
        from wapflow.lakehouse.session import gateway_after_fork, release_objects
        from wapflow.runs.store import acting_for
        from wapflow.stopping import StopRequested

        STOP.reset()
        if self.spark is not None:
            gateway_after_fork(self.spark)
            jvm = self.spark._jvm
            jvm.SparkSession.setActiveSession(self.spark._jsparkSession)  # type: ignore[union-attr]
            self.spark.sparkContext.setJobGroup(req.group, " ".join(req.argv)[:200], interruptOnCancel=True)
        code: int | None = None
        with self._as_client(req), acting_for(req.pid):
            req.send(P.STARTED)
            try:
                if req.early:
                    STOP.deliver(req.stop_signum or signal.SIGTERM)  # stopped between its arrival and its start
                code = self.runner(req.argv, req.prog)
            except StopRequested as e:  # delivered before the runner's own handling began
                code = self.on_stop(e)
        if self.spark is not None:
            with contextlib.suppress(Exception):
                release_objects(self.spark)
        return code

    @contextlib.contextmanager
    def _as_client(self, req: Request) -> Iterator[None]:
        """The process as the client's `wap` would be: its folder, environment, argv, stdout and stderr."""
        saved_env = dict(os.environ)
        saved_cwd = os.getcwd()
        saved = (sys.stdout, sys.stderr, sys.stdin, sys.argv)
        tty = req.tty
        env = dict(req.env)
        for var, size in (("COLUMNS", tty.get("columns")), ("LINES", tty.get("lines"))):
            if size and var not in env:
                env[var] = str(size)  # what Rich would read from the client's terminal
        os.chdir(req.cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.stdout = _text_stream(req, P.STDOUT, bool(tty.get("stdout")), str(tty.get("stdout_encoding") or ""))
        sys.stderr = _text_stream(req, P.STDERR, bool(tty.get("stderr")), str(tty.get("stderr_encoding") or ""))
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - closed below
        try:
            yield
        finally:
            for stream in (sys.stdout, sys.stderr, sys.stdin):
                with contextlib.suppress(Exception):
                    stream.flush()
                    stream.close()
            sys.stdout, sys.stderr, sys.stdin, sys.argv = saved
            os.environ.clear()
            os.environ.update(saved_env)
            with contextlib.suppress(OSError):
                os.chdir(saved_cwd)


def _die_with(parent: int) -> None:
    """A command's child ends when the engine does, even by SIGKILL (Linux; elsewhere it outlives it)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the engine died before the line above
        os._exit(EXIT_RUNTIME)


def _stamp(path: Path | None) -> tuple[int, int] | None:
    """When and how big a file is (None: none, or gone): a change of wap.toml between ticks."""
    if path is None:
        return None
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
