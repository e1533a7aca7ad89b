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
import json
import os
import queue
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from wapflow.engine import protocol as P
from wapflow.engine.commands import EngineCommands, OnStop, Request, Runner, _first_line, _stamp
from wapflow.engine.commands import log as log  # the engine's log line, for wapflow.cli.engine_main
from wapflow.engine.runtime import (
    RETIRE_SIGNAL,
    EnginePaths,
    ensure_runtime_dir,
    lost_message,
    read_info,
    remove_files,
)
from wapflow.errors import EXIT_RUNTIME
from wapflow.spark.shared_session import share_with_children

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_POLL = 0.5
# Commands run at once; more wait for one of these to end (2 cores run a few small commands well together).
PARALLEL = 4


class Engine(EngineCommands):
    """The engine of one key: its socket, its session, its queue of commands and the children running them."""

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


def _tell(fd: int | None, line: str) -> None:
    """The starting client's pipe: `ready PID` or `error: why`, then closed."""
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.write(fd, (line + "\n").encode())
    with contextlib.suppress(OSError):
        os.close(fd)


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
