"""`wap runs`, `wap report` and `wap metrics`: read from the run store (no Spark), rows from wapflow.service."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape

from wapflow.cli.common import ConfigOpt, JsonOpt, on_lakehouse, open_store
from wapflow.cli.output import STATUS_COLOR, Output, checks_table, out, render_failures, rows_table
from wapflow.errors import WapError
from wapflow.service import render
from wapflow.service.metrics import MetricRowDoc, backfill_metrics, metric_rows
from wapflow.service.runs import RunReport, RunRow, keys_lines, list_runs, run_report


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
    if any(r.get("reason") for r in rows):  # why a run failed: the widest column, so the first to wrap
        columns.append("reason")
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
    started = render.text(doc["started_at"])
    out.print(f"[bold {color}]{status.upper()}[/] {doc['table']}  run {doc['run_id']}  started {started}")
    if doc["resume"]:
        out.print(f"its process is gone; resume it (exactly once) with: {doc['resume']}")
    out.print(f"files: {escape(render.text(doc['files']) or render.NONE)}")
    if doc["branch_kept"]:
        out.print(f"kept for inspection: branch {doc['branch']}")
    if doc["would_change"]:
        out.print(doc["would_change"])
    for line in keys_lines(doc["change_keys"]):
        out.print(f"  sample keys {escape(line)}")
    review = doc["review"]
    if review is not None and review["decision"] is None:
        out.print(
            f"awaiting review: wap approve {doc['run_id']} --reason ...  or  wap reject {doc['run_id']} --reason ..."
        )
    elif review is not None:
        by, at, why = (escape(render.text(review[k])) for k in ("by", "at", "reason"))
        out.print(f"{review['decision']} by {by} at {at}: {why}")
    if doc["checks"]:
        out.print(checks_table(doc["checks"]))
        render_failures(doc["checks"])
    error = doc["error"]
    if error:
        step = f" ({escape(render.text(error['step']))})" if error.get("step") else ""
        out.print(f"[red]error[/red]{step}: {escape(render.text(error.get('message')))}")
        if error.get("hint"):
            out.print(f"  hint: {escape(render.text(error['hint']))}")


def metrics(
    table: Annotated[str, typer.Argument(help="The table, namespace.name.")],
    column: Annotated[str | None, typer.Option("--column", help="Only metrics of this column.")] = None,
    metric: Annotated[
        str | None, typer.Option("--metric", help="Only this metric (row_count, null_fraction, min, max, mean...).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="How many of the table's last audited runs.")] = 20,
    backfill: Annotated[
        bool,
        typer.Option(
            "--backfill",
            help="First give the appends on main that have no recorded metrics (other writers', older wapflow "
            "runs') their row count, and each column's null fraction, min and max from the column metrics of "
            "the files they added (Iceberg metadata only): history for a table adopted mid-life.",
        ),
    ] = False,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A table's metric history: each audited run's row count, null fractions, min, max... (no Spark needed)."""
    o = Output(as_json)
    doc: dict[str, object] = {"table": table}
    if backfill:
        done = on_lakehouse(config, o, lambda lh: backfill_metrics(lh, table))
        o.progress(
            f"backfilled {done['recorded']} run(s) from main's snapshots ({done['columns']} with per-column metrics;"
            f" {done['already']} had theirs already)"
        )
        doc["backfill"] = done
    try:
        rows = metric_rows(open_store(config), table, column=column, metric=metric, limit=limit)
    except WapError as e:
        o.fail(e)
    doc["metrics"] = rows
    o.result(doc, lambda: _show_metrics(table, rows))


def _show_metrics(table: str, rows: list[MetricRowDoc]) -> None:
    shown = [{**r, "value": _value(r)} for r in rows]
    out.print(rows_table(f"metrics of {table}", shown, ["run_at", "run_id", "status", "metric", "column", "value"]))


def _value(r: MetricRowDoc) -> str:
    v = r["value"]
    if v is None:
        text = r["text"] or ""
        if r["metric"] == "schema":  # the batch's columns and types as JSON: a count here, the whole in --json
            try:
                return f"{len(json.loads(text))} column(s) (--json shows them)"
            except (ValueError, TypeError):
                return text
        return text
    return f"{v:.0f}" if v.is_integer() else f"{v:.6g}"
