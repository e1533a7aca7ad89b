"""The engine process: one SparkSession kept warm for one configuration, running `wap` commands for clients.

Started detached by the first client that finds none (wapflow.engine.client), it listens on its Unix socket
before Spark starts (so racing clients find it and wait), builds the session once (the same code path as a
command: wapflow.lakehouse.session.build_session), then runs one command at a time on its main thread, as the
`wap` process would: the client's argv, folder and environment, its stdout and stderr (frames back to it), its
terminal (width, colour), its own Spark job group. The runs a command records belong to the client's process
(wapflow.runs.store.acting_for), so a command whose client is gone is orphaned like a killed `wap`.

Stops: the client's Ctrl-C or SIGTERM arrives as a stop frame, its end as a closed socket. Either cancels the
command's job group and delivers the stop to the main thread (wapflow.stopping) through SIGUSR1, so the command
ends exactly as a stopped in-process command does (exit 130, the run resumes later). SIGTERM or SIGINT to the
engine itself (`wap engine stop`) stops a running command the same way and then the engine. It exits after
`engine_idle` without a command, stopping Spark and its JVM.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from wapflow.engine import protocol as P
from wapflow.engine.runtime import EnginePaths, ensure_runtime_dir, remove_files, write_info
from wapflow.errors import EXIT_RUNTIME
from wapflow.stopping import STOP

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# A command in argv form, run in this process for a client: returns its exit code, never raises.
Runner = Callable[[list[str], str], int]
# A stop that reached the engine before the runner could handle it: its line and exit code (as the runner's).
OnStop = Callable[[BaseException], int]
_INJECT = signal.SIGUSR1
_POLL = 0.5


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
    stop_delivered: bool = False
    group: str = "wap-engine"  # the command's Spark job group
    early: bool = False  # stopped before it began: nothing of it reached Spark

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


class Engine:
    """The engine of one key: its socket, its session, its queue of commands."""

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
    ) -> None:
        self.on_stop = on_stop
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
        self.running: Request | None = None
        self.requests = 0
        self.started = time.time()
        self.last_used = time.time()
        self.listener: socket.socket | None = None
        self.closed = False

    # --- life -------------------------------------------------------------------------------------

    def serve(self, ready_fd: int | None) -> int:
        """Listen, start Spark, run commands until idle or stopped; 0 when it ended as asked."""
        self._install_signals()
        try:
            self._listen()
        except OSError as e:
            _tell(ready_fd, f"error: cannot listen on {self.paths.sock}: {e.strerror}")
            return EXIT_RUNTIME
        self._write_info()
        _tell(ready_fd, f"ready {os.getpid()}")
        threading.Thread(target=self._accept_loop, name="engine-accept", daemon=True).start()
        log(f"listening on {self.paths.sock} (config {self.config or 'none: defaults'})")
        code = 0
        try:
            try:
                self.spark = self.warm_up()
                self._install_signals()  # a new SparkContext takes SIGINT for itself
                self.ready = True
                log("Spark is ready")
            except BaseException as e:  # noqa: BLE001 - any failure to start: clients run their commands themselves
                self.broken = f"it could not start Spark: {_first_line(e)}"
                log(self.broken)
                code = EXIT_RUNTIME
            if self.broken is None:
                self._loop()
        finally:
            self._close()
        return code

    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                req = self.queue.get(timeout=_POLL)
            except queue.Empty:
                if self.running is None and time.time() - self.last_used > self.idle:
                    log(f"idle for {self.idle:.0f}s: stopping")
                    return
                continue
            if req.gone.is_set():
                continue
            code = self._run(req)
            if req.stop_delivered and not req.early:
                # The stop cut the command inside a Spark call whose work goes on in the JVM (a write may still
                # commit). As a stopped `wap` process does, the engine ends with its JVM before the client hears
                # the exit code, so the command that resumes the run never races that work.
                log(f"command {self.requests} was stopped inside Spark: the engine ends with its JVM")
                self._close(hard=True)
                req.send(P.EXIT, str(code).encode())
                return
            req.send(P.EXIT, str(code).encode())

    def _close(self, hard: bool = False) -> None:
        """No new clients, queued ones told to go elsewhere, Spark and its JVM stopped (`hard`: the JVM ended
        at once, as a stopped `wap` ends its own), the files removed."""
        if self.closed:
            return
        self.closed = True
        with self.lock:
            self.stopping.set()
        remove_files(self.paths, os.getpid())
        if self.listener is not None:
            with contextlib.suppress(OSError):
                self.listener.close()
        while True:
            try:
                req = self.queue.get_nowait()
            except queue.Empty:
                break
            req.send(P.REFUSED, (self.broken or "stopping: the engine is stopping").encode())
        self.shut_down(None if hard else self.spark)
        log("stopped")

    # --- signals ----------------------------------------------------------------------------------

    def _install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._on_engine_signal)
        signal.signal(signal.SIGINT, self._on_engine_signal)
        signal.signal(_INJECT, self._on_inject)

    def _on_engine_signal(self, signum: int, _: FrameType | None) -> None:
        """SIGTERM/SIGINT to the engine: stop the running command (as a stop of it), then the engine."""
        self.stopping.set()
        req = self.running
        if req is not None and not req.stop_delivered:
            req.stop_signum = req.stop_signum or signum
            self._deliver(req)

    def _on_inject(self, _signum: int, _: FrameType | None) -> None:
        """A client's stop, on the main thread: delivered only to the command still running for it."""
        req = self.running
        if req is not None and req.stop_signum is not None and not req.stop_delivered:
            self._deliver(req)

    def _deliver(self, req: Request) -> None:
        req.stop_delivered = True
        STOP.deliver(req.stop_signum or signal.SIGTERM)  # raises StopRequested, or asks a graceful part

    def client_stop(self, req: Request, signum: int) -> None:
        """The client asked to stop (or went away): cancel its Spark jobs, interrupt the main thread."""
        with self.lock:
            if req.stop_signum is None:
                req.stop_signum = signum
            if self.running is not req:
                return
        if self.spark is not None:
            with contextlib.suppress(Exception):
                self.spark.sparkContext.cancelJobGroup(req.group)
        signal.pthread_kill(threading.main_thread().ident or 0, _INJECT)

    # --- one command ------------------------------------------------------------------------------

    def _run(self, req: Request) -> int:
        from wapflow.runs.store import acting_for

        self.requests += 1
        req.group = f"wap-engine-{os.getpid()}-{self.requests}"
        log(f"command {self.requests} for pid {req.pid}: {' '.join(req.argv)[:300]}")
        t0 = time.monotonic()
        code = EXIT_RUNTIME
        try:
            with self._as_client(req), acting_for(req.pid):
                req.send(P.STARTED)
                code = self._execute(req)
        except BaseException as e:  # noqa: BLE001 - the engine outlives whatever a command did
            log(f"command {self.requests} broke the engine's request handling: {e!r}")
            req.send(P.STDERR, f"error: the wapflow engine could not run the command: {_first_line(e)}\n".encode())
        self.last_used = time.time()
        log(f"command {self.requests} ended with {code} in {time.monotonic() - t0:.2f}s")
        self._write_info()
        return code

    def _execute(self, req: Request) -> int:
        """The runner on the main thread, the client's stop deliverable from the moment it starts."""
        from wapflow.lakehouse.session import reset_gateway_nodelay
        from wapflow.stopping import StopRequested

        STOP.reset()
        if self.spark is not None:
            jvm = self.spark._jvm  # this thread's session in the JVM (a stop may have replaced its connection)
            jvm.SparkSession.setActiveSession(self.spark._jsparkSession)  # type: ignore[union-attr]
            self.spark.sparkContext.setJobGroup(req.group, " ".join(req.argv)[:200], interruptOnCancel=True)
        code: int | None = None
        try:
            with self.lock:
                self.running = req
            if req.gone.is_set() or req.stop_signum is not None:
                req.early = True
                self._deliver(req)  # stopped between its arrival and its start
            code = self.runner(req.argv, req.prog)
            with self.lock:
                self.running = None
        except StopRequested as e:  # delivered before the runner's own handling began, or once it had ended
            with self.lock:
                self.running = None
            if code is None:
                code = self.on_stop(e)
        finally:
            STOP.reset()
            if req.stop_delivered:
                reset_gateway_nodelay()  # the stop may have cut a py4j call: its connection is a new one now
            if self.spark is not None:
                with contextlib.suppress(Exception):
                    self.spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
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

    # --- clients ----------------------------------------------------------------------------------

    def _listen(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            self.paths.sock.unlink()  # a dead engine's (the starting client checked it is dead)
        old = os.umask(0o177)
        try:
            sock.bind(str(self.paths.sock))
        finally:
            os.umask(old)
        os.chmod(self.paths.sock, 0o600)
        sock.listen(16)
        sock.settimeout(_POLL)
        self.listener = sock

    def _accept_loop(self) -> None:
        assert self.listener is not None
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            threading.Thread(target=self._client, args=(conn,), name="engine-client", daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        """One client's connection: who it is, its request, then its stop frames until it closes."""
        chan = P.Channel(conn)
        pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != os.getuid():
            log(f"refused a client of uid {uid} (pid {pid})")
            with contextlib.suppress(OSError):
                chan.send(P.REFUSED, b"the engine belongs to another user")
            chan.close()
            return
        try:
            req = self._read_request(chan, pid)
        except (P.Closed, OSError, ValueError) as e:
            log(f"a client (pid {pid}) sent no usable request: {e}")
            chan.close()
            return
        if req is None:
            chan.close()
            return
        with self.lock:
            if self.stopping.is_set():
                req.send(P.REFUSED, (self.broken or "stopping: the engine is stopping").encode())
                chan.close()
                return
            if not self.ready:
                req.send(P.WAITING, b"starting:waiting for the wapflow engine to start Spark")
            elif self.running is not None or not self.queue.empty():
                req.send(P.WAITING, b"busy:waiting for the engine (another command is running)")
            self.queue.put(req)
        while True:
            try:
                kind, payload = chan.recv()
            except (P.Closed, OSError):
                req.gone.set()
                self.client_stop(req, signal.SIGTERM)
                break
            if kind == P.STOP:
                self.client_stop(req, int(payload or signal.SIGINT))
        chan.close()

    def _read_request(self, chan: P.Channel, pid: int) -> Request | None:
        kind, payload = chan.recv()
        if kind != P.REQUEST:
            raise ValueError(f"frame {kind!r} before a request")
        doc = json.loads(payload)
        if doc.get("v") != P.VERSION or doc.get("key") != self.paths.key:
            chan.send(P.REFUSED, b"stopping: the engine is of another version or configuration")
            return None
        if self.broken is not None:
            chan.send(P.REFUSED, self.broken.encode())
            return None
        return Request(
            chan=chan,
            pid=pid,
            argv=[str(a) for a in doc["argv"]],
            prog=str(doc.get("prog") or "wap"),
            cwd=str(doc["cwd"]),
            env={str(k): str(v) for k, v in doc["env"].items()},
            tty=dict(doc.get("tty") or {}),
        )

    def _write_info(self) -> None:
        write_info(
            self.paths.info,
            {
                "pid": os.getpid(),
                "key": self.paths.key,
                "config": str(self.config) if self.config else None,
                "started": self.started,
                "last_used": self.last_used,
                "requests": self.requests,
                "idle_seconds": self.idle,
                "log": str(self.paths.log),
                "socket": str(self.paths.sock),
            },
        )


def _tell(fd: int | None, line: str) -> None:
    """The starting client's pipe: `ready PID` or `error: why`, then closed."""
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.write(fd, (line + "\n").encode())
    with contextlib.suppress(OSError):
        os.close(fd)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def run_engine(
    key: str,
    config: Path | None,
    idle_seconds: float,
    ready_fd: int | None,
    *,
    warm_up: Callable[[], SparkSession],
    runner: Runner,
    on_stop: OnStop,
    shut_down: Callable[[SparkSession | None], None],
) -> int:
    """The engine's whole life (`wap engine serve`, started by a client)."""
    paths = EnginePaths(ensure_runtime_dir(), key)
    engine = Engine(
        paths,
        config=config,
        idle_seconds=idle_seconds,
        warm_up=warm_up,
        runner=runner,
        on_stop=on_stop,
        shut_down=shut_down,
    )
    return engine.serve(ready_fd)
