"""How a `wap` command stopped by a signal ends (wapflow.stopping decides when a stop is raised). Light on
purpose: it runs even when the stop came while the commands were still being imported."""

from __future__ import annotations

import sys
from typing import NoReturn

from wapflow.errors import EXIT_PUBLISHED, EXIT_STOPPED
from wapflow.stopping import STOP, StopRequested

# The commands whose normal end is a stop (SIGTERM or Ctrl-C): they exit 0 when stopped, whenever it comes.
LONG_RUNNING = ("watch", "serve", "dashboard")


def wrapped_stop(e: Exception) -> StopRequested | None:
    """The stop inside another error: a library that runs code of its own at import (pydantic builds a model's
    validator in Rust) takes the StopRequested raised there and raises its own error, message only. An error
    that ends a command after a stop arrived is that stop (None: no stop came, `e` is an error)."""
    if STOP.requested.is_set() and STOP.signum is not None:
        return StopRequested(STOP.signum)
    return None


def stopped(e: StopRequested | KeyboardInterrupt) -> NoReturn:
    """A stop that came where the command could not finish what it had in hand: its children end (a JVM stopped
    in its start-up does not end with this process by itself), then its line and exit code (stop_code)."""
    from wapflow.lakehouse.processes import end_children

    end_children()
    sys.exit(stop_code(e))


def stop_code(e: StopRequested | KeyboardInterrupt) -> int:
    """One line (plain: it may come before the output layer is loaded), and the exit code of a stop, 0 for the
    long-running commands, whose normal end it is. Whatever was under way is durable: a run resumes, a batch's
    files are taken over, when the same command runs again. Alone (no process ends) in the engine."""
    how = STOP.name() if isinstance(e, StopRequested) else "SIGINT"
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    if command in LONG_RUNNING:
        sys.stderr.write(f"stopped by {how}\n")
        return EXIT_PUBLISHED
    sys.stderr.write(f"stopped by {how}; anything under way resumes when the same command runs again\n")
    return EXIT_STOPPED
