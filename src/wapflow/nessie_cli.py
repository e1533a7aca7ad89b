"""`wap nessie up|down|status|log`: a local Nessie server for catalog-level branches, and main's commits."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from wapflow.errors import WapError

nessie_app = typer.Typer(help="A local Nessie server (catalog-level branches) and its commit log.", no_args_is_help=True)

DirOpt = Annotated[Path, typer.Option("--dir", help="Folder of the server's RocksDB store, log and pid file.")]
DEFAULT_DIR = Path(".wap/nessie")


@nessie_app.command("up")
def up(
    directory: DirOpt = DEFAULT_DIR,
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1.")] = 19120,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Start a Nessie server in the background (runner jar fetched once); prints its API URL."""
    from wapflow.cli import _emit_json, _fail, _progress, out
    from wapflow.lakehouse.nessie_server import NessieServer

    try:
        server = NessieServer(directory, port=port, progress=_progress(as_json)).start(detach=True)
    except WapError as e:
        _fail(e, as_json)
    if as_json:
        _emit_json({"url": server.url, "pid": server.proc.pid if server.proc else None, "dir": str(server.data_dir)})
        return
    out.print(f"Nessie is up at {server.url} (pid {server.proc.pid if server.proc else '?'}, store {server.data_dir})")
    out.print(f'use it: \\[lakehouse] catalog = "nessie", nessie_uri = "{server.url}"; stop: wap nessie down --dir {directory}')


@nessie_app.command("down")
def down(directory: DirOpt = DEFAULT_DIR, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Stop the server `wap nessie up` started for this folder (its data stays)."""
    from wapflow.cli import _emit_json, out
    from wapflow.lakehouse.nessie_server import stop_detached

    state = stop_detached(directory)
    if as_json:
        _emit_json({"stopped": state is not None, "pid": state.pid if state else None})
        return
    out.print(f"stopped Nessie (pid {state.pid})" if state else f"no Nessie server was running for {directory}")


@nessie_app.command("status")
def status_cmd(directory: DirOpt = DEFAULT_DIR, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Whether the server of this folder runs and answers."""
    from wapflow.cli import _emit_json, out
    from wapflow.lakehouse.nessie_server import status

    st = status(directory)
    if as_json:
        _emit_json(st)
        return
    out.print(f"running at {st['url']} (pid {st['pid']})" if st["running"] else f"not running ({st['dir']})")


@nessie_app.command("log")
def log(
    limit: Annotated[int, typer.Option("--limit")] = 20,
    config: Annotated[str | None, typer.Option("--config", "-c")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """main's Nessie commits, newest first, with the run id and tables each publish carried (no Spark)."""
    from wapflow.cli import _emit_json, _fail, _table, out
    from wapflow.config import load_config
    from wapflow.lakehouse.nessie import NessieClient, nessie_token, nessie_uri

    try:
        cfg = load_config(config)
        commits = NessieClient(nessie_uri(cfg), nessie_token(cfg)).log("main", limit=limit, with_keys=True)
    except WapError as e:
        _fail(e, as_json)
    rows = [
        {
            "hash": c.hash[:16],
            "committed_at": c.committed_at.isoformat(sep=" ", timespec="seconds") if c.committed_at else None,
            "run_id": c.run_id,
            "tables": c.keys,
            "message": c.message,
        }
        for c in commits
    ]
    if as_json:
        _emit_json({"commits": rows})
        return
    out.print(_table("Nessie main", rows, ["hash", "committed_at", "run_id", "tables", "message"]))


def run_tables(
    specs: Annotated[
        list[str] | None, typer.Argument(help="TABLE=SOURCE[,SOURCE...] per table, e.g. shop.orders=orders.parquet")
    ] = None,
    run: Annotated[str | None, typer.Option("--run", help="A [runs.NAME] section of wap.toml instead of TABLE=SOURCE.")] = None,
    branch: Annotated[str | None, typer.Option("--branch", help="Nessie branch name (default wap_<run-id>).")] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="Re-run (or resume) this run id.")] = None,
    config: Annotated[str | None, typer.Option("--config", "-c")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Several tables in one run (catalog = "nessie"): one branch, every audit, one merge or none."""
    from wapflow.cli import _emit_json, _fail, _lakehouse, out, render_run
    from wapflow.errors import UsageError
    from wapflow.pipeline import MultiWapRun

    try:
        parsed: list[tuple[str, list[str]]] = []
        if run is not None:
            if specs:
                raise UsageError("give either --run NAME or TABLE=SOURCE arguments, not both")
            from wapflow.config import load_config

            parsed, run_branch = load_config(config).run_specs(run)
            branch = branch or run_branch
        for spec in specs or []:
            table, sep, sources = spec.partition("=")
            if not sep or not table or not sources:
                raise UsageError(f"{spec!r} is not TABLE=SOURCE", hint="e.g. shop.orders=landing/orders.parquet")
            parsed.append((table, [s for s in sources.split(",") if s]))
        res = MultiWapRun(_lakehouse(config, as_json), parsed, branch=branch, run_id=run_id).run()
    except WapError as e:
        _fail(e, as_json)
    if as_json:
        _emit_json(res.to_dict())
    else:
        for r in res.tables:
            render_run(r)
        out.print(res.message)
    raise typer.Exit(res.exit_code)
