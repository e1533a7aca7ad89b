"""The engine process: one SparkSession kept warm for one configuration, running `wap` commands for clients.

Started detached by the first client that finds none (wapflow.engine.client), it listens on its Unix socket
before Spark starts (so racing clients find it and wait), builds the session once (the same code path as a
command: wapflow.lakehouse.session.build_session), then runs each command in a child forked from itself, up to
PARALLEL at once (more wait their turn): the child is the `wap` process the client would have been, with the
client's argv, folder and environment, its stdout and stderr (frames back to it), its terminal (width,
colour), its own connection to the JVM and so its own Spark job group, and the warm session. Whatever a
command changes in Python (environment, folder, modules, caches) ends with its child; the runs it records
belong to the client's process (wapflow.runs.store.acting_for), so a command whose client is gone is orphaned
like a killed `wap`. The children die with the engine (PR_SET_PDEATHSIG).

Stops: the client's Ctrl-C or SIGTERM arrives as a stop frame, its end as a closed socket. Either cancels the
command's job group and sends the signal to its child, which ends exactly as a stopped `wap` does (exit 130,
the run resumes later). A command stopped or killed while it ran may have left work going on in the JVM (a
write may still commit), so, as a stopped `wap` process ends its own JVM, the engine then takes no new command,
lets the others finish, and ends with its JVM before that client hears how its command ended: the command that
resumes the run never races that work. SIGTERM or SIGINT to the engine itself (`wap engine stop`) stops the
running commands the same way, then the engine. It exits after `engine_idle` without a command, stopping Spark
and its JVM.

Retiring (SIGUSR1, sent by a client that starts this configuration's next engine or needs room under
WAP_ENGINE_MAX; wapflow.engine.runtime.make_room): the socket goes at once, so no new command comes, the running
and queued ones end, then the engine stops. On each idle tick it also retires when its wap.toml (or the folder
it serves) is gone, and reads wap.toml again when it changed (engine_idle; the commands read the rest themselves).
"""

from __future__ import annotations

import contextlib
import gc
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
from typing import TYPE_CHECKING, Any, NoReturn

from wapflow.engine import protocol as P
from wapflow.engine.runtime import (
    RETIRE_SIGNAL,
    EnginePaths,
    ensure_runtime_dir,
    lost_message,
    read_info,
    remove_files,
    write_info,
)
from wapflow.errors import EXIT_RUNTIME
from wapflow.spark.shared_session import share_with_children
from wapflow.stopping import STOP

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# A command in argv form, run in this process for a client: returns its exit code, never raises.
Runner = Callable[[list[str], str], int]
# A stop that reached the engine before the runner could handle it: its line and exit code (as the runner's).
OnStop = Callable[[BaseException], int]
_POLL = 0.5
# Commands run at once; more wait for one of these to end (2 cores run a few small commands well together).
PARALLEL = 4
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


class Engine:
    """The engine of one key: its socket, its session, its queue of commands and the children running them."""

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
                share_with_children()
                self.ready = True
                log("Spark is ready")
            except BaseException as e:  # noqa: BLE001 - any failure to start: clients run their commands themselves
                self.broken = f"it could not start Spark: {_first_line(e)}"
                log(self.broken)
                code = EXIT_RUNTIME
            if self.broken is None:
                self._loop()
            self._wait_for_children()
        finally:
            self._close(hard=bool(self.held))
            for req, exit_code in self.held:
                if exit_code is None:  # its child was killed: as if the engine had been
                    req.send(P.STDERR, lost_message(os.getpid(), self.paths.log).encode())
                    req.send(P.EXIT, str(EXIT_RUNTIME).encode())
                else:
                    req.send(P.EXIT, str(exit_code).encode())
        return code

    def _loop(self) -> None:
        while not self.stopping.is_set():
            self._import_learned()
            self._tick()
            if self.retiring and not self.running and self.queue.empty():
                log(f"retired ({self.retiring}): stopping")
                return
            try:
                req = self.queue.get(timeout=_POLL)
            except queue.Empty:
                if not self.running and time.time() - self.last_used > self.idle:
                    log(f"idle for {self.idle:.0f}s: stopping")
                    return
                continue
            with self.changed:
                while len(self.running) >= PARALLEL and not self.stopping.is_set():
                    self.changed.wait(_POLL)
                if self.stopping.is_set():
                    self.queue.put(req)  # refused with the others by _close
                    return
                if req.gone.is_set():
                    continue
                self._start(req)

    def _tick(self) -> None:
        """Between commands: a retirement asked for, a configuration gone (its wap.toml or folder), or changed."""
        if self.retire_asked and not self.retiring:
            self._retire("another engine took its place")
        if self.retiring:
            return
        if (self.config is not None and not self.config.exists()) or not os.path.isdir(self.folder):
            self._retire(f"{self.config or self.folder} is gone")
            return
        stamp = _stamp(self.config)
        if stamp != self.seen_config:
            self.seen_config = stamp
            if self.reload is not None:
                try:
                    self.idle = self.reload()
                except Exception as e:  # noqa: BLE001 - a broken wap.toml: its commands say why; the idle time stays
                    log(f"wap.toml changed and does not load: {_first_line(e)}")
                    return
                log(f"wap.toml changed: read again (engine_idle {self.idle:.0f}s)")
                self._write_info()

    def _retire(self, why: str) -> None:
        """No new command (the socket goes: the next client starts another engine); the running ones end."""
        with self.lock:
            self.retiring = why
        log(f"retiring: {why}")
        if self.listener is not None:
            with contextlib.suppress(OSError):
                self.listener.close()
        with contextlib.suppress(FileNotFoundError):
            if read_info(self.paths.info) is None or self._mine():
                self.paths.sock.unlink()
        self._write_info()

    def _mine(self) -> bool:
        """The record under this key is still this engine's (a retiring engine's key may have a new one)."""
        doc = read_info(self.paths.info)
        return doc is not None and int(doc.get("pid") or 0) == os.getpid()

    def _import_learned(self) -> None:
        """Import here what commands imported in their children, so that the next child has it: a command
        forked from the engine starts from the engine's modules, not from the last command's. On the main
        thread only, between forks (a child must never inherit an import half done)."""
        import importlib

        while True:
            try:
                name = self.learned.get_nowait()
            except queue.Empty:
                return
            if name not in sys.modules:
                with contextlib.suppress(Exception):  # only a later command's speed depends on it
                    importlib.import_module(name)

    def _wait_for_children(self) -> None:
        with self.changed:
            while self.running:
                self.changed.wait(_POLL)

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
        for pid in list(self.running):  # only when the engine itself failed: they die with it anyway
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self.shut_down(None if hard else self.spark)
        log("stopped")

    # --- signals ----------------------------------------------------------------------------------

    def _install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._on_engine_signal)
        signal.signal(signal.SIGINT, self._on_engine_signal)
        signal.signal(RETIRE_SIGNAL, self._on_retire_signal)

    def _on_retire_signal(self, _signum: int, _: FrameType | None) -> None:
        """Retire (wapflow.engine.runtime.retire), carried out by the main loop on its next tick."""
        self.retire_asked = True

    def _on_engine_signal(self, signum: int, _: FrameType | None) -> None:
        """SIGTERM/SIGINT to the engine: stop the running commands (as stops of them), then the engine. A
        signal handler: it takes no lock (the main thread it interrupts may hold it)."""
        self.stopping.set()
        for req in list(self.running.values()):
            if req.stop_signum is None:
                req.stop_signum = signum
            self._forward_stop(req)

    def client_stop(self, req: Request, signum: int) -> None:
        """The client asked to stop (or went away): cancel its Spark jobs, stop its child."""
        with self.lock:
            if req.stop_signum is None:
                req.stop_signum = signum
            if req.child is None or req.child not in self.running:
                return  # not begun: its child, when it starts, stops at once; or already ended
        self._forward_stop(req)

    def _forward_stop(self, req: Request) -> None:
        if req.stop_delivered or req.child is None:
            return
        req.stop_delivered = True
        if self.spark is not None and not req.early:
            with contextlib.suppress(Exception):
                self.spark.sparkContext.cancelJobGroup(req.group)
        with contextlib.suppress(OSError):
            os.kill(req.child, req.stop_signum or signal.SIGTERM)

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
            with self.lock:
                self.conns.add(conn)
            threading.Thread(target=self._client, args=(conn,), name="engine-client", daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        """One client's connection: who it is, its request, then its stop frames until it closes."""
        try:
            self._converse(conn)
        finally:
            with self.lock:
                self.conns.discard(conn)

    def _converse(self, conn: socket.socket) -> None:
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
            if self.stopping.is_set() or self.retiring:
                req.send(P.REFUSED, (self.broken or "stopping: the engine is stopping").encode())
                chan.close()
                return
            if not self.ready:
                req.send(P.WAITING, b"starting:waiting for the wapflow engine to start Spark")
            elif len(self.running) >= PARALLEL or not self.queue.empty():
                req.send(P.WAITING, f"busy:waiting for the engine ({PARALLEL} commands are running)".encode())
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


def _tell(fd: int | None, line: str) -> None:
    """The starting client's pipe: `ready PID` or `error: why`, then closed."""
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.write(fd, (line + "\n").encode())
    with contextlib.suppress(OSError):
        os.close(fd)


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
    reload: Callable[[], float] | None = None,
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
        reload=reload,
    )
    return engine.serve(ready_fd)
