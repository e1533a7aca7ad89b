"""`wap dashboard`: the Streamlit app (wapflow/dashboard/app.py) on the lakehouse wap.toml names.

The app reads the run store, the ledger and the catalog's metadata without Spark; this command only checks
the config, then hands over to `streamlit run` (headless: it prints the URL and opens no browser) until
interrupted, by replacing this process (exec). The config reaches the app as $WAP_CONFIG, an absolute path.

With [dashboard.oidc] it also checks the provider answers, and writes Streamlit's `[auth]` secrets
(service.dashboard_login) to <runtime>/dashboard/secrets-<pid>.toml (0600 in a 0700 folder; the pid is the
server's, as exec keeps it), passed as `--secrets.files`; files of servers no longer running are removed at the
next start. The folder is the engine's per-user runtime folder ($XDG_RUNTIME_DIR/wapflow, else /tmp/wapflow-UID).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from wapflow.cli.common import ConfigOpt
from wapflow.cli.output import Output, err
from wapflow.errors import ConfigError, WapError

if TYPE_CHECKING:
    from wapflow.config import WapConfig

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"


def streamlit_command(host: str, port: int, secrets_file: Path | None = None) -> list[str]:
    """`streamlit run` on the app, headless, no usage statistics sent, no developer menu; with a login, its
    secrets file (then the only one Streamlit reads)."""
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
        *(["--secrets.files", str(secrets_file)] if secrets_file is not None else []),
    ]


def login_secrets(cfg: WapConfig, host: str, port: int) -> Path | None:
    """[dashboard.oidc] as Streamlit's `[auth]` secrets in a private file, after checking what a login needs
    (Authlib, the secrets' variables, the provider answering); None without [dashboard.oidc]."""
    from wapflow.engine.runtime import EngineUnavailable, ensure_runtime_dir
    from wapflow.lakehouse.processes import alive
    from wapflow.service import dashboard_login as login

    oidc = cfg.dashboard.oidc
    if oidc is None:
        return None
    if importlib.util.find_spec("authlib") is None:
        raise ConfigError(
            "[dashboard.oidc] needs Authlib (Streamlit's login uses it), which is not installed",
            hint="pip install 'wapflow[dashboard]'",
        )
    auth = login.auth_section(oidc, redirect=login.redirect_uri(oidc, cfg.alerts.dashboard_url, host, port))
    login.check_provider(oidc.server_metadata_url, hide=(auth["client_secret"], auth["cookie_secret"]))
    try:
        folder = ensure_runtime_dir() / "dashboard"
    except EngineUnavailable as e:
        raise ConfigError(f"no private folder for the dashboard's login secrets: {e}") from None
    for old in folder.glob("secrets-*.toml") if folder.is_dir() else ():
        pid = old.stem.removeprefix("secrets-")
        if pid.isdigit() and not alive(int(pid)):
            old.unlink(missing_ok=True)  # a stopped server's secrets
    try:
        return login.write_secrets(auth, folder / f"secrets-{os.getpid()}.toml")
    except OSError as e:
        raise ConfigError(f"cannot write the dashboard's login secrets in {folder}: {e.strerror}") from None


def dashboard(
    config: ConfigOpt = None,
    port: Annotated[int, typer.Option("--port", help="Port to serve on.")] = 8501,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="Address to bind (0.0.0.0: every interface). Beyond 127.0.0.1 / localhost it needs "
            "[dashboard.oidc] in wap.toml (approving or rejecting a run then needs a login with that provider) "
            "or $WAP_DASHBOARD_TOKEN (asked for once per session).",
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
        cfg = load_config(path)  # a broken wap.toml is reported here, not as a page of errors
        if not rq.loopback(host) and cfg.dashboard.oidc is None and not os.environ.get(rq.TOKEN_ENV):
            raise ConfigError(  # the Review page can publish and drop runs: never open to the network unguarded
                f"--host {host} serves the dashboard beyond this machine, and its Review page approves and rejects "
                f"runs: configure a login for it, [dashboard.oidc] in wap.toml (people log in with your OpenID "
                f"Connect provider) or {rq.TOKEN_ENV} (a secret people enter once per session)",
                hint=f"add [dashboard.oidc] (see the wap.toml reference), or export {rq.TOKEN_ENV}=$(openssl rand "
                "-hex 24), or serve on --host 127.0.0.1 (the default)",
            )
        secrets_file = login_secrets(cfg, host, port)
    except WapError as e:
        o.fail(e)
    env = dict(os.environ, WAP_DASHBOARD_REFRESH=str(refresh), WAP_DASHBOARD_HOST=host)
    if path is not None:
        env["WAP_CONFIG"] = str(Path(path).resolve())
    else:
        env.pop("WAP_CONFIG", None)
    login = f"; deciding needs a login with {cfg.dashboard.oidc.provider}" if cfg.dashboard.oidc else ""
    err.print(
        f"wapflow dashboard on http://{host}:{port} (config: {path or 'built-in defaults'}{login}); Ctrl-C stops it"
    )
    sys.stdout.flush()
    sys.stderr.flush()
    # Become Streamlit (no child process): a SIGTERM from a service manager or a test then stops the server
    # itself, instead of leaving it running without its parent.
    cmd = streamlit_command(host, port, secrets_file)
    os.execve(cmd[0], cmd, env)
