"""`wap approve` and `wap reject`: a person's decision on a run its table's `review` held (wapflow.service.review)."""

from __future__ import annotations

from typing import Annotated

import typer

from wapflow.cli.common import ConfigOpt, JsonOpt, on_lakehouse
from wapflow.cli.output import Output, out, render_run, run_doc

RunIdArg = Annotated[str, typer.Argument(help="The run awaiting review (see `wap runs`).")]
ByOpt = Annotated[
    str | None, typer.Option("--by", help="Who decides, as recorded (default: the OS user running the command).")
]


def approve(
    run_id: RunIdArg,
    reason: Annotated[
        str, typer.Option("--reason", help="Why it may be published (required; recorded with the run and snapshot).")
    ],
    by: ByOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Publish a run awaiting review: audited again against main as it is now, then published (exit 0), or blocked
    if it no longer passes its error checks (exit 1). Exit 4 when another approve or reject decided it first."""
    from wapflow import api

    o = Output(as_json)
    res = on_lakehouse(config, o, lambda lh: api.approve(lh, run_id, reason=reason, by=by))
    o.result(run_doc(res), lambda: render_run(res))
    raise typer.Exit(res.exit_code)


def reject(
    run_id: RunIdArg,
    reason: Annotated[str, typer.Option("--reason", help="Why it must not be published (required; recorded).")],
    by: ByOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drop a run awaiting review: its branch is dropped (as `wap discard` does), its files are marked rejected in
    the ledger, main is unchanged. Exit 4 when another approve or reject decided it first."""
    from wapflow import api

    o = Output(as_json)
    doc = on_lakehouse(config, o, lambda lh: api.reject(lh, run_id, reason=reason, by=by))
    o.result(doc, lambda: out.print(doc["message"]))
