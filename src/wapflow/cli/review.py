"""`wap diff`, `wap approve` and `wap reject`: what publishing a held run would change on main
(wapflow.service.diff), and a person's decision on it (wapflow.service.review)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from wapflow import display
from wapflow.cli.common import ConfigOpt, JsonOpt, on_lakehouse
from wapflow.cli.output import Output, is_id, out, render_group, render_run, rows_table, run_doc
from wapflow.pipeline.result import MultiRunResult
from wapflow.service.runs import keys_lines

if TYPE_CHECKING:
    from wapflow.service.diff import DiffDoc, SideDoc

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
    """Publish a run awaiting review, or a blocked run whose failed checks all judge it against the table's history
    (anomaly, volume: a real day the band did not expect): audited again against main as it is now (those
    verdicts then warn, naming you and the reason), then published (exit 0), or blocked if it no longer passes
    its error checks (exit 1). Exit 2 for a run blocked by any other check; exit 4 when another approve or reject
    decided it first."""
    from wapflow import api

    o = Output(as_json)
    res = on_lakehouse(config, o, lambda lh: api.approve(lh, run_id, reason=reason, by=by))
    if isinstance(res, MultiRunResult):
        o.result(res.to_dict(), lambda: render_group(res))
    else:
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


def expire_reviews(
    table: Annotated[
        list[str] | None, typer.Option("--table", help="Only runs of this table (repeatable; default: all).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be done; change and send nothing.")
    ] = False,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Apply each table's `review_timeout` once (what `wap watch` does on every tick; run it from cron without a
    watcher): a run awaiting review longer is rejected (on_review_timeout = "reject", by "wapflow") or alerted
    again, once per timeout period (on_review_timeout = "alert"). Starts Spark only to reject or to read a diff."""
    from wapflow.outer.review import expire_reviews as expire

    o = Output(as_json)
    docs = on_lakehouse(config, o, lambda lh: expire(lh, tables=table or None, dry_run=dry_run))

    def show() -> None:
        if not docs:
            out.print("no run awaits review past its table's review_timeout")
            return
        out.print(
            rows_table(
                "runs past review_timeout",
                [dict(d) for d in docs],
                ["run_id", "table", "waited", "review_timeout", "action"],
            )
        )
        for d in docs:
            out.print(d["message"])

    o.result({"runs": docs}, show)


def diff(
    run_or_branch: Annotated[
        str, typer.Argument(help="A run not on main yet (see `wap runs`), or a kept branch (see `wap branches`).")
    ],
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What publishing a run would change on main (each table's, for a multi-table run's id): rows added (updated,
    deleted, replaced by a merge or replace), a merge's sample keys of each kind (recorded by its audit), and per
    column main beside the batch: null fraction, min, max (mean where the audit measured it). From Iceberg
    metadata and the run store, no data scan. A published run: says so, with its snapshot (exit 0)."""
    from wapflow import api

    o = Output(as_json)

    def work(lh: Any) -> Any:
        docs = api.group_diff(lh, run_or_branch)
        return {"run_id": run_or_branch, "tables": docs} if docs else api.diff(lh, run_or_branch)

    doc = on_lakehouse(config, o, work)

    def show() -> None:
        for d in doc.get("tables", [doc]):  # every table of a multi-table run
            _show_diff(d)

    o.result(doc, show)


def _show_diff(doc: DiffDoc) -> None:
    out.print(doc["message"])
    rows = doc["rows"]
    if rows is None:
        return
    figures = [{"rows": k, "count": rows[k]} for k in ("added", "updated", "deleted", "replaced")]
    out.print(rows_table("rows", [f for f in figures if f["count"] or f["rows"] == "added"], ["rows", "count"]))
    for keys in keys_lines(doc["keys"]):
        out.print(f"  sample keys {escape(keys)}")
    # The mean only where the batch's audit measured one (an anomaly check on it): main's is never in metadata.
    means = any(
        side is not None and side["mean"] is not None for c in doc["columns"] for side in (c["main"], c["batch"])
    )
    stats = ["null_fraction", "min", "max", *(["mean"] if means else [])]
    shown: list[dict[str, Any]] = []
    for c in doc["columns"]:
        line: dict[str, Any] = {"column": c["column"], "on": c["on"]}
        for stat in stats:
            grouped = stat not in ("min", "max") or not is_id(c["column"])  # an id column's bounds are ids
            line[stat] = f"{_stat(c['main'], stat, grouped)} → {_stat(c['batch'], stat, grouped)}"
        shown.append(line)
    out.print(rows_table("columns (main → batch; ? not recorded, - no such column)", shown, ["column", "on", *stats]))


def _stat(side: SideDoc | None, stat: str, grouped: bool = True) -> str:
    if side is None:
        return "-"
    v = side.get(stat)
    if v is None:
        return "?"
    # A number as every table shows one (wapflow.display): 12001.0 recorded by the audit is 12,001, not 1.2e+04.
    return display.number(v, grouped=grouped) if isinstance(v, int | float) else str(v)
