"""The `wap` command: parses arguments, calls wapflow.service and the core, and only renders what they return.

app.py      the root Typer app and main() (the console script `wapflow.cli:main`)
output.py   the one output layer: console or JSON, progress, the error block, tables, run rendering
common.py   --config / --json options; opening the lakehouse or the run store from wap.toml
run.py      run, run-tables          runs.py     runs, report (no Spark)
tables.py   branches, discard, history, query
setup.py    init, setup              demo.py     demo, demo generate
nessie.py   nessie up|down|status|log              storage.py  storage init|ls
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn

from wapflow.errors import EXIT_PUBLISHED, EXIT_STOPPED
from wapflow.stopping import STOP, StopRequested

if TYPE_CHECKING:
    from wapflow.cli.app import app

__all__ = ["app", "main"]

# The commands whose normal end is a stop (SIGTERM or Ctrl-C): they exit 0 when stopped, whenever it comes.
LONG_RUNNING = ("watch", "serve", "dashboard")


def main() -> None:
    """The console script: the stop handler first, before the imports that are the command's first work, so a
    stop at any moment of start-up is a clean stop (wapflow.stopping)."""
    STOP.install()
    try:
        from wapflow.cli.app import main as run_command
    except StopRequested as e:
        stopped(e)
    run_command()


def stopped(e: StopRequested | KeyboardInterrupt) -> NoReturn:
    """A stop that came where the command could not finish what it had in hand: one line (plain: it may come
    before the output layer is loaded), and the exit code of a stop, 0 for the long-running commands, whose
    normal end it is. Whatever was under way is durable: a run resumes, a batch's files are taken over, when
    the same command runs again."""
    from wapflow.lakehouse.processes import end_children

    how = STOP.name() if isinstance(e, StopRequested) else "SIGINT"
    end_children()  # a JVM stopped in its start-up does not end with this process by itself
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    if command in LONG_RUNNING:
        sys.stderr.write(f"stopped by {how}\n")
        sys.exit(EXIT_PUBLISHED)
    sys.stderr.write(f"stopped by {how}; anything under way resumes when the same command runs again\n")
    sys.exit(EXIT_STOPPED)


def __getattr__(name: str) -> Any:
    if name == "app":
        from wapflow.cli.app import app

        return app
    raise AttributeError(name)
