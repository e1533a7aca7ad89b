"""`wap runs` and `wap report`: runs read from the run store (no Spark), rows from wapflow.service.runs."""

from __future__ import annotations

from typing import Annotated

import typer

from wapflow.cli.common import ConfigOpt, JsonOpt, open_store
from wapflow.cli.output import STATUS_COLOR, Output, checks_table, out, render_failures, rows_table
from wapflow.errors import WapError
from wapflow.service.runs import RunReport, RunRow, list_runs, run_report


def runs(
    table: Annotated[str | None, typer.Option("--table", help="Only runs of this table.")] = None,
    limit: Annotated[int, typer.Option("--limit")] = 20,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recent runs from the run store (no Spark needed)."""
    o = Output(as_json)
    try:
        store = open_store(config)
    except WapError as e:
        o.fail(e)
    rows = list_runs(store, table, limit)
    o.result({"runs": rows}, lambda: _show_runs(rows))


def _show_runs(rows: list[RunRow]) -> None:
    columns = ["run_id", "table", "status", "rows", "branch", "failed_checks", "started_at"]
    if any(r["review"] for r in rows):
        columns.append("review")
    out.print(rows_table("runs", rows, columns))
    for r in rows:
        if r["resume"]:
            out.print(f"run {r['run_id']} was interrupted (its process is gone); resume it with: {r['resume']}")


def report(
    run_id: Annotated[str, typer.Argument(help="The run id (see `wap runs`).")],
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The audit report of a run, from the run store (no Spark needed)."""
    o = Output(as_json)
    try:
        doc = run_report(open_store(config), run_id)
    except WapError as e:
        o.fail(e)
    o.result(doc, lambda: _show_report(doc))


def _show_report(doc: RunReport) -> None:
    status = doc["status"]
    color = STATUS_COLOR.get(status, "white")
    out.print(f"[bold {color}]{status.upper()}[/] {doc['table']}  run {doc['run_id']}  started {doc['started_at']}")
    if doc["resume"]:
        out.print(f"its process is gone; resume it (exactly once) with: {doc['resume']}")
    out.print(f"files: {', '.join(doc['files'])}")
    if doc["branch_kept"]:
        out.print(f"kept for inspection: branch {doc['branch']}")
    review = doc["review"]
    if review is not None and review["decision"] is None:
        out.print(
            f"awaiting review: wap approve {doc['run_id']} --reason ...  or  wap reject {doc['run_id']} --reason ..."
        )
    elif review is not None:
        out.print(f"{review['decision']} by {review['by']} at {review['at']}: {review['reason']}")
    if doc["checks"]:
        out.print(checks_table(doc["checks"]))
        render_failures(doc["checks"])
    error = doc["error"]
    if error:
        out.print(f"[red]error[/red] ({error.get('step')}): {error.get('message')}")
        if error.get("hint"):
            out.print(f"  hint: {error['hint']}")
