"""One owner for stop signals (SIGTERM, SIGINT): a stop at any moment, start-up included, is a clean stop.

`wap` installs the handler first thing in `main()`, before anything slow (imports of Spark, the JVM's start,
DBOS's launch). While a command starts, or does work it cannot pause, a stop raises StopRequested at once:
nothing has begun that a stop must wait for (a run cut there resumes like a killed one, its state is durable).
Inside `graceful()` (a worker's loop, its shutdown) a stop only sets `requested`, and the loop ends at its
next check: the batch in hand is finished or handed back, then the command exits. A second stop inside
`graceful()` is absorbed: the shutdown already under way is the answer to it.

Python runs a handler between any two bytecodes, so a stop can land where an exception cannot get out: a
weakref callback (an import's module lock has one), a `__del__`. Python would print it with a traceback and
drop it. The process's unraisable hook takes such a stop and sends the signal again a moment later, to the main
thread, where it is raised as any other.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from wapflow.errors import EXIT_STOPPED

SIGNAL_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}
# How a one-off command stopped by a signal exits (errors.exit_code_table): the long-running commands
# (watch, serve, dashboard) end by a stop and exit 0.
__all__ = ["EXIT_STOPPED", "STOP", "Stop", "StopRequested"]


class StopRequested(BaseException):
    """A stop signal arrived where the command cannot wait for a loop to notice it (a BaseException, as
    KeyboardInterrupt is: no `except Exception` of a step takes it for a failure of the run)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {SIGNAL_NAMES.get(signal.Signals(signum), str(signum))}")
        self.signum = signum


class Stop:
    """The process's stop state: a signal handler, the event loops check, and where a stop may only ask."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.signum: int | None = None
        self._graceful: list[Callable[[], object]] = []
        self._previous: dict[int, Any] = {}
        self._previous_hook: Callable[[Any], object] | None = None
        self._again = False  # the next signal raises the stop a swallowed one left pending

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    def install(self) -> None:
        """Handle SIGTERM and SIGINT from now on (the main thread only: Python runs handlers there)."""
        if self.installed or threading.current_thread() is not threading.main_thread():
            return
        for sig in SIGNAL_NAMES:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        self._previous_hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable

    def reclaim(self) -> None:
        """Take the signals back from a library that set its own handler (a new SparkContext sets one for
        SIGINT that raises KeyboardInterrupt), if wapflow handles them in this process."""
        if self.installed and threading.current_thread() is threading.main_thread():
            for sig in SIGNAL_NAMES:
                signal.signal(sig, self._on_signal)

    def uninstall(self) -> None:
        """The handlers as they were, and no stop pending (the next command in this process starts afresh)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
        if self._previous_hook is not None:
            sys.unraisablehook = self._previous_hook
            self._previous_hook = None
        self.reset()

    def reset(self) -> None:
        """No stop pending: the next command in this process starts afresh (the engine runs one after another)."""
        self.requested.clear()
        self.signum = None
        self._again = False

    def name(self) -> str:
        return SIGNAL_NAMES.get(signal.Signals(self.signum), "a signal") if self.signum else "a signal"

    def _on_signal(self, signum: int, _: FrameType | None) -> None:
        if self._again:  # the stop Python dropped (still pending: reset clears _again), sent again by _unraisable
            self._again = False
            if not self._graceful:
                raise StopRequested(self.signum or signum)
            return  # a graceful part began meanwhile: it has asked already
        self.deliver(signum)

    def _unraisable(self, unraisable: Any) -> None:
        """sys.unraisablehook: a StopRequested raised where Python drops exceptions is raised again, by the
        same signal sent to the main thread once the hook has returned (a real signal: it also ends a blocking
        call). Anything else goes to the hook that was there before."""
        stop = unraisable.exc_value
        if isinstance(stop, StopRequested) and self.installed:
            self._again = True
            again = threading.Timer(0.01, self._send_again, (stop.signum,))
            again.daemon = True
            again.start()
            return
        (self._previous_hook or sys.__unraisablehook__)(unraisable)

    def _send_again(self, signum: int) -> None:
        """The dropped stop's signal, to the main thread, unless the handlers went meanwhile (uninstall: the
        signal would meet Python's default action) or the stop was reset (another command began)."""
        main = threading.main_thread().ident
        if self._again and self.installed and main is not None:
            signal.pthread_kill(main, signum)

    def deliver(self, signum: int) -> None:
        """A stop as if `signum` had arrived, on the main thread: what the signal handler does, for a stop that
        comes another way (the engine's client asking to stop the command it runs, wapflow.engine)."""
        first = not self.requested.is_set()
        self.signum = self.signum or signum
        self.requested.set()
        if not first:
            return
        if not self._graceful:
            raise StopRequested(signum)
        for ask in self._graceful:
            ask()

    @contextmanager
    def graceful(self, ask: Callable[[], object] = lambda: None) -> Iterator[threading.Event]:
        """A part that ends itself when asked: inside it, a stop calls `ask` (e.g. a loop's event.set) instead
        of raising. A stop that came before the part began asks at once."""
        self._graceful.append(ask)
        try:
            if self.requested.is_set():
                ask()
            yield self.requested
        finally:
            self._graceful.remove(ask)


# The process's one stop state (a signal handler is per process).
STOP = Stop()
