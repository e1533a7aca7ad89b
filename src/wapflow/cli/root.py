"""The root `wap` command: every command registered in the order `wap --help` lists them, and `main()`.

Exit codes: `wap --help` lists them from wapflow.errors.exit_code_table. `main()` is the console
script: it strips --verbose and is the last line of defence, so an unexpected exception becomes one
error block (the traceback goes to a log file) and exit code 3, never a stack trace on the terminal.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from wapflow.cli import (
    alerts,
    dashboard,
    demo,
    doctor,
    engine,
    ingest,
    lineage,
    maintain,
    nessie,
    pipelines,
    review,
    run,
    runs,
    serve,
    setup,
    storage,
    tables,
)
from wapflow.cli.output import err
from wapflow.cli.stop import stop_code, stopped, wrapped_stop
from wapflow.errors import EXIT_RUNTIME, exit_code_table
from wapflow.stopping import STOP, StopRequested

app = typer.Typer(
    name="wap",
    help="Write-Audit-Publish ingestion for Apache Iceberg on Spark.",
    epilog="Exit codes: " + "; ".join(f"{code} {name}" for code, name, _ in exit_code_table()) + ".",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Help texts are markdown (as the CLI reference page shows them): Rich's own markup would take
    # `[alerts]` or `[sources.NAME]` for a style tag and drop it. Markdown keeps them, and joins a
    # docstring's wrapped lines. A `<placeholder>` goes in backticks (markdown drops bare HTML-like tags).
    rich_markup_mode="markdown",
)


def _version(value: bool) -> None:
    if value:
        from wapflow import __version__

        typer.echo(f"wapflow {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print wapflow's version and exit."),
    ] = False,
) -> None:
    """Write-Audit-Publish ingestion for Apache Iceberg on Spark."""


# `wap --help` lists the commands in panels, in the order a new user meets them: start, run, look, review, fix,
# operate (the CLI reference page has a section for each).
START, RUN, LOOK, REVIEW, FIX, OPERATE = PANELS = ("Start", "Run", "Look", "Review", "Fix and undo", "Operate")
for name, command, panel in (
    ("init", setup.init, START),
    ("setup", setup.setup, START),
    ("doctor", doctor.doctor, START),
    ("run", run.run, RUN),
    ("run-tables", run.run_tables, RUN),
    ("run-models", run.run_models, RUN),
    ("ingest", ingest.ingest, RUN),
    ("backfill", ingest.backfill, RUN),
    ("watch", ingest.watch, RUN),
    ("runs", runs.runs, LOOK),
    ("report", runs.report, LOOK),
    ("metrics", runs.metrics, LOOK),
    ("history", tables.history, LOOK),
    ("branches", tables.branches, LOOK),
    ("files", ingest.files, LOOK),
    ("query", tables.query, LOOK),
    ("diff", review.diff, REVIEW),
    ("approve", review.approve, REVIEW),
    ("reject", review.reject, REVIEW),
    ("expire-reviews", review.expire_reviews, REVIEW),
    ("retry", ingest.retry, FIX),
    ("skip", ingest.skip, FIX),
    ("discard", tables.discard, FIX),
    ("revert", ingest.revert, FIX),
    ("maintain", maintain.maintain, OPERATE),
    ("dashboard", dashboard.dashboard, OPERATE),
    ("serve", serve.serve, OPERATE),
):
    app.command(name, rich_help_panel=panel)(command)
app.add_typer(demo.demo_app, name="demo", rich_help_panel=START)
app.add_typer(pipelines.pipelines_app, name="pipelines", rich_help_panel=RUN)
for group, sub in (
    ("engine", engine.engine_app),
    ("alerts", alerts.alerts_app),
    ("lineage", lineage.lineage_app),
    ("storage", storage.storage_app),
    ("nessie", nessie.nessie_app),
):
    app.add_typer(sub, name=group, rich_help_panel=OPERATE)


def _strip_verbose() -> None:
    """--verbose anywhere on the line (not after `--`): Spark's logs on the terminal too."""
    args = sys.argv[1:]
    cut = args.index("--") if "--" in args else len(args)
    if "--verbose" in args[:cut]:
        from wapflow.lakehouse import session

        session.verbose = True
        args.remove("--verbose")
        sys.argv[1:] = args


def _internal_error(e: Exception) -> None:
    """A bug in wapflow: the traceback to Spark's log (or ~/.cache/wapflow/last-error.log), one line on stderr."""
    from wapflow.lakehouse import session

    detail = "".join(traceback.format_exception(e))
    path = session.log_file() or Path.home() / ".cache" / "wapflow" / "last-error.log"
    where: Path | None = path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write("\n--- wapflow internal error ---\n" + detail)
    except OSError:
        where = None
    if session.verbose:
        err.print(escape(detail))
    message = f"internal error (a bug in wapflow, please report it): {type(e).__name__}: {e}"
    err.print(f"[bold red]error:[/bold red] {escape(message)}" + (f"\n  the traceback is in {where}" if where else ""))


if TYPE_CHECKING:
    from typer._click.core import Command  # the Click inside Typer (its own copy)

_command: Command | None = None


def click_command() -> Command:
    """The Click command Typer builds from `app`, built once in a process (0.1 s each time otherwise)."""
    global _command
    if _command is None:
        _command = typer.main.get_command(app)
    return _command


def execute(argv: list[str], prog_name: str) -> int:
    """A command in a process that goes on after it (the engine, wapflow.engine): what main() does, but the
    exit code is returned and no child process is ended (the engine's JVM serves the next command too)."""
    from wapflow.lakehouse import session

    sys.argv = [prog_name, *argv]
    session.verbose = False  # a --verbose of the command before
    try:
        _strip_verbose()
        click_command().main(args=sys.argv[1:], prog_name=prog_name)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_RUNTIME)
    except (StopRequested, KeyboardInterrupt) as e:
        return stop_code(e)
    except Exception as e:  # noqa: BLE001 - as in main(): one error block, the traceback in the log
        if (stop := wrapped_stop(e)) is not None:
            return stop_code(stop)
        _internal_error(e)
        return EXIT_RUNTIME
    return 0


def main() -> None:
    """The `wap` console script (called by wapflow.cli.main once the stop handler is installed)."""
    STOP.install()  # already, from the console script; here for `python -c 'from wapflow.cli.root import main'`
    try:
        _strip_verbose()
        app()
    except (StopRequested, KeyboardInterrupt) as e:
        stopped(e)
    except Exception as e:  # noqa: BLE001 - the last resort: one line on the terminal, the traceback in the log
        if (stop := wrapped_stop(e)) is not None:
            stopped(stop)
        _internal_error(e)
        sys.exit(EXIT_RUNTIME)
