"""`wap alerts test`, `wap alerts list`, `wap alerts check`: the [alerts] sinks, from wap.toml and the run
store alone (no Spark). Sink URLs are read from their environment variables and never printed."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from wapflow.cli.common import ConfigOpt, JsonOpt, WithinOpt, window
from wapflow.cli.output import Output, out, rows_table
from wapflow.errors import EXIT_PUBLISHED, EXIT_RUNTIME, ConfigError, WapError, did_you_mean
from wapflow.vocabulary import DELIVERY_SENT

alerts_app = typer.Typer(help="Alerts to Slack or a JSON webhook ([alerts] in wap.toml).", no_args_is_help=True)

LIST_COLUMNS = [
    "id",
    "created_at",
    "event",
    "sink",
    "status",
    "attempts",
    "http_status",
    "table_name",
    "run_id",
    "error",
]


def _load(config: str | None) -> Any:
    from wapflow.config import load_config

    cfg = load_config(config)
    if not cfg.alerts.sinks:
        raise ConfigError(
            f"no alert sinks in {cfg.source or 'the configuration'}",
            hint='declare one: [alerts.sinks.team] type = "slack", url_env = "WAP_SLACK_URL"',
        )
    return cfg


@alerts_app.command("test")
def test(
    sink: Annotated[str | None, typer.Option("--sink", help="Only this sink ([alerts.sinks.NAME]).")] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Send a sample alert to each sink (or --sink NAME). Exit 0: all sent; 3: one failed; 2: bad config or
    a sink's environment variable is not set."""
    from wapflow.alerts.deliver import dispatch, sink_url
    from wapflow.alerts.event import sample_event
    from wapflow.runs.store import RunStore

    o = Output(as_json)
    try:
        cfg = _load(config)
        if sink is not None and sink not in cfg.alerts.sinks:
            raise ConfigError(
                f"no sink [alerts.sinks.{sink}]{did_you_mean(sink, cfg.alerts.sinks)}",
                hint=f"known sinks: {', '.join(cfg.alerts.sinks)}",
            )
        chosen = {n: s for n, s in cfg.alerts.sinks.items() if sink is None or n == sink}
        unset = [s.url_env for n, s in chosen.items() if sink_url(n, s) is None]
        if unset:
            raise ConfigError(
                f"environment variable {', '.join(dict.fromkeys(unset))} is not set (it holds the sink's URL)",
                hint="export it with the webhook URL; the URL itself never goes into wap.toml",
            )
        store = RunStore(cfg.run_store_url())
        deliveries = []
        for name in chosen:
            deliveries += dispatch(cfg.alerts, store.engine, sample_event(), only=name)
    except WapError as e:
        o.fail(e)
    rows = [d.to_dict() | {"type": cfg.alerts.sinks[d.sink].type} for d in deliveries]
    code = EXIT_PUBLISHED if all(d.status == DELIVERY_SENT for d in deliveries) else EXIT_RUNTIME

    def show() -> None:
        for r in rows:
            how = f"HTTP {r['http_status']}" if r["http_status"] else "no answer"
            line = f"sink {r['sink']} ({r['type']}): {r['status']} ({how}, {r['attempts']} attempt(s))"
            out.print(line + (f": {r['error']}" if r["error"] and r["status"] != DELIVERY_SENT else ""), markup=False)

    o.result({"deliveries": rows, "exit_code": code}, show)
    raise typer.Exit(code)


@alerts_app.command("list")
def list_(
    limit: Annotated[int, typer.Option("--limit")] = 50,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recent alert deliveries from the run store: sent, failed (and why), pending."""
    from wapflow.cli.common import open_store
    from wapflow.service.alerts import recent_alerts

    o = Output(as_json)
    try:
        rows = recent_alerts(open_store(config), limit=limit)
    except WapError as e:
        o.fail(e)
    o.result({"alerts": rows}, lambda: out.print(rows_table("alerts", rows, LIST_COLUMNS)))


@alerts_app.command("check")
def check(config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Alert once per branch kept for inspection longer than [alerts] branch_kept_days (run it daily)."""
    from wapflow.alerts import kept_branch_events, notify
    from wapflow.runs.store import RunStore

    o = Output(as_json)
    try:
        cfg = _load(config)
        days = cfg.alerts.branch_kept_days
        if days is None:
            raise ConfigError(
                "[alerts] branch_kept_days is not set", hint="e.g. branch_kept_days = 7 under [alerts] in wap.toml"
            )
        store = RunStore(cfg.run_store_url())
        events = kept_branch_events(store, days)
        deliveries = notify(cfg, store.engine, events, progress=o.progress)
    except WapError as e:
        o.fail(e)
    branches = [{"branch": e.branch, "table": e.table, "run_id": e.run_id, "message": e.message} for e in events]
    doc = {"kept": branches, "deliveries": [d.to_dict() for d in deliveries]}

    def show() -> None:
        out.print(rows_table(f"branches kept longer than {days} day(s)", branches, ["branch", "table", "run_id"]))
        new = [d for d in deliveries if d.status != "duplicate"]
        out.print(f"{len(new)} alert(s) delivered or attempted; {len(deliveries) - len(new)} sent before")

    o.result(doc, show)


@alerts_app.command("resend")
def resend(
    within: WithinOpt = "1d",
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Send again the alerts whose delivery failed (the sink down, an error answered, its variable unset) within
    --within, to each sink as wap.toml has it now (`wap watch` does it every few minutes). Never one that may have
    arrived: claimed but not finished, or unanswered in time. Exit 0: all sent (or none to send); 3: one failed
    again."""
    from wapflow.alerts import resend_failed
    from wapflow.runs.store import RunStore

    o = Output(as_json)
    try:
        cfg = _load(config)
        store = RunStore(cfg.run_store_url())
        deliveries = resend_failed(cfg, store.engine, window(within))
    except WapError as e:
        o.fail(e)
    rows = [d.to_dict() for d in deliveries]
    code = EXIT_PUBLISHED if all(d.status == DELIVERY_SENT for d in deliveries) else EXIT_RUNTIME

    def show() -> None:
        if not rows:
            out.print(f"no failed delivery within {within} to send again")
        for r in rows:
            line = f"{r['event']} to sink {r['sink']}: {r['status']} ({r['attempts']} attempt(s) in all)"
            out.print(line + (f": {r['error']}" if r["error"] and r["status"] != DELIVERY_SENT else ""), markup=False)

    o.result({"deliveries": rows, "exit_code": code}, show)
    raise typer.Exit(code)
