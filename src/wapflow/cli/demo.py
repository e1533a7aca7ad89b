"""`wap demo` (a clean and a dirty file through WAP against a local lakehouse) and `wap demo generate`."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from wapflow.cli.common import JsonOpt
from wapflow.cli.output import Output, out, render_run, rows_table
from wapflow.errors import EXIT_PUBLISHED, EXIT_RUNTIME, ConfigError, WapError

if TYPE_CHECKING:
    from wapflow.demo.run import DemoOutcome

demo_app = typer.Typer(help="Generate taxi-trip data and run the end-to-end demo.", invoke_without_command=True)


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

    o = Output(as_json)
    try:
        res = (run_demo_s3 if s3 else run_demo)(directory, rows, progress=o.progress)
    except WapError as e:
        o.fail(e)
    o.result(res.to_dict(), lambda: _show_demo(res))
    raise typer.Exit(EXIT_PUBLISHED if res.as_expected else EXIT_RUNTIME)


def _show_demo(res: DemoOutcome) -> None:
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
    by_payment = rows_table(
        "main, read back: trips by payment_type", res.by_payment_type, ["payment_type", "trips", "avg_fare"]
    )
    out.print(by_payment)
    cfg = Path(res.directory) / "wap.toml"
    if res.storage:
        out.print(
            f"\nfiles were read from {res.storage['landing']}/ and the tables written to {res.storage['warehouse']} "
            f"on the local S3 server at {res.storage['endpoint']}, which is now stopped (its buckets are gone)."
        )
        out.print("For a lakehouse to explore, run `wap demo`; to use your own S3 or MinIO, see docs/guides/s3.md.")
    else:
        out.print(f"\nexplore: {on_path()}cd {res.directory} && wap branches && wap history nyc.trips")
        out.print(f"         (config: {cfg})")


def on_path(path: str | None = None) -> str:
    """What puts this `wap` on the reader's PATH before the commands the demo suggests: nothing when their PATH
    finds it; else the venv's activation (`make demo` runs .venv/bin/wap without activating the venv, and a bare
    `wap` then is "command not found")."""
    mine = Path(sys.executable).parent / "wap"
    found = shutil.which("wap", path=os.environ.get("PATH", "") if path is None else path)
    if found is not None and Path(found).resolve() == mine.resolve():
        return ""
    activate = Path(sys.prefix) / "bin" / "activate"
    return f"source {activate} && " if activate.is_file() else f"PATH={mine.parent}:$PATH && "


@demo_app.command("generate")
def demo_generate(
    rows: Annotated[int, typer.Option("--rows", "-n", help="Number of rows.")] = 1000,
    null_rate: Annotated[
        float | None, typer.Option("--null-rate", help="Fraction of passenger_count values that are null.")
    ] = None,
    no_null: Annotated[bool, typer.Option("--no-null", help="No nulls at all (a clean file).")] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder to write into.")] = Path("landing"),
    name: Annotated[str | None, typer.Option("--name", help="File name (default `trips_<n>_<seed>.parquet`).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Random seed.")] = 0,
    start_id: Annotated[int, typer.Option("--start-id", help="First trip_id.")] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Write a taxi-trip-like parquet file (with nulls in passenger_count unless --no-null)."""
    from wapflow.demo.generate import write_trips

    o = Output(as_json)
    if no_null and null_rate:
        o.fail(ConfigError("--no-null and --null-rate contradict each other", hint="use one of them"))
    rate = 0.0 if no_null else (0.01 if null_rate is None else null_rate)
    if not 0.0 <= rate <= 1.0 or rows < 0:
        o.fail(ConfigError("--null-rate must be within [0, 1] and --rows >= 0"))
    path = out_dir / (name or f"trips_{rows}_{seed}.parquet")
    write_trips(path, rows, null_rate=rate, seed=seed, start_id=start_id)
    o.result(
        {"path": str(path), "rows": rows, "null_rate": rate},
        lambda: out.print(f"wrote {rows} rows to {path} (null rate {rate})"),
    )
