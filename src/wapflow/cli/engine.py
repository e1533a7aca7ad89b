"""`wap engine status|stop|logs`: the warm engines of this user (wapflow.engine). The engine process itself is
wapflow.cli.engine_main."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from wapflow.cli.common import ConfigOpt, JsonOpt
from wapflow.cli.output import Output, out, rows_table

engine_app = typer.Typer(
    help="The warm wapflow engine: commands that need Spark run in it (wap.toml `engine`).", no_args_is_help=True
)

STATUS_COLUMNS = [
    "pid",
    "this_config",
    "config",
    "started",
    "idle_for_s",
    "commands",
    "running",
    "memory_mb",
    "retiring",
    "key",
]
AllOpt = Annotated[bool, typer.Option("--all", help="Every engine of this user, not only this config's.")]


def _this(config: str | None) -> tuple[str | None, str | None]:
    """This config's engine key and scope (None, None: a named config file that does not exist)."""
    from wapflow.engine import control
    from wapflow.engine.runtime import EngineUnavailable

    try:
        return control.this_config(config)
    except EngineUnavailable:
        return None, None


@engine_app.command("status")
def status(config: ConfigOpt = None, every: AllOpt = False, as_json: JsonOpt = False) -> None:
    """The engines running for this config (--all: for this user): pid, key, config, started, idle for,
    commands served and running, memory (engine, its JVM and its commands), whether it is retiring."""
    from wapflow.engine import control
    from wapflow.engine.runtime import runtime_dir

    key, scope = _this(config)
    rows = [r for r in control.status(key, scope) if every or r["this_config"]]
    doc = {"runtime_dir": str(runtime_dir()), "this_config_key": key, "engines": rows}

    def show() -> None:
        if not rows:
            mine = "" if every else " for this config (--all: every engine of yours)"
            out.print(f"no wapflow engine is running{mine} ({runtime_dir()})")
            return
        out.print(rows_table("wapflow engines", rows, STATUS_COLUMNS))

    Output(as_json).result(doc, show)


@engine_app.command("stop")
def stop(
    config: ConfigOpt = None,
    every: AllOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Stop the engines of this config (an earlier wap.toml's too; --all: every engine of this user): a command
    one runs stops as by Ctrl-C and resumes later."""
    from wapflow.engine import control

    o = Output(as_json)
    key, scope = _this(config)
    targets = [r for r in control.status(key, scope) if every or r["this_config"]]
    stopped = [{"pid": r["pid"], "key": r["key"], "ended": control.stop(int(r["pid"]))} for r in targets]
    o.result(
        {"stopped": stopped},
        lambda: out.print(
            "\n".join(f"stopped the engine pid {s['pid']} ({s['key']})" for s in stopped)
            or "no wapflow engine was running" + ("" if every else " for this config")
        ),
    )


@engine_app.command("logs")
def logs(
    config: ConfigOpt = None,
    lines: Annotated[int, typer.Option("--lines", "-n", help="How many of the last lines.")] = 50,
) -> None:
    """The last lines of the engine log of this config (the engine's own; Spark's log is in the state folder)."""
    from wapflow.engine import control
    from wapflow.engine.runtime import EngineUnavailable
    from wapflow.errors import UsageError

    o = Output(False)
    try:
        path = control.log_path(control.key_for(config))
    except EngineUnavailable as e:
        o.fail(UsageError(str(e), hint="give --config the wap.toml of the engine"))
    if not path.exists():
        out.print(f"no engine log for this config ({path})")
        return
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    sys.stdout.write(f"{path}\n" + "\n".join(text[-lines:]) + "\n")
