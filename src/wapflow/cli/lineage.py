"""`wap lineage resend`: OpenLineage events [lineage]'s receiver missed, sent again from the run store (no Spark)."""

from __future__ import annotations

import typer

from wapflow.cli.common import ConfigOpt, JsonOpt, WithinOpt, window
from wapflow.cli.output import Output, out
from wapflow.errors import EXIT_PUBLISHED, EXIT_RUNTIME, ConfigError, WapError

lineage_app = typer.Typer(help="OpenLineage events ([lineage] in wap.toml).", no_args_is_help=True)


@lineage_app.command("resend")
def resend(
    within: WithinOpt = "7d",
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Send again, oldest first, the lineage events the receiver missed (down, an error answered) within --within
    (`wap watch` does it every few minutes). A pass stops at the first that fails again. Exit 0: all sent (or
    none waiting); 3: some still waiting."""
    from wapflow.config import load_config
    from wapflow.pipeline import lineage

    o = Output(as_json)
    said: list[str] = []
    try:
        cfg = load_config(config)
        if cfg.lineage is None:
            raise ConfigError(
                f"no [lineage] section in {cfg.source or 'the configuration'}",
                hint='declare one: [lineage] transport = "http", url_env = "OPENLINEAGE_URL"',
            )
        sent, waiting = lineage.resend(cfg, window(within), progress=said.append)
    except WapError as e:
        o.fail(e)
    code = EXIT_PUBLISHED if waiting == 0 else EXIT_RUNTIME
    doc = {"sent": sent, "waiting": waiting, "messages": said, "exit_code": code}

    def show() -> None:
        for line in said:
            out.print(line, markup=False)
        if sent == 0 and waiting == 0:
            out.print(f"no missed lineage event within {within} to send again")

    o.result(doc, show)
    raise typer.Exit(code)
