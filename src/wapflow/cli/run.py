"""`wap run` (one table) and `wap run-tables` (several tables, published in one atomic commit or none)."""

from __future__ import annotations

from typing import Annotated

import typer

from wapflow.cli.common import ConfigOpt, JsonOpt, on_lakehouse, open_lakehouse
from wapflow.cli.output import Output, render_group, render_run, run_doc
from wapflow.errors import UsageError, WapError

# `wap run`, `run-tables`, `ingest` and `backfill`: the user's word that a table without checks may publish.
NoChecksOpt = Annotated[
    bool,
    typer.Option(
        "--no-checks",
        help="Publish a table that has no checks without an audit (as checks = [] in its section would); "
        "without it, or checks = [], such a run fails before writing (exit 2). A table's checks still run.",
    ),
]
AgainOpt = Annotated[
    bool,
    typer.Option(
        "--again",
        help="Publish files a table published already (the same path, size and version); without it such a run "
        "is refused (exit 2) naming the run that published them.",
    ),
]


def run(
    table: Annotated[str, typer.Argument(help="Target table, namespace.name (e.g. nyc.trips).")],
    sources: Annotated[list[str], typer.Argument(help="Files, globs or URIs to ingest.")],
    branch: Annotated[str | None, typer.Option("--branch", help="Audit branch name (default `wap_<run-id>`).")] = None,
    not_null: Annotated[
        list[str] | None, typer.Option("--not-null", help="Add a not_null check on COLUMN (repeatable).")
    ] = None,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Re-run (or resume) this run id; never publishes twice.")
    ] = None,
    no_checks: NoChecksOpt = False,
    again: AgainOpt = False,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write SOURCES to a branch of TABLE, audit the new rows, publish to main if the audit passes."""
    from wapflow import api
    from wapflow import checks as C

    o = Output(as_json)
    res = on_lakehouse(
        config,
        o,
        lambda lh: api.run(
            lh,
            table,
            sources,
            checks=[C.not_null(c) for c in not_null or []],
            branch=branch,
            run_id=run_id,
            no_checks=no_checks,
            again=again,
        ),
    )
    o.result(run_doc(res), lambda: render_run(res))
    raise typer.Exit(res.exit_code)


def _parse_specs(specs: list[str]) -> list[tuple[str, list[str]]]:
    """TABLE=SOURCE[,SOURCE...] arguments as (table, sources) pairs."""
    parsed: list[tuple[str, list[str]]] = []
    for spec in specs:
        table, sep, sources = spec.partition("=")
        if not sep or not table or not sources:
            raise UsageError(f"{spec!r} is not TABLE=SOURCE", hint="e.g. shop.orders=landing/orders.parquet")
        parsed.append((table, [s for s in sources.split(",") if s]))
    return parsed


# --config and --json carry no help text here (unlike ConfigOpt/JsonOpt): `wap run-tables --help` stays as it was.
def run_tables(
    specs: Annotated[
        list[str] | None, typer.Argument(help="TABLE=SOURCE[,SOURCE...] per table, e.g. shop.orders=orders.parquet")
    ] = None,
    run: Annotated[
        str | None, typer.Option("--run", help="A [runs.NAME] section of wap.toml instead of TABLE=SOURCE.")
    ] = None,
    branch: Annotated[
        str | None, typer.Option("--branch", help="The run's branch on every table (default `wap_<run-id>`).")
    ] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="Re-run (or resume) this run id.")] = None,
    no_checks: NoChecksOpt = False,
    again: AgainOpt = False,
    config: Annotated[str | None, typer.Option("--config", "-c")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Several tables in one run: each written to a branch and audited, then every table published in one
    atomic commit, or none (the embedded catalog, PostgreSQL, REST with multi-table commits, Nessie)."""
    from wapflow import api

    o = Output(as_json)
    try:
        parsed: list[tuple[str, list[str]]] = []
        if run is not None:
            if specs:
                raise UsageError("give either --run NAME or TABLE=SOURCE arguments, not both")
            from wapflow.config import load_config

            parsed, run_branch = load_config(config).run_specs(run)
            branch = branch or run_branch
        parsed += _parse_specs(specs or [])
        res = api.run_tables(
            open_lakehouse(config, o), parsed, branch=branch, run_id=run_id, no_checks=no_checks, again=again
        )
    except WapError as e:
        o.fail(e)

    o.result(res.to_dict(), lambda: render_group(res))
    raise typer.Exit(res.exit_code)


def run_models(
    names: Annotated[
        list[str] | None,
        typer.Argument(help="Models to run (with everything downstream of them); default: every model."),
    ] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="Re-run (or resume) this run id.")] = None,
    no_checks: NoChecksOpt = False,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run wap.toml's [models.*] upstream first on one branch: each model's output audited, then every model
    published in one atomic commit, or none."""
    from wapflow import api

    o = Output(as_json)
    res = on_lakehouse(config, o, lambda lh: api.run_models(lh, names, run_id=run_id, no_checks=no_checks))
    o.result(res.to_dict(), lambda: render_group(res))
    raise typer.Exit(res.exit_code)
