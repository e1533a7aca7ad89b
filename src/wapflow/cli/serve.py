"""`wap serve`: a warm Spark Connect server for one wap.toml, so each `wap` command skips the JVM start."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated
from urllib.parse import urlparse

import typer

from wapflow.cli.common import ConfigOpt, JsonOpt
from wapflow.cli.output import Output, out
from wapflow.errors import EXIT_PUBLISHED, EXIT_RUNTIME, UsageError, WapError
from wapflow.spark.kind import is_connect_url
from wapflow.stopping import StopRequested

PortOpt = Annotated[
    int | None,
    typer.Option("--port", help="Port on 127.0.0.1 (default: the port of an sc://127.0.0.1 master, else 15002)."),
]


def _port_for(master: str, port: int | None) -> int:
    """--port, else the port of a local sc:// master, else 15002; a remote sc:// master is not ours to start."""
    from wapflow.lakehouse.connect import DEFAULT_PORT

    if not is_connect_url(master):
        return port if port is not None else DEFAULT_PORT
    url = urlparse(master)
    if url.hostname not in ("127.0.0.1", "localhost"):
        raise UsageError(
            f"master = {master!r} is a Spark Connect server on another machine; `wap serve` starts one here",
            hint='set master = "local[*]" (commands then find the server) or "sc://127.0.0.1:15002"',
        )
    configured = url.port or DEFAULT_PORT
    if port is not None and port != configured:
        raise UsageError(
            f"--port {port} differs from the port of master = {master!r}",
            hint=f'drop --port, or set master = "sc://127.0.0.1:{port}"',
        )
    return configured


def serve(
    config: ConfigOpt = None,
    port: PortOpt = None,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the server `wap serve` runs for this config.")] = False,
    status: Annotated[bool, typer.Option("--status", help="Whether a server runs for this config.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run a Spark Connect server (wapflow's jars, the catalog) in the foreground until Ctrl-C or SIGTERM;
    `wap` commands on this config connect to it instead of starting a JVM each."""
    from wapflow.config import load_config
    from wapflow.lakehouse import connect

    o = Output(as_json)
    try:
        cfg = load_config(config)
        if stop or status:
            if stop and status:
                raise UsageError("--stop and --status exclude each other", hint="give one of them")
            if status:
                st = connect.status(cfg)
                o.result(
                    st,
                    lambda: out.print(
                        f"running at {st['endpoint']} (pid {st['pid']}, log {st['log']})"
                        if st["running"]
                        else f"no Spark Connect server runs for this config ({st['state_dir']})"
                    ),
                )
                return
            state = connect.stop_recorded(cfg)
            o.result(
                {"stopped": state is not None, "pid": state.pid if state else None},
                lambda: out.print(
                    f"stopped the Spark Connect server at {state.endpoint} (pid {state.pid})"
                    if state
                    else "no Spark Connect server was running for this config"
                ),
            )
            return
        server = connect.ConnectServer(cfg, _port_for(cfg.lakehouse.master, port), progress=o.progress)
        try:
            server.start()
        except StopRequested:
            server.stop()  # stopped while the server was starting: it goes too
            raise
    except WapError as e:
        o.fail(e)
    record = _record_serving(config)
    pid = server.proc.pid if server.proc else None
    doc = {"endpoint": server.endpoint, "pid": pid, "log": str(server.log_path), "started_in_s": server.started_in}
    o.result(
        doc,
        lambda: out.print(
            f"Spark Connect server at {server.endpoint} (pid {pid}, started in {server.started_in or 0:.1f}s, "
            f"log {server.log_path})\n`wap` commands on this config use it; Ctrl-C stops it"
        ),
    )
    asked = True
    try:
        code = server.wait()
        # `wap serve --stop` removes the state file before it signals the server: then this is a normal end.
        asked = connect.ServerState.read(cfg.state_dir()) is None
        if not asked:
            o.progress(f"the Spark Connect server exited by itself (code {code}); see {server.log_path}")
    except StopRequested:  # SIGTERM or Ctrl-C (wapflow.stopping): the server's normal end
        o.progress("stopping the Spark Connect server")
    finally:
        if record is not None:
            record.unlink(missing_ok=True)
        server.stop()
    raise typer.Exit(EXIT_PUBLISHED if asked else EXIT_RUNTIME)


def _record_serving(config: str | None) -> Path | None:
    """This process's record in the engines' runtime folder (wapflow.engine.runtime.serve_record): with it, the
    commands on this config hand nothing to a warm engine and come here, as this command says they do. None
    where the folder cannot be made (the commands then use an engine, which starts its own JVM)."""
    from wapflow.engine.runtime import EngineUnavailable, config_path, ensure_runtime_dir, serve_record

    try:
        ensure_runtime_dir()
        named = ["--config", config] if config is not None else []  # as a client's argv names it
        record = serve_record(config_path(named, os.environ, os.getcwd()), os.getcwd())
        tmp = record.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid()}), encoding="utf-8")
        tmp.replace(record)
    except (EngineUnavailable, OSError):
        return None
    return record
