"""`wap doctor`: every configured part checked from this machine (rows from wapflow.service.doctor)."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from wapflow.cli.common import ConfigOpt, JsonOpt
from wapflow.cli.output import Output, out
from wapflow.errors import EXIT_RUNTIME, WapError

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def doctor(config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Check Java, jars, the Spark master, catalog, run store, DBOS database, storage and alert sinks.

    Exit 0 when nothing failed (warnings included), 3 when a part needs fixing. No secret is printed."""
    from wapflow.config import load_config
    from wapflow.service.doctor import diagnose, failed

    o = Output(as_json)
    try:
        cfg = load_config(config)
    except WapError as e:
        o.fail(e)
    findings = diagnose(cfg)
    bad = failed(findings)

    def show() -> None:
        t = Table(title=f"wap doctor: {cfg.source or 'defaults'}", title_justify="left")
        for c in ("part", "status", "found", "to fix"):
            t.add_column(c, overflow="fold")
        for f in findings:
            style = _STYLE[f.status]
            t.add_row(escape(f.part), f"[{style}]{f.status}[/{style}]", escape(f.detail), escape(f.fix))
        out.print(t)
        n = sum(f.status == "fail" for f in findings)
        out.print(f"{n} part(s) need fixing" if bad else "every configured part answered")

    o.result({"ok": not bad, "findings": [f.to_dict() for f in findings]}, show)
    if bad:
        raise typer.Exit(EXIT_RUNTIME)
