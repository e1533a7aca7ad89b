"""The dashboard's OpenID Connect login ([dashboard.oidc]) as Streamlit takes it, and who a logged-in person is.

Streamlit's `st.login` reads its provider from an `[auth]` section of its secrets. `wap dashboard` builds that
section from wap.toml and the environment (`auth_section`: the client secret from the variable wap.toml names,
a random cookie secret unless one is named, the redirect URI derived from the dashboard's address), checks the
provider answers its discovery document (`check_provider`), and writes the section to a file only its user can
read (`write_secrets`), passed to Streamlit as its `secrets.files` option. Each problem is one ConfigError
(exit 2) naming the key or variable; no message carries a secret.

On the page, `oidc_identity` turns `st.user` into the decider the run store records: the email the provider
verified, else the provider's subject id; `may_decide` applies wap.toml's `allow` list to it. Nothing here
imports Streamlit.
"""

from __future__ import annotations

import fnmatch
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wapflow.config import OidcConfig
from wapflow.errors import ConfigError
from wapflow.redact import redact

CALLBACK = "/oauth2callback"  # Streamlit's route the provider sends people back to
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})
METADATA_TIMEOUT = 10.0  # seconds for the provider's discovery document at start
_MIN_COOKIE_SECRET = 16  # characters; Streamlit warns below 14 bytes


def redirect_uri(oidc: OidcConfig, dashboard_url: str | None, host: str, port: int) -> str:
    """Where the provider sends people back: wap.toml's redirect_uri, else [alerts] dashboard_url's callback,
    else this server's own address (unknowable for a wildcard bind: then one of the first two is needed)."""
    if oidc.redirect_uri:
        return oidc.redirect_uri
    if dashboard_url:
        return dashboard_url.rstrip("/") + CALLBACK
    if host.strip().lower() in WILDCARD_HOSTS:
        raise ConfigError(
            f"[dashboard.oidc] needs the address people open the dashboard at: --host {host or '(every interface)'} "
            "does not say it, and the provider must send them back there",
            hint='set [dashboard.oidc] redirect_uri = "https://HOST/oauth2callback" (as registered with the '
            'provider) or [alerts] dashboard_url = "https://HOST"',
        )
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{CALLBACK}"


def _env_secret(oidc_key: str, name: str, env: Mapping[str, str]) -> str:
    value = env.get(name, "")
    if not value.strip():
        raise ConfigError(
            f"[dashboard.oidc] {oidc_key} names the environment variable {name}, which is not set (or empty)",
            hint=f"export {name}=... in the environment `wap dashboard` starts in (the value never goes in wap.toml)",
        )
    return value


def auth_section(oidc: OidcConfig, *, redirect: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Streamlit's `[auth]` secrets for one default provider: st.login() then needs no argument."""
    env = os.environ if env is None else env
    client_secret = _env_secret("client_secret_env", oidc.client_secret_env, env)
    if oidc.cookie_secret_env:
        cookie_secret = _env_secret("cookie_secret_env", oidc.cookie_secret_env, env)
        if len(cookie_secret) < _MIN_COOKIE_SECRET:
            raise ConfigError(
                f"[dashboard.oidc] cookie_secret_env: {oidc.cookie_secret_env} is shorter than "
                f"{_MIN_COOKIE_SECRET} characters, too short to sign login cookies",
                hint=f"export {oidc.cookie_secret_env}=$(openssl rand -hex 32)",
            )
    else:
        cookie_secret = secrets.token_urlsafe(32)  # a new one per start: restarting logs everyone out
    return {
        "redirect_uri": redirect,
        "cookie_secret": cookie_secret,
        "client_id": oidc.client_id,
        "client_secret": client_secret,
        "server_metadata_url": oidc.server_metadata_url,
    }


def check_provider(url: str, timeout: float = METADATA_TIMEOUT, *, hide: tuple[str, ...] = ()) -> None:
    """The provider's discovery document answers now, with the endpoints a login needs: a provider that is
    down or mistyped fails `wap dashboard` at start, not the first person who clicks "Log in"."""
    import httpx

    def fail(why: str) -> ConfigError:
        return ConfigError(
            redact(f"[dashboard.oidc] server_metadata_url {url}: {why}", *hide),
            hint="check the URL (it ends in /.well-known/openid-configuration) and that this machine reaches "
            "the provider",
        )

    try:
        resp = httpx.get(url, timeout=timeout, follow_redirects=True)
    except (httpx.HTTPError, httpx.InvalidURL) as e:
        raise fail(f"the provider did not answer ({type(e).__name__}: {e})") from None
    if resp.status_code != 200:
        raise fail(f"the provider answered HTTP {resp.status_code}, not its discovery document")
    try:
        doc = resp.json()
    except ValueError:
        raise fail("the answer is not JSON (not an OpenID Connect discovery document)") from None
    missing = [
        k
        for k in ("authorization_endpoint", "token_endpoint", "jwks_uri")
        if not isinstance(doc, dict) or not doc.get(k)
    ]
    if missing:
        raise fail(f"the discovery document lacks {', '.join(missing)}")


def _toml_string(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's (\\", \\\\, \\n, \\uXXXX)."""
    return json.dumps(value, ensure_ascii=True)


def write_secrets(auth: Mapping[str, str], path: Path) -> Path:
    """`auth` as Streamlit's `[auth]` secrets at `path`, readable by this user only (0600, in a folder 0700)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    text = "[auth]\n" + "".join(f"{k} = {_toml_string(v)}\n" for k, v in auth.items())
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)  # Streamlit never reads half a file
    return path


def oidc_identity(user: Mapping[str, Any]) -> str | None:
    """Who a logged-in person is, as their decisions record it: the email the provider verified (an email it
    says is unverified could be anyone's), else the provider's subject id; None when not logged in."""
    if user.get("is_logged_in") is not True:
        return None
    email = str(user.get("email") or "").strip()
    if email and user.get("email_verified") is not False:
        return email
    sub = str(user.get("sub") or "").strip()
    return sub or None


def may_decide(who: str, allow: Sequence[str]) -> bool:
    """Whether [dashboard.oidc] `allow` lets this identity decide (no list: anyone the provider logs in)."""
    return not allow or any(fnmatch.fnmatchcase(who.lower(), p.lower()) for p in allow)
