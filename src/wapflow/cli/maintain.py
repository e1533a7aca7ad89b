"""`wap maintain [TABLE]`: compaction, manifest rewrite, snapshot expiry, orphan removal and the retention of
kept branches, per [maintenance] in wap.toml (wapflow.maintain). `--dry-run` says what would change."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

from wapflow.cli.common import ConfigOpt, JsonOpt, on_lakehouse
from wapflow.cli.output import Output, out, rows_table
from wapflow.service import render


def maintain(
    table: Annotated[str | None, typer.Argument(help="Only this table (default: every table of the catalog).")] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Say what would change (files to compact, snapshots, branches, orphans); change nothing."
        ),
    ] = False,
    log: Annotated[
        bool, typer.Option("--log", help="List recent maintenance actions from the run store instead (no Spark).")
    ] = False,
    upgrade_format: Annotated[
        int | None,
        typer.Option(
            "--upgrade-format",
            metavar="N",
            help="Instead of maintaining it, raise TABLE's Iceberg format version to N (3): a metadata-only "
            "commit, recorded; a lower version than the table's is refused (exit 2). See the Format v3 guide "
            "for the readers a v3 table needs.",
        ),
    ] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compact small files, rewrite manifests, expire old snapshots, remove orphan files and drop old kept
    branches, keeping everything wapflow still needs (the maintenance section of wap.toml)."""
    from wapflow.maintain import maintain as run_maintenance

    o = Output(as_json)
    if log:
        _log(table, config, o)
        return
    res = on_lakehouse(config, o, lambda lh: run_maintenance(lh, table, dry_run=dry_run, upgrade_format=upgrade_format))
    o.result(res.to_dict(), lambda: _show(res.to_dict()))
    raise typer.Exit(res.exit_code)


def _log(table: str | None, config: str | None, o: Output) -> None:
    from wapflow.cli.common import open_store
    from wapflow.errors import WapError
    from wapflow.runs.maintenance import MaintenanceLog

    try:
        store = open_store(config)
        rows = [r.to_dict() for r in MaintenanceLog(store.engine).list(table, limit=50)]
    except WapError as e:
        o.fail(e)
    shown = [
        {
            "started_at": r["started_at"],
            "table": r["table"],
            "action": r["action"],
            "status": r["status"],
            "figures": render.figures(r["figures"] or {}),
        }
        for r in rows
    ]
    o.result(
        {"actions": rows},
        lambda: out.print(rows_table("maintenance actions", shown, list(shown[0])) if shown else "no maintenance yet"),
    )


def _show(doc: dict[str, Any]) -> None:
    if any(a["action"] == "upgrade_format" for t in doc["tables"] for a in t["actions"]):
        for t in doc["tables"]:
            out.print(f"{t['table']}: {t['status']}: {escape(render.text(t.get('message')))}")
        return
    rows = []
    for t in doc["tables"]:
        s = t["summary"]
        rows.append(
            {
                "table": t["table"],
                "status": t["status"],
                "data files": _arrow(s["data_files_before"], s["data_files_after"], doc["dry_run"]),
                "bytes": _arrow(s["data_bytes_before"], s["data_bytes_after"], doc["dry_run"]),
                "compacted": s["files_compacted"],
                "snapshots expired": s["snapshots_expired"],
                "manifests rewritten": s["manifests_rewritten"],
                "branches dropped": s["branches_dropped"],
                "orphans": s["orphans"],
            }
        )
    title = "maintenance (dry run: nothing changed)" if doc["dry_run"] else f"maintenance {doc['pass_id']}"
    if rows:
        out.print(rows_table(title, rows, list(rows[0])))
    else:
        out.print("no table to maintain")
    for t in doc["tables"]:
        if t["status"] in ("failed", "skipped"):
            out.print(f"{t['table']}: {t['status']}: {escape(render.text(t.get('message')))}")
        if doc["dry_run"]:
            for a in t["actions"]:
                f = a.get("figures") or {}
                detail = render.text(f["skipped"]) if f.get("skipped") else render.figures(f)
                out.print(f"  {t['table']} {a['action']}: {escape(detail)}")
        else:  # what was not done, and why (a Nessie catalog's expiry is nessie-gc's, a revert window's files)
            for a in t["actions"]:
                if a["status"] == "skipped":
                    why = render.text((a.get("figures") or {}).get("skipped"))
                    out.print(f"  {t['table']} {a['action']}: skipped: {escape(why)}")


def _arrow(before: Any, after: Any, dry_run: bool) -> str:
    if before is None:
        return ""
    return f"{before}" if dry_run else f"{before} -> {after}"
