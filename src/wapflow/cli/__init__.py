"""The `wap` command: parses arguments, calls wapflow.service and the core, and only renders what they return.

__init__.py main(), the console script `wapflow.cli:main`: the stop handler first, then the commands
root.py     the root Typer app          stop.py     how a command stopped by a signal ends
output.py   the one output layer: console or JSON, progress, the error block, tables, run rendering
common.py   --config / --json options; opening the lakehouse or the run store from wap.toml
run.py      run, run-tables          runs.py     runs, report, metrics (no Spark)
review.py   approve, reject (a run its table's `review` held), diff, expire-reviews (review_timeout)
tables.py   branches, discard, history, query
setup.py    init, setup              demo.py     demo, demo generate
nessie.py   nessie up|down|status|log              storage.py  storage init|ls
engine.py   engine status|stop|logs        engine_main.py  the engine process (`python -m wapflow.cli.engine_main`)
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from wapflow.cli.stop import stopped, wrapped_stop
from wapflow.stopping import STOP, StopRequested

if TYPE_CHECKING:
    from wapflow.cli.root import app

__all__ = ["app", "main"]


def main() -> None:
    """The console script: the stop handler first, before the imports that are the command's first work, so a
    stop at any moment of start-up is a clean stop (wapflow.stopping)."""
    STOP.install()
    try:
        _engine_first()
        from wapflow.cli.root import main as run_command
    except StopRequested as e:
        stopped(e)
    except Exception as e:
        stop = wrapped_stop(e)
        if stop is None:
            raise
        stopped(stop)
    run_command()


def _engine_first() -> None:
    """A command that needs Spark goes to the warm engine of its config when wap.toml asks for one
    (wapflow.engine); this process then only relays it and exits with its code. --no-engine is taken off the
    line here for every command."""
    from wapflow.engine.client import handoff, strip_flag

    argv = sys.argv[1:]
    if strip_flag(argv):
        sys.argv[1:] = argv
        return
    code = handoff(argv, _prog_name())
    if code is not None:
        sys.exit(code)


def _prog_name() -> str:
    """The program name Click shows in usage lines, found as Click finds it (`wap`, or `python -m wapflow.cli`)."""
    main_module = sys.modules.get("__main__")
    package = getattr(main_module, "__package__", None)
    if not package:
        return os.path.basename(sys.argv[0])
    name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    return f"python -m {package if name == '__main__' else package + '.' + name}"


def __getattr__(name: str) -> Any:
    if name == "app":
        from wapflow.cli.root import app

        return app
    raise AttributeError(name)
