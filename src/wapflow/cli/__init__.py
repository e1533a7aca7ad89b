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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wapflow.cli.stop import stopped
from wapflow.stopping import STOP, StopRequested

if TYPE_CHECKING:
    from wapflow.cli.root import app

__all__ = ["app", "main"]


def main() -> None:
    """The console script: the stop handler first, before the imports that are the command's first work, so a
    stop at any moment of start-up is a clean stop (wapflow.stopping)."""
    STOP.install()
    try:
        from wapflow.cli.root import main as run_command
    except StopRequested as e:
        stopped(e)
    run_command()


def __getattr__(name: str) -> Any:
    if name == "app":
        from wapflow.cli.root import app

        return app
    raise AttributeError(name)
