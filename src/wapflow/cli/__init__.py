"""The `wap` command: parses arguments, calls wapflow.service and the core, and only renders what they return.

app.py      the root Typer app and main() (the console script `wapflow.cli:main`)
output.py   the one output layer: console or JSON, progress, the error block, tables, run rendering
common.py   --config / --json options; opening the lakehouse or the run store from wap.toml
run.py      run, run-tables          runs.py     runs, report (no Spark)
tables.py   branches, discard, history, query
setup.py    init, setup              demo.py     demo, demo generate
nessie.py   nessie up|down|status|log              storage.py  storage init|ls
"""

from wapflow.cli.app import app, main

__all__ = ["app", "main"]
