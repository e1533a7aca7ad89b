"""`wap branches`, `discard`, `history` and `query`: what is on a table's main and its kept branches.

The rows come from wapflow.service.tables and wapflow.service.query. `branches` and `history` read table
metadata from the catalog itself (no JVM) where wapflow.lakehouse.metadata can; `discard` and `query` use Spark.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from wapflow.cli.common import ConfigOpt, JsonOpt, on_lakehouse
from wapflow.cli.output import Output, grid, out, rows_table


def branches(
    table: Annotated[str | None, typer.Argument(help="Only this table.")] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Branches kept for inspection, with their run and failed checks (no Spark on JDBC, REST and Nessie catalogs)."""
    from wapflow.service.tables import list_branches

    o = Output(as_json)
    rows = on_lakehouse(config, o, lambda lh: list_branches(lh, table))
    o.result({"branches": rows}, lambda: _show_branches(rows))


def _show_branches(rows: list[dict[str, Any]]) -> None:
    if not rows:
        out.print("no kept branches")
        return
    columns = ["table", "branch", "run_id", "status", "rows", "failed_checks", "started_at"]
    out.print(rows_table("kept branches", rows, columns))


def discard(
    branch: Annotated[str, typer.Argument(help="The branch to drop.")],
    table: Annotated[
        str | None, typer.Option("--table", help="Its table (found from the run store if omitted).")
    ] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drop a kept branch; its rows were never on main. A run awaiting review on it is rejected (as `wap reject`)."""
    from wapflow.service.tables import discard as discard_branch

    o = Output(as_json)
    res = on_lakehouse(config, o, lambda lh: discard_branch(lh, branch, table))
    o.result(
        res,
        lambda: out.print(
            f"dropped branch {res['branch']} of {res['table']}"
            + (f"; run(s) awaiting review rejected: {', '.join(res['rejected'])}" if res.get("rejected") else "")
        ),
    )


def history(
    table: Annotated[str, typer.Argument(help="Table, namespace.name.")],
    limit: Annotated[int, typer.Option("--limit", help="At most this many snapshots.")] = 50,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """main's snapshots, newest first, with the run that wrote each (no Spark on JDBC, REST and Nessie catalogs)."""
    from wapflow.service.tables import history as table_history

    o = Output(as_json)
    rows = on_lakehouse(config, o, lambda lh: table_history(lh, table, limit=limit))
    columns = ["snapshot_id", "committed_at", "operation", "run_id", "rows_added", "total_rows"]
    o.result(
        {"table": table, "snapshots": rows},
        lambda: out.print(rows_table(f"history of {table} (main)", rows, columns)),
    )


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
    from wapflow.service.query import query_page

    o = Output(as_json)
    cols, rows, total = on_lakehouse(config, o, lambda lh: query_page(lh, sql, branch=branch, as_of=as_of, limit=limit))

    def shown() -> None:
        out.print(grid(cols, rows))
        if total > len(rows):
            out.print(f"{len(rows):,} of {total:,} rows (--limit N shows more, --limit 0 all)")

    o.result({"columns": cols, "rows": rows, "total_rows": total}, shown)
