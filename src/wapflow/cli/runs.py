"""`wap runs`, `wap report` and `wap metrics`: read from the run store (no Spark), rows from wapflow.service."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape

from wapflow import display
from wapflow.cli.common import ConfigOpt, JsonOpt, on_lakehouse, open_store
from wapflow.cli.output import (
    STATUS_COLOR,
    Output,
    cell,
    checks_table,
    id_table,
    out,
    render_failures,
    rows_table,
)
from wapflow.errors import WapError
from wapflow.service import render
from wapflow.service.metrics import MetricRowDoc, backfill_metrics, metric_rows
from wapflow.service.runs import (
    GroupReport,
    GroupRow,
    RunReport,
    RunsListing,
    duration_text,
    group_report,
    keys_lines,
    run_report,
    runs_listing,
    seconds_between,
)


def runs(
    table: Annotated[
        str | None, typer.Option("--table", help="Only runs of this table (each naming its multi-table run).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="How many runs; a multi-table run counts once.")] = 20,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recent runs from the run store (no Spark needed); a multi-table run on one line, its tables below it."""
    o = Output(as_json)
    try:
        store = open_store(config)
    except WapError as e:
        o.fail(e)
    listing = runs_listing(store, table, limit)
    o.result(listing, lambda: _show_runs(listing, grouped=table is None))


def _show_runs(listing: RunsListing, *, grouped: bool) -> None:
    rows: list[dict[str, object]] = []
    groups = {g["group_id"]: g for g in listing["groups"]}
    for r in listing["runs"]:
        took = duration_text(r["seconds"])
        gid = r["group_id"]
        if not grouped or gid is None or gid not in groups:
            rows.append({**r, "took": took})
            continue
        g = groups[gid]
        if r["run_id"] == g["members"][0]:
            rows.append(_group_line(g))
        last = r["run_id"] == g["members"][-1]
        # Its branch and why it stopped are the group's, on the group's line.
        shown = {**r, "run_id": ("└ " if last else "├ ") + r["run_id"], "branch": None, "reason": None}
        rows.append({**shown, "started_at": None, "took": took})
    columns = ["run_id", "table", "status", "rows", "branch", "failed_checks", "started_at", "took"]
    if not grouped and any(r["group_id"] for r in listing["runs"]):
        columns.insert(1, "group_id")
    if any(r.get("review") for r in rows):
        columns.append("review")
    if any(r.get("reason") for r in rows):  # why a run failed: the widest column, so the first to wrap
        columns.append("reason")
    # Left out first when the terminal is too narrow for them all: a run's report has every one of them.
    optional = ["review", "took", "started_at", "failed_checks", "reason"]
    out.print(rows_table("runs", rows, columns, optional=optional, more="`wap report RUN_ID` or --json shows them"))
    for r in listing["runs"]:
        if r["resume"]:
            out.print(f"run {r['run_id']} was interrupted (its process is gone); resume it with: {r['resume']}")
    for g in listing["groups"]:
        if g["resume"]:
            out.print(f"run {g['group_id']} was interrupted (its process is gone); complete it with: {g['resume']}")


def _group_line(g: GroupRow) -> dict[str, object]:
    """A multi-table run's own line: what it is and its status, the tables it was stopped by."""
    what = f"{len(g['tables'])} tables"
    return {
        "run_id": g["group_id"],
        "table": f"{g['name']}: {what}" if g["name"] else what,
        "status": g["status"],
        "rows": g["rows"],
        "branch": g["branch"],
        "failed_checks": None,
        "started_at": g["started_at"],
        "took": duration_text(g["seconds"]),
        "review": g["review"],
        "reason": g["reason"],
    }


def report(
    run_id: Annotated[str, typer.Argument(help="The run id, or a multi-table run's id (see `wap runs`).")],
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The audit report of a run, or of every table of a multi-table run, from the run store (no Spark needed)."""
    o = Output(as_json)
    try:
        store = open_store(config)
        group = group_report(store, run_id)
        doc = run_report(store, run_id) if group is None else None
    except WapError as e:
        o.fail(e)
    if group is not None:
        o.result(group, lambda: _show_group(group))
    else:
        assert doc is not None
        o.result(doc, lambda: _show_report(doc))


def _show_report(doc: RunReport) -> None:
    status = doc["status"]
    color = STATUS_COLOR.get(status, "white")
    started = render.text(doc["started_at"])
    out.print(f"[bold {color}]{status.upper()}[/] {doc['table']}  run {doc['run_id']}  started {started}")
    if doc["group_id"]:
        out.print(
            f"part of multi-table run {doc['group_id']}: its tables publish together or not at all "
            f"(every table: wap report {doc['group_id']})"
        )
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
    decide_as = doc["group_id"] or doc["run_id"]  # a table of a group is decided with its group
    if review is not None and review["decision"] is None:
        out.print(f"awaiting review: wap approve {decide_as} --reason ...  or  wap reject {decide_as} --reason ...")
    elif review is not None:
        by, at, why = (escape(render.text(review[k])) for k in ("by", "at", "reason"))
        out.print(f"{review['decision']} by {by} at {at}: {why}")
    if doc["checks"]:
        out.print(checks_table(doc["checks"]))
        render_failures(doc["checks"])
    _show_error(doc["error"])


def _show_error(error: dict[str, object] | None) -> None:
    if error:
        step = f" ({escape(render.text(error['step']))})" if error.get("step") else ""
        out.print(f"[red]error[/red]{step}: {escape(render.text(error.get('message')))}")
        if error.get("hint"):
            out.print(f"  hint: {escape(render.text(error['hint']))}")


def _show_timings(parts: list[tuple[str, dict[str, float], float | None]]) -> None:
    """Seconds per step of each table (in the order the steps ran), and the whole run's."""
    steps = list(dict.fromkeys(k for _, timings, _ in parts for k in timings))
    if not steps:
        return
    rows = [[escape(t), *(cell(timings.get(s)) for s in steps), cell(took)] for t, timings, took in parts]
    columns = ["table", *steps]
    if any(took is not None for _, _, took in parts):
        columns.append("took")
    else:
        rows = [r[:-1] for r in rows]
    out.print(id_table("timings (seconds)", columns, rows))


def _show_group(doc: GroupReport) -> None:
    status = doc["status"]
    color = STATUS_COLOR.get(status, "white")
    name = f" {escape(doc['name'])}" if doc["name"] else ""
    took = duration_text(doc["seconds"])
    ended = f"  took {took}" if took else ""
    out.print(
        f"[bold {color}]{status.upper()}[/]{name} multi-table run {doc['group_id']}: {len(doc['tables'])} tables "
        f"from {doc['source']}  started {render.text(doc['started_at'])}{ended}"
    )
    if doc["resume"]:
        out.print(f"its process is gone; complete it (exactly once): {escape(doc['resume'])}")
    if doc["reason"] and not doc["error"]:  # a failed run's error is printed whole below
        out.print(escape(doc["reason"]))
    if doc["branch_kept"]:
        out.print(f"kept for inspection: branch {doc['branch']} (main vs the batch: wap diff {doc['group_id']})")
    review = doc["review"]
    gid = doc["group_id"]
    if review is not None and review["decision"] is None:
        out.print(f"awaiting review: wap diff {gid}, then wap approve {gid} --reason ...  or  wap reject {gid} ...")
    elif review is not None:
        by, at, why = (escape(render.text(review[k])) for k in ("by", "at", "reason"))
        out.print(f"{review['decision']} by {by} at {at}: {why}")
    members = doc["members"]
    rows = [
        {
            "table": m["table"],
            "run_id": m["run_id"],
            "status": m["status"],
            "rows": m["rows_written"],
            "snapshot_id": m["snapshot_id"],
            "checks": _checks_summary(m["checks"]),
            "stopped_it": "yes" if m["table"] in doc["blocked_by"] else None,
        }
        for m in members
    ]
    columns = ["table", "run_id", "status", "rows", "snapshot_id", "checks"]
    if doc["blocked_by"]:
        columns.append("stopped_it")
    out.print(rows_table("tables", rows, columns))
    for m in members:
        if m["table"] in doc["blocked_by"] and m["checks"]:
            out.print(f"[bold]{escape(m['table'])}[/bold] (run {m['run_id']}):")
            out.print(checks_table(m["checks"]))
            render_failures(m["checks"], limit=5)
    _show_error(doc["error"])
    _show_timings(
        [(m["table"], m["timings"], seconds_between(m["started_at"], m["finished_at"])) for m in members]
        + [("(whole run)", {}, doc["seconds"])]
    )
    out.print(f"a table's whole report: wap report RUN_ID (its run id above, e.g. {members[0]['run_id']})")


def _checks_summary(checks: list[dict[str, object]]) -> str:
    """A table's audit in a few words: `3 passed, 1 failed`."""
    counts: dict[str, int] = {}
    for c in checks:
        counts[str(c.get("status"))] = counts.get(str(c.get("status")), 0) + 1
    return ", ".join(f"{n} {s}" for s, n in counts.items()) or render.NONE


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
    return display.number(v, grouped=True)
