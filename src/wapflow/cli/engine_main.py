"""The engine process: `python -m wapflow.cli.engine_main --key K [--config PATH] [--ready-fd N]`.

A client (wapflow.engine.client) starts it detached; wapflow.engine.server is its life. It lives in the CLI
package, not in wapflow.engine, because what it runs for each client is the CLI itself (root.execute), and
apart from cli/engine.py so that the root command, which registers `wap engine`, does not import it back.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MODULE = "wapflow.cli.engine_main"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__)
    ap.add_argument("--key", required=True)
    ap.add_argument("--config")
    ap.add_argument("--ready-fd", type=int)
    args = ap.parse_args(argv)

    from wapflow.config import load_config, parse_duration
    from wapflow.engine.server import log, run_engine
    from wapflow.errors import WapError

    try:
        cfg = load_config(args.config)
    except WapError as e:
        log(f"the configuration does not load: {e}")
        if args.ready_fd is not None:
            os.write(args.ready_fd, b"config: does not load\n")  # the client's command reports it
        return e.exit_code

    def warm_up() -> SparkSession:
        """The session, with the commands' modules imported meanwhile: Python imports while the JVM starts
        (a process of its own), so the first command, which waits for both, waits less than in-process."""
        import threading

        from wapflow import api
        from wapflow.lakehouse import session

        session.use_server = False  # its own JVM, never a client of `wap serve`: its commands use the JVM's API
        imports = threading.Thread(target=_import_commands, name="engine-imports", daemon=True)
        imports.start()
        spark = api.connect(cfg, progress=log).spark
        imports.join()
        return spark

    return run_engine(
        args.key,
        Path(args.config) if args.config else None,
        parse_duration(cfg.lakehouse.engine_idle),
        args.ready_fd,
        warm_up=warm_up,
        runner=_run_command,
        on_stop=_stopped,
        shut_down=_shut_down,
        reload=lambda: parse_duration(load_config(args.config).lakehouse.engine_idle),
    )


# What a `wap run` imports after its start, beyond the Click tree: each command runs in a child forked from the
# engine (wapflow.engine.server), which would import them again every time. The engine also imports, between
# commands, whatever a command's child imported that it had not (so other commands warm up after their first).
_COMMAND_MODULES = (
    "wapflow.cli.root",
    "wapflow.api",
    "wapflow.pipeline.driver",
    "wapflow.alerts",
    "wapflow.checks",
    "wapflow.lakehouse.manifests",
    "wapflow.lakehouse.progress",
    "wapflow.runs.pending",
    "wapflow.deprecation",
    "pyiceberg.manifest",  # read here, not by a Spark job each (wapflow.lakehouse.manifests.worth_loading)
    "pyiceberg.table",
    "pyiceberg.expressions.parser",
    "pyiceberg.avro.decoder_fast",
    "wapflow.lakehouse.storage_io",
    "pyarrow.fs",
    "pyarrow.parquet",
    "pyspark.sql.classic.dataframe",
    "pyspark.sql.pandas.map_ops",
    "typer._click.decorators",
    "rich._emoji_codes",
    "encodings.idna",
)


def _import_commands() -> None:
    """What a `wap run` imports after its start, and the Click command tree (root.execute builds it once)."""
    import importlib

    for name in _COMMAND_MODULES:
        with contextlib.suppress(ImportError):  # a module of a library's other version: only time depends on it
            importlib.import_module(name)
    from wapflow.cli import root

    root.click_command()


def _run_command(argv: list[str], prog: str) -> int:
    from wapflow.cli.output import follow_terminal
    from wapflow.cli.root import execute

    follow_terminal()
    return execute(argv, prog)


def _stopped(e: BaseException) -> int:
    from wapflow.cli.stop import stop_code
    from wapflow.stopping import StopRequested

    return stop_code(e if isinstance(e, StopRequested | KeyboardInterrupt) else KeyboardInterrupt())


def _shut_down(spark: SparkSession | None) -> None:
    """Spark stopped (None: a command was cut inside Spark, so its JVM is ended without waiting for it), then
    whatever child process is left (the JVM): no orphan after the engine."""
    from wapflow.lakehouse.processes import end_children

    if spark is not None:
        with contextlib.suppress(Exception):  # the JVM is ended below either way
            spark.stop()
    end_children()


if __name__ == "__main__":
    sys.exit(main())
