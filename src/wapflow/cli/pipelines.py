"""`wap pipelines run | dry-run`: a Spark Declarative Pipelines project, audited and published all or nothing."""

from __future__ import annotations

from typing import Annotated

import typer

from wapflow.cli.common import ConfigOpt, JsonOpt, on_lakehouse
from wapflow.cli.output import Output, out, render_group
from wapflow.cli.run import NoChecksOpt

pipelines_app = typer.Typer(
    help="Run a Spark Declarative Pipelines project (spark-pipeline.yml) with Write-Audit-Publish: every dataset "
    "written on one branch, audited, and all published in one commit or none.",
    no_args_is_help=True,
)

SpecOpt = Annotated[
    str | None,
    typer.Option("--spec", help="The pipeline's spec (default: spark-pipeline.yml here or in a parent folder)."),
]
ListOpt = Annotated[
    str | None, typer.Option(help="Comma-separated datasets, as for spark-pipelines (default: the whole graph).")
]


def _names(value: str | None) -> list[str]:
    return [n.strip() for n in (value or "").split(",") if n.strip()]


@pipelines_app.command("run")
def run(
    spec: SpecOpt = None,
    refresh: ListOpt = None,
    full_refresh: ListOpt = None,
    full_refresh_all: Annotated[
        bool, typer.Option("--full-refresh-all", help="Reset and recompute every dataset (streaming ones too).")
    ] = False,
    run_id: Annotated[str | None, typer.Option("--run-id", help="Resume this run id.")] = None,
    no_checks: NoChecksOpt = False,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the pipeline on a branch, audit every dataset it wrote, and publish them all in one commit or none."""
    from wapflow import api
    from wapflow.sdp.run import DryRun

    o = Output(as_json)
    res = on_lakehouse(
        config,
        o,
        lambda lh: api.run_pipeline(
            lh,
            spec,
            refresh=_names(refresh),
            full_refresh=_names(full_refresh),
            full_refresh_all=full_refresh_all,
            run_id=run_id,
            no_checks=no_checks,
        ),
    )
    assert not isinstance(res, DryRun)
    o.result(res.to_dict(), lambda: render_group(res))
    raise typer.Exit(res.exit_code)


@pipelines_app.command("dry-run")
def dry_run(spec: SpecOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Check the pipeline's graph with Spark's engine (SQL, upstreams, cycles) and list its datasets; nothing is
    written."""
    from wapflow import api
    from wapflow.sdp.run import DryRun

    o = Output(as_json)
    res = on_lakehouse(config, o, lambda lh: api.run_pipeline(lh, spec, dry=True))
    assert isinstance(res, DryRun)

    def show() -> None:
        out.print(f"{res.spec}: the graph is valid; {len(res.datasets)} dataset(s) stored as Iceberg tables")
        for d in res.datasets:
            out.print(f"  {d['dataset']}  {d['kind']}  ({d['declared_at']}; {d['checks_in_code']} check(s) in code)")

    o.result(res.to_dict(), show)
    raise typer.Exit(0)
