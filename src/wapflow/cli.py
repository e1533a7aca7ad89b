"""The `wap` command: a thin layer that parses arguments, calls the core and renders results.

stdout carries results (Rich for people, one JSON document with --json); progress and errors for
people go to stderr. Exit codes: 0 published, 1 blocked, 2 usage/config, 3 runtime, 4 conflict.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from wapflow.errors import EXIT_USAGE, ConfigError, WapError

app = typer.Typer(
    name="wap",
    help="Write-Audit-Publish ingestion for Apache Iceberg on Spark.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
demo_app = typer.Typer(help="Generate taxi-trip data and run the end-to-end demo.", invoke_without_command=True)
app.add_typer(demo_app, name="demo")
# `wap storage init|ls` (issue 5) lives in wapflow.storage.commands.
from wapflow.storage.commands import storage_app  # noqa: E402

app.add_typer(storage_app, name="storage")
# `wap nessie up|down|status|log` (issue 4) lives in wapflow.nessie_cli.
from wapflow.nessie_cli import nessie_app, run_tables  # noqa: E402

app.add_typer(nessie_app, name="nessie")
app.command("run-tables")(run_tables)

# Piped output (CI logs, `| less`) gets wide tables instead of 80-column wrapping of ids.
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True, highlight=False, soft_wrap=True)

ConfigOpt = Annotated[
    str | None, typer.Option("--config", "-c", help="wap.toml to use (default: $WAP_CONFIG, then ./wap.toml).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of tables.")]


def _progress(as_json: bool):  # noqa: ANN202
    def report(msg: str) -> None:
        err.print(f"[dim]· {msg}[/dim]")

    return report


def _emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, default=str, indent=2) + "\n")
    sys.stdout.flush()


def _log_note() -> str:
    """Where Spark's own log of this process is, when Spark ran: errors point there instead of printing it."""
    from wapflow.lakehouse.session import log_file

    path = log_file()
    return f"\n  Spark's log: {path}" if path is not None and path.exists() else ""


def print_error(text: str) -> None:
    """The one error block a person sees: what, where, what to do, and where the details are."""
    # escape(): messages name wap.toml sections like [s3] or [lakehouse], which are not Rich markup.
    err.print(f"[bold red]error:[/bold red] {escape(text + _log_note())}")


def _fail(e: WapError, as_json: bool) -> NoReturn:
    if as_json:
        doc = e.to_dict()
        from wapflow.lakehouse.session import log_file

        doc["log"] = str(log_file()) if log_file() is not None else None
        _emit_json({"status": "failed", "error": doc})
    else:
        print_error(str(e))
    raise typer.Exit(e.exit_code)


def _lakehouse(config: str | None, as_json: bool):  # noqa: ANN202
    from wapflow.config import load_config
    from wapflow.lakehouse.lakehouse import Lakehouse

    return Lakehouse(load_config(config), progress=_progress(as_json))


# --- init / setup -----------------------------------------------------------------------------


@app.command()
def init(
    path: Annotated[Path, typer.Option("--path", help="Where to write the file.")] = Path("wap.toml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented starter wap.toml."""
    from wapflow.config import STARTER

    if path.exists() and not force:
        _fail(ConfigError(f"{path} already exists", hint="use --force to overwrite it"), False)
    path.write_text(STARTER, encoding="utf-8")
    out.print(f"wrote {path}")


@app.command()
def setup(
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
    s3: Annotated[bool, typer.Option("--s3", help="Also fetch the S3 jars (automatic when wap.toml uses S3).")] = False,
) -> None:
    """Check Java and fetch the JVM jars (Iceberg runtime, SQLite JDBC; S3 ones if used) so later runs never stall."""
    from wapflow.config import load_config
    from wapflow.lakehouse import jvm

    try:
        cfg = load_config(config)
        major = jvm.check_java()
        plan = jvm.plan_for(cfg, _progress(as_json), s3=s3)
    except WapError as e:
        _fail(e, as_json)
    if as_json:
        _emit_json({"java": major, "jars": list(plan.jars), "packages": list(plan.packages)})
        return
    out.print(f"Java {major}: ok")
    for j in plan.jars:
        out.print(f"jar: {j}")
    for p in plan.packages:
        out.print(f"package (resolved by Spark/Ivy at start): {p}")


# --- run --------------------------------------------------------------------------------------


def _checks_table(checks: list[dict[str, Any]]) -> Table:
    t = Table(title="audit", title_justify="left")
    for col in ("check", "status", "observed", "failing rows", "threshold", "severity", "from"):
        t.add_column(col)
    style = {"passed": "green", "failed": "bold red", "warned": "yellow", "quarantined": "magenta"}
    for c in checks:
        t.add_row(
            c["name"],
            f"[{style.get(c['status'], '')}]{c['status']}[/]",
            str(c["observed"]),
            str(c["failing_rows"]),
            str(c.get("threshold", "")),
            c["severity"],
            str(c.get("source", "")),
        )
    return t


def render_failures(checks: list[dict[str, Any]], limit: int = 20) -> None:
    """Samples and a reproduction query for every check that did not pass."""
    for c in checks:
        if c["status"] == "passed" or not (c.get("samples") or c.get("sql")):
            continue
        out.print(f"[bold]{c['name']}[/bold]: {c['failing_rows']} failing row(s)")
        samples = c.get("samples") or []
        if samples:
            cols = list(samples[0])
            t = Table(show_header=True)
            for col in cols:
                t.add_column(col)
            for r in samples[:limit]:
                t.add_row(*[_cell(r.get(col)) for col in cols])
            out.print(t)
            if len(samples) > limit:
                out.print(f"  ({len(samples)} sample rows stored; `wap report` shows them all)")
        if c.get("sql"):
            out.print(f"  reproduce: [cyan]{c['sql']}[/cyan]")


def render_run(res: Any) -> None:
    color = {"published": "green", "blocked": "yellow", "failed": "red"}.get(res.status, "white")
    out.print(f"[bold {color}]{res.status.upper()}[/] {res.table}  run {res.run_id}  branch {res.branch}")
    for note in getattr(res, "schema_changes", None) or []:
        out.print(f"schema: {note}")
    if res.checks:
        out.print(_checks_table(res.checks))
        render_failures(res.checks, limit=5)
    if res.rows_written is not None:
        out.print(f"rows written: {res.rows_written}   snapshot: {res.snapshot_id}")
    if res.status == "failed":
        print_error(res.message)
    else:
        out.print(res.message)


@app.command()
def run(
    table: Annotated[str, typer.Argument(help="Target table, namespace.name (e.g. nyc.trips).")],
    sources: Annotated[list[str], typer.Argument(help="Files, globs or URIs to ingest.")],
    branch: Annotated[str | None, typer.Option("--branch", help="Audit branch name (default wap_<run-id>).")] = None,
    not_null: Annotated[
        list[str] | None, typer.Option("--not-null", help="Add a not_null check on COLUMN (repeatable).")
    ] = None,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Re-run (or resume) this run id; never publishes twice.")
    ] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write SOURCES to a branch of TABLE, audit the new rows, publish to main if the audit passes."""
    from wapflow.pipeline import WapRun

    try:
        lh = _lakehouse(config, as_json)
        res = WapRun(lh, table, sources, branch=branch, run_id=run_id, not_null=not_null).run()
    except WapError as e:
        _fail(e, as_json)
    if as_json:
        doc = res.to_dict()
        if doc.get("error"):
            from wapflow.lakehouse.session import log_file

            doc["error"]["log"] = str(log_file()) if log_file() is not None else None
        _emit_json(doc)
    else:
        render_run(res)
    raise typer.Exit(res.exit_code)


# --- inspection -------------------------------------------------------------------------------


def _table(title: str, rows: list[dict[str, Any]], columns: list[str]) -> Table:
    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*[_cell(r.get(c)) for c in columns])
    return t


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, list):
        return ", ".join(str(x) for x in v)
    return str(v)


@app.command()
def branches(
    table: Annotated[str | None, typer.Argument(help="Only this table.")] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Branches kept for inspection, with their run and failed checks."""
    from wapflow.views import list_branches

    try:
        rows = list_branches(_lakehouse(config, as_json), table)
    except WapError as e:
        _fail(e, as_json)
    if as_json:
        _emit_json({"branches": rows})
        return
    if not rows:
        out.print("no kept branches")
        return
    out.print(_table("kept branches", rows, ["table", "branch", "run_id", "status", "rows", "failed_checks", "started_at"]))


@app.command()
def discard(
    branch: Annotated[str, typer.Argument(help="The branch to drop.")],
    table: Annotated[str | None, typer.Option("--table", help="Its table (found from the run store if omitted).")] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drop a kept branch; its rows were never on main."""
    from wapflow.views import discard as do_discard

    try:
        res = do_discard(_lakehouse(config, as_json), branch, table)
    except WapError as e:
        _fail(e, as_json)
    if as_json:
        _emit_json(res)
    else:
        out.print(f"dropped branch {res['branch']} of {res['table']}")


@app.command()
def history(
    table: Annotated[str, typer.Argument(help="Table, namespace.name.")],
    limit: Annotated[int, typer.Option("--limit", help="At most this many snapshots.")] = 50,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """main's snapshots, newest first, with the run that wrote each."""
    from wapflow.views import history as do_history

    try:
        rows = do_history(_lakehouse(config, as_json), table, limit=limit)
    except WapError as e:
        _fail(e, as_json)
    if as_json:
        _emit_json({"table": table, "snapshots": rows})
        return
    out.print(
        _table(
            f"history of {table} (main)",
            rows,
            ["snapshot_id", "committed_at", "operation", "run_id", "rows_added", "total_rows"],
        )
    )


@app.command()
def runs(
    table: Annotated[str | None, typer.Option("--table", help="Only runs of this table.")] = None,
    limit: Annotated[int, typer.Option("--limit")] = 20,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recent runs from the run store (no Spark needed)."""
    from wapflow.config import load_config
    from wapflow.runs.store import RunStore

    try:
        store = RunStore(load_config(config).run_store_url())
    except WapError as e:
        _fail(e, as_json)
    recs = store.list(table, limit)
    rows = [
        {
            "run_id": r.run_id,
            "table": r.table_name,
            "status": r.shown_status,
            "resume": r.resume_command() if r.interrupted else None,
            "rows": r.rows_written,
            "branch": r.branch if r.branch_kept else None,
            "failed_checks": [c["name"] for c in r.checks if c.get("status") == "failed"],
            "error": (r.error or {}).get("message"),
            "started_at": r.started_at.isoformat(sep=" ", timespec="seconds"),
        }
        for r in recs
    ]
    if as_json:
        _emit_json({"runs": rows})
        return
    out.print(_table("runs", rows, ["run_id", "table", "status", "rows", "branch", "failed_checks", "started_at"]))
    for r in rows:
        if r["resume"]:
            out.print(f"run {r['run_id']} was interrupted (its process is gone); resume it with: {r['resume']}")


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(help="The run id (see `wap runs`).")],
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The audit report of a run, from the run store (no Spark needed)."""
    from wapflow.config import load_config
    from wapflow.errors import NotFound
    from wapflow.runs.store import RunStore

    try:
        store = RunStore(load_config(config).run_store_url())
        rec = store.get(run_id)
        if rec is None:
            recent = [r.run_id for r in store.list(limit=50)]
            from wapflow.errors import did_you_mean

            raise NotFound(f"no run {run_id} in the run store{did_you_mean(run_id, recent)}", hint="list runs with `wap runs`")
    except WapError as e:
        _fail(e, as_json)
    doc = {
        "run_id": rec.run_id,
        "table": rec.table_name,
        "status": rec.shown_status,
        "resume": rec.resume_command() if rec.interrupted else None,
        "branch": rec.branch,
        "branch_kept": rec.branch_kept,
        "files": rec.files,
        "rows_written": rec.rows_written,
        "snapshot_id": rec.snapshot_id,
        "checks": rec.checks,
        "error": rec.error,
        "timings": rec.timings,
        "started_at": rec.started_at,
        "finished_at": rec.finished_at,
    }
    if as_json:
        _emit_json(doc)
        return
    color = {"published": "green", "blocked": "yellow", "failed": "red"}.get(rec.shown_status, "white")
    out.print(f"[bold {color}]{rec.shown_status.upper()}[/] {rec.table_name}  run {rec.run_id}  started {rec.started_at}")
    if rec.interrupted:
        out.print(f"its process is gone; resume it (exactly once) with: {doc['resume']}")
    out.print(f"files: {', '.join(rec.files)}")
    if rec.branch_kept:
        out.print(f"kept for inspection: branch {rec.branch}")
    if rec.checks:
        out.print(_checks_table(rec.checks))
        render_failures(rec.checks)
    if rec.error:
        out.print(f"[red]error[/red] ({rec.error.get('step')}): {rec.error.get('message')}")
        if rec.error.get("hint"):
            out.print(f"  hint: {rec.error['hint']}")


@app.command()
def query(
    sql: Annotated[str, typer.Argument(help="Spark SQL; tables as namespace.table.")],
    branch: Annotated[str | None, typer.Option("--branch", help="Read every table at this branch.")] = None,
    as_of: Annotated[
        str | None, typer.Option("--as-of", help="Time travel: a snapshot id or a timestamp (ISO 8601).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many rows (0: all).")] = 100,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run SQL against the lakehouse, on main, a branch, or as of a snapshot/time."""
    from wapflow.query import run_query

    try:
        cols, rows = run_query(_lakehouse(config, as_json), sql, branch=branch, as_of=as_of, limit=limit)
    except WapError as e:
        _fail(e, as_json)
    if as_json:
        _emit_json({"columns": cols, "rows": rows})
        return
    t = Table()
    for c in cols:
        t.add_column(c)
    for r in rows:
        t.add_row(*[_cell(v) for v in r])
    out.print(t)


# --- demo -------------------------------------------------------------------------------------


@demo_app.callback()
def demo(
    ctx: typer.Context,
    directory: Annotated[Path, typer.Option("--dir", help="Demo folder (made fresh).")] = Path("wap-demo"),
    rows: Annotated[int, typer.Option("--rows", "-n", help="Rows per generated file.")] = 10_000,
    s3: Annotated[
        bool, typer.Option("--s3", help="Land the files in a bucket and keep the lakehouse on a local S3 server.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Generate a clean and a dirty file and run WAP on both against a local lakehouse."""
    if ctx.invoked_subcommand is not None:
        return
    from wapflow.demo.run import run_demo
    from wapflow.demo.s3 import run_demo_s3

    try:
        res = (run_demo_s3 if s3 else run_demo)(directory, rows, progress=_progress(as_json))
    except WapError as e:
        _fail(e, as_json)
    if as_json:
        _emit_json(res.to_dict())
        raise typer.Exit(0 if res.as_expected else 3)
    out.rule("1. clean file")
    render_run(res.clean)
    out.rule("2. dirty file (nulls in passenger_count)")
    render_run(res.dirty)
    out.rule("3. main afterwards")
    same = res.main_snapshot_before_dirty == res.main_snapshot_after_dirty
    out.print(
        f"main snapshot before/after the dirty run: {res.main_snapshot_before_dirty} / "
        f"{res.main_snapshot_after_dirty} ({'unchanged' if same else 'CHANGED'})"
    )
    out.print(
        f"rows on main: {res.main_rows_after_dirty}; branch {res.dirty.branch} (kept for inspection): "
        f"{res.dirty_branch_rows} rows, {res.dirty.rows_written} of them new"
    )
    out.print(_table("main, read back: trips by payment_type", res.by_payment_type, ["payment_type", "trips", "avg_fare"]))
    cfg = Path(res.directory) / "wap.toml"
    if res.storage:
        out.print(
            f"\nfiles were read from {res.storage['landing']}/ and the tables written to {res.storage['warehouse']} "
            f"on the local S3 server at {res.storage['endpoint']}, which is now stopped (its buckets are gone)."
        )
        out.print("For a lakehouse to explore, run `wap demo`; to use your own S3 or MinIO, see README \"S3\".")
    else:
        out.print(f"\nexplore: cd {res.directory} && wap branches && wap history nyc.trips")
        out.print(f"         (config: {cfg})")
    raise typer.Exit(0 if res.as_expected else 3)


@demo_app.command("generate")
def demo_generate(
    rows: Annotated[int, typer.Option("--rows", "-n", help="Number of rows.")] = 1000,
    null_rate: Annotated[
        float | None, typer.Option("--null-rate", help="Fraction of passenger_count values that are null.")
    ] = None,
    no_null: Annotated[bool, typer.Option("--no-null", help="No nulls at all (a clean file).")] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder to write into.")] = Path("landing"),
    name: Annotated[str | None, typer.Option("--name", help="File name (default trips_<n>_<seed>.parquet).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Random seed.")] = 0,
    start_id: Annotated[int, typer.Option("--start-id", help="First trip_id.")] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Write a taxi-trip-like parquet file (with nulls in passenger_count unless --no-null)."""
    from wapflow.demo.generate import write_trips

    if no_null and null_rate:
        _fail(ConfigError("--no-null and --null-rate contradict each other", hint="use one of them"), as_json)
    rate = 0.0 if no_null else (0.01 if null_rate is None else null_rate)
    if not 0.0 <= rate <= 1.0 or rows < 0:
        _fail(ConfigError("--null-rate must be within [0, 1] and --rows >= 0"), as_json)
    path = out_dir / (name or f"trips_{rows}_{seed}.parquet")
    write_trips(path, rows, null_rate=rate, seed=seed, start_id=start_id)
    if as_json:
        _emit_json({"path": str(path), "rows": rows, "null_rate": rate})
    else:
        out.print(f"wrote {rows} rows to {path} (null rate {rate})")


def main() -> None:
    # --verbose anywhere on the line (not after `--`): Spark's logs on the terminal too.
    args = sys.argv[1:]
    cut = args.index("--") if "--" in args else len(args)
    if "--verbose" in args[:cut]:
        from wapflow.lakehouse import session

        session.verbose = True
        args.remove("--verbose")
        sys.argv[1:] = args
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - the last line of defence: no stack trace on a person's terminal
        import traceback

        from wapflow.lakehouse import session

        detail = "".join(traceback.format_exception(e))
        where = session.log_file() or Path.home() / ".cache" / "wapflow" / "last-error.log"
        try:
            where.parent.mkdir(parents=True, exist_ok=True)
            with open(where, "a", encoding="utf-8") as f:
                f.write("\n--- wapflow internal error ---\n" + detail)
        except OSError:
            where = None  # type: ignore[assignment]
        if session.verbose:
            err.print(escape(detail))
        err.print(
            f"[bold red]error:[/bold red] {escape(f'internal error (a bug in wapflow, please report it): {type(e).__name__}: {e}')}"
            + (f"\n  the traceback is in {where}" if where else "")
        )
        sys.exit(3)


if __name__ == "__main__":
    main()
