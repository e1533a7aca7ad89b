"""`wap nessie up|down|status|log`: a local Nessie server for catalog-level branches, and main's commits."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from wapflow.cli.output import Output, out, rows_table
from wapflow.errors import WapError

nessie_app = typer.Typer(
    help="A local Nessie server (catalog-level branches) and its commit log.", no_args_is_help=True
)

DirOpt = Annotated[Path, typer.Option("--dir", help="Folder of the server's RocksDB store, log and pid file.")]
DEFAULT_DIR = Path(".wap/nessie")
# Unlike the root commands' ConfigOpt/JsonOpt these carry no help text: `wap nessie ... --help` stays as it was.
NessieJsonOpt = Annotated[bool, typer.Option("--json")]


@nessie_app.command("up")
def up(
    directory: DirOpt = DEFAULT_DIR,
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1.")] = 19120,
    as_json: NessieJsonOpt = False,
) -> None:
    """Start a Nessie server in the background (runner jar fetched once); prints its API URL."""
    from wapflow._dev.nessie_server import NessieServer

    o = Output(as_json)
    try:
        server = NessieServer(directory, port=port, progress=o.progress).start(detach=True)
    except WapError as e:
        o.fail(e)
    pid = server.proc.pid if server.proc else None

    def show() -> None:
        out.print(f"Nessie is up at {server.url} (pid {pid if pid is not None else '?'}, store {server.data_dir})")
        use = f'\\[lakehouse] catalog = "nessie", nessie_uri = "{server.url}"'
        out.print(f"use it: {use}; stop: wap nessie down --dir {directory}")

    o.result({"url": server.url, "pid": pid, "dir": str(server.data_dir)}, show)


@nessie_app.command("down")
def down(directory: DirOpt = DEFAULT_DIR, as_json: NessieJsonOpt = False) -> None:
    """Stop the server `wap nessie up` started for this folder (its data stays)."""
    from wapflow._dev.nessie_server import stop_detached

    state = stop_detached(directory)
    Output(as_json).result(
        {"stopped": state is not None, "pid": state.pid if state else None},
        lambda: out.print(
            f"stopped Nessie (pid {state.pid})" if state else f"no Nessie server was running for {directory}"
        ),
    )


@nessie_app.command("status")
def status_cmd(directory: DirOpt = DEFAULT_DIR, as_json: NessieJsonOpt = False) -> None:
    """Whether the server of this folder runs and answers."""
    from wapflow._dev.nessie_server import status

    st = status(directory)
    Output(as_json).result(
        st,
        lambda: out.print(
            f"running at {st['url']} (pid {st['pid']})" if st["running"] else f"not running ({st['dir']})"
        ),
    )


@nessie_app.command("log")
def log(
    limit: Annotated[int, typer.Option("--limit")] = 20,
    config: Annotated[str | None, typer.Option("--config", "-c")] = None,
    as_json: NessieJsonOpt = False,
) -> None:
    """main's Nessie commits, newest first, with the run id and tables each publish carried (no Spark)."""
    from wapflow.config import load_config
    from wapflow.service.nessie import main_commits

    o = Output(as_json)
    try:
        rows = main_commits(load_config(config), limit)
    except WapError as e:
        o.fail(e)
    o.result(
        {"commits": rows},
        lambda: out.print(rows_table("Nessie main", rows, ["hash", "committed_at", "run_id", "tables", "message"])),
    )
