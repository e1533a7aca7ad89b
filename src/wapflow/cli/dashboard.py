"""`wap dashboard`: the Streamlit app (wapflow/dashboard/app.py) on the lakehouse wap.toml names.

The app reads the run store, the ledger and the catalog's metadata without Spark; this command only checks
the config, then hands over to `streamlit run` (headless: it prints the URL and opens no browser) until
interrupted, by replacing this process (exec). The config reaches the app as $WAP_CONFIG, an absolute path.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from wapflow.cli.common import ConfigOpt
from wapflow.cli.output import Output, err
from wapflow.errors import ConfigError, WapError

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"


def streamlit_command(host: str, port: int) -> list[str]:
    """`streamlit run` on the app, headless, no usage statistics sent, no developer menu."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.headless",
        "true",
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",  # no "Deploy" button: this app is served, not developed
    ]


def dashboard(
    config: ConfigOpt = None,
    port: Annotated[int, typer.Option("--port", help="Port to serve on.")] = 8501,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="Address to bind (0.0.0.0: every interface). Beyond 127.0.0.1 / localhost it needs "
            "$WAP_DASHBOARD_TOKEN: approving or rejecting a run then asks for it once per session.",
        ),
    ] = "127.0.0.1",
    refresh: Annotated[float, typer.Option("--refresh", help="Seconds between the page's own refreshes.")] = 10.0,
) -> None:
    """The dashboard (Streamlit): tables, runs, checks, quality trends, kept branches, the file ledger, and the
    review queue, where held runs are approved or rejected. No Spark needed, except to approve or reject."""
    from wapflow.config import find_config_path, load_config
    from wapflow.service import review_queue as rq

    o = Output(False)
    try:
        if importlib.util.find_spec("streamlit") is None:
            raise ConfigError(  # exit 2: an install to fix, like a config
                "the dashboard needs Streamlit, which is not installed",
                hint="pip install 'wapflow[dashboard]'",
            )
        path = find_config_path(config)
        load_config(path)  # a broken wap.toml is reported here, not as a page of errors
        if not rq.loopback(host) and not os.environ.get(rq.TOKEN_ENV):
            raise ConfigError(  # the Review page can publish and drop runs: never open to the network unguarded
                f"--host {host} serves the dashboard beyond this machine, and its Review page approves and rejects "
                f"runs: set {rq.TOKEN_ENV} (a secret people enter once per session) to serve it there",
                hint=f"export {rq.TOKEN_ENV}=$(openssl rand -hex 24), or serve on --host 127.0.0.1 (the default)",
            )
    except WapError as e:
        o.fail(e)
    env = dict(os.environ, WAP_DASHBOARD_REFRESH=str(refresh), WAP_DASHBOARD_HOST=host)
    if path is not None:
        env["WAP_CONFIG"] = str(Path(path).resolve())
    else:
        env.pop("WAP_CONFIG", None)
    err.print(f"wapflow dashboard on http://{host}:{port} (config: {path or 'built-in defaults'}); Ctrl-C stops it")
    sys.stdout.flush()
    sys.stderr.flush()
    # Become Streamlit (no child process): a SIGTERM from a service manager or a test then stops the server
    # itself, instead of leaving it running without its parent.
    cmd = streamlit_command(host, port)
    os.execve(cmd[0], cmd, env)
