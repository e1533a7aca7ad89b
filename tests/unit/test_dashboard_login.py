"""The dashboard's OIDC login without a browser or a JVM: [dashboard.oidc] in wap.toml, what `wap dashboard` checks
and hands to Streamlit (a private secrets file; the local OIDC provider of tests/support stands in for the real
one), who may decide, and who a logged-in person is. The login itself, in Chromium, is
tests/process/test_dashboard_browser.py; the Review page's gate with AppTest, tests/spark/test_dashboard_review.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from support.oidc_provider import CLIENT_ID, CLIENT_SECRET, OidcProvider, oidc_toml
from wapflow.cli import app
from wapflow.config import OidcConfig, parse_config
from wapflow.errors import EXIT_USAGE, ConfigError
from wapflow.service import dashboard_login as login
from wapflow.service.review_queue import Gate, writes_allowed

SECRET_ENV = "TEST_OIDC_SECRET"
OIDC = {"server_metadata_url": "https://idp.example.com/.well-known/openid-configuration", "client_id": CLIENT_ID}


def _oidc(**extra: Any) -> OidcConfig:
    cfg = parse_config({"dashboard": {"oidc": {**OIDC, "client_secret_env": SECRET_ENV, **extra}}})
    assert cfg.dashboard.oidc is not None
    return cfg.dashboard.oidc


# --- wap.toml ---------------------------------------------------------------------------------------------------


def test_oidc_section_defaults_and_its_errors() -> None:
    assert parse_config({}).dashboard.oidc is None  # no section: no login asked for
    oidc = _oidc()
    assert (oidc.provider, oidc.cookie_secret_env, oidc.redirect_uri) == ("OpenID Connect", None, None)

    with pytest.raises(ConfigError, match=r"dashboard\.oidc: missing required key 'client_id'"):
        parse_config({"dashboard": {"oidc": {"server_metadata_url": OIDC["server_metadata_url"]}}})
    with pytest.raises(ConfigError, match=r"dashboard\.oidc\.redirect_uri"):
        _oidc(redirect_uri="https://wap.example.com/callback")  # Streamlit's route is /oauth2callback
    with pytest.raises(ConfigError, match=r"dashboard\.oidc\.client_secret_env"):
        _oidc(client_secret_env="not a variable")


def test_a_secret_written_into_wap_toml_is_refused_without_being_echoed() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config({"dashboard": {"oidc": {**OIDC, "client_secret": "pa55-the-real-one"}}})
    assert "client_secret does not go in wap.toml" in str(e.value) and "client_secret_env" in str(e.value)
    assert "pa55-the-real-one" not in str(e.value) + str(e.value.hint)


# --- what Streamlit is given ------------------------------------------------------------------------------------


def test_redirect_uri_is_given_or_derived_from_the_dashboards_address() -> None:
    given = _oidc(redirect_uri="https://wap.example.com/dash/oauth2callback")
    assert login.redirect_uri(given, "https://other.example.com", "0.0.0.0", 8501) == given.redirect_uri
    oidc = _oidc()
    assert login.redirect_uri(oidc, "https://wap.example.com/", "0.0.0.0", 8501) == (
        "https://wap.example.com/oauth2callback"  # [alerts] dashboard_url
    )
    assert login.redirect_uri(oidc, None, "127.0.0.1", 8600) == "http://127.0.0.1:8600/oauth2callback"
    assert login.redirect_uri(oidc, None, "::1", 8600) == "http://[::1]:8600/oauth2callback"
    with pytest.raises(ConfigError, match="redirect_uri") as e:
        login.redirect_uri(oidc, None, "0.0.0.0", 8501)  # which name do browsers use? unknowable
    assert "dashboard_url" in str(e.value.hint)


def test_auth_section_reads_the_secrets_from_the_environment() -> None:
    oidc = _oidc()
    with pytest.raises(ConfigError, match=f"client_secret_env names the environment variable {SECRET_ENV}"):
        login.auth_section(oidc, redirect="http://127.0.0.1:1/oauth2callback", env={})
    auth = login.auth_section(oidc, redirect="http://127.0.0.1:1/oauth2callback", env={SECRET_ENV: CLIENT_SECRET})
    assert (auth["client_id"], auth["client_secret"], auth["server_metadata_url"]) == (
        CLIENT_ID,
        CLIENT_SECRET,
        OIDC["server_metadata_url"],
    )
    again = login.auth_section(oidc, redirect="http://127.0.0.1:1/oauth2callback", env={SECRET_ENV: CLIENT_SECRET})
    assert len(auth["cookie_secret"]) >= 32 and auth["cookie_secret"] != again["cookie_secret"]  # generated

    named = _oidc(cookie_secret_env="TEST_COOKIE")
    with pytest.raises(ConfigError, match="TEST_COOKIE, which is not set"):
        login.auth_section(named, redirect="http://x/oauth2callback", env={SECRET_ENV: "s"})
    with pytest.raises(ConfigError, match="shorter than 16") as e:
        login.auth_section(named, redirect="http://x/oauth2callback", env={SECRET_ENV: "s", "TEST_COOKIE": "short1"})
    assert "short1" not in str(e.value)
    kept = login.auth_section(named, redirect="http://x/oauth2callback", env={SECRET_ENV: "s", "TEST_COOKIE": "k" * 40})
    assert kept["cookie_secret"] == "k" * 40


def test_the_secrets_file_is_private_and_reads_back_as_given(tmp_path: Path) -> None:
    auth = {"redirect_uri": "http://127.0.0.1:1/oauth2callback", "cookie_secret": 'q"uo\\te\n', "client_id": "é"}
    path = login.write_secrets(auth, tmp_path / "run" / "secrets.toml")
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert tomllib.loads(path.read_text()) == {"auth": auth}


def test_the_provider_must_answer_its_discovery_document(oidc_provider: OidcProvider) -> None:
    login.check_provider(oidc_provider.metadata_url)  # the local provider: fine
    with pytest.raises(ConfigError, match="answered HTTP 404"):
        login.check_provider(f"{oidc_provider.issuer}/nowhere")
    oidc_provider.close()
    with pytest.raises(ConfigError, match="did not answer") as e:
        login.check_provider(oidc_provider.metadata_url, timeout=2)
    assert "/.well-known/openid-configuration" in str(e.value.hint)


# --- who decides ------------------------------------------------------------------------------------------------


def test_with_oidc_every_address_needs_the_login() -> None:
    assert writes_allowed("127.0.0.1", {}, oidc=True) == Gate(True, "oidc", None)
    assert writes_allowed("0.0.0.0", {"WAP_DASHBOARD_TOKEN": "t0k"}, oidc=True) == Gate(True, "oidc", None)
    assert writes_allowed("127.0.0.1", {}) == Gate(True, None, None)  # without it: as before


def test_the_decider_is_who_the_provider_says() -> None:
    alice = {"is_logged_in": True, "email": "alice@example.com", "email_verified": True, "sub": "u-1"}
    assert login.oidc_identity(alice) == "alice@example.com"
    assert login.oidc_identity({**alice, "email_verified": None}) == "alice@example.com"  # a claim not sent
    assert login.oidc_identity({**alice, "email_verified": False}) == "u-1"  # unverified: anyone's address
    assert login.oidc_identity({"is_logged_in": True, "sub": "u-2"}) == "u-2"
    assert login.oidc_identity({"is_logged_in": True, "email": " "}) is None
    assert login.oidc_identity({**alice, "is_logged_in": False}) is None
    assert login.oidc_identity({"email": "test@example.com"}) is None  # AppTest's default user: not a login


def test_the_allow_list_says_who_may_decide() -> None:
    assert login.may_decide("anyone@anywhere.example", [])  # no list: whoever the provider logs in
    allow = _oidc(allow=[" *@Example.com ", "ops-bot-42"]).allow
    assert allow == ["*@Example.com", "ops-bot-42"]
    assert login.may_decide("alice@example.com", allow) and login.may_decide("ALICE@EXAMPLE.COM", allow)
    assert login.may_decide("ops-bot-42", allow)  # a subject id
    assert not login.may_decide("alice@example.com.evil.example", allow)
    assert not login.may_decide("mallory@elsewhere.example", allow)
    with pytest.raises(ConfigError, match="allow nobody"):
        _oidc(allow=[""])


# --- `wap dashboard` --------------------------------------------------------------------------------------------


def _config(tmp_path: Path, oidc: str) -> Path:
    cfg = tmp_path / "wap.toml"
    cfg.write_text(f'[lakehouse]\nwarehouse = "{tmp_path / "lakehouse"}"\n{oidc}')
    return cfg


def test_wap_dashboard_refuses_a_login_it_cannot_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, oidc_provider: OidcProvider
) -> None:
    """The secret's variable unset; the provider not answering: one line each, exit 2, no secret printed."""
    cfg = _config(tmp_path, oidc_toml(oidc_provider, SECRET_ENV))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.delenv(SECRET_ENV, raising=False)
    r = CliRunner().invoke(app, ["dashboard", "--config", str(cfg), "--port", "1"])
    assert r.exit_code == EXIT_USAGE, r.output
    assert f"names the environment variable {SECRET_ENV}, which is not set" in r.output

    monkeypatch.setenv(SECRET_ENV, CLIENT_SECRET)
    oidc_provider.close()
    r = CliRunner().invoke(app, ["dashboard", "--config", str(cfg), "--port", "1"])
    assert r.exit_code == EXIT_USAGE, r.output
    assert "server_metadata_url" in r.output and "did not answer" in r.output
    assert CLIENT_SECRET not in r.output and "Traceback" not in r.output
    assert not (tmp_path / "wapflow" / "dashboard").exists()  # nothing written for a server that never started


def test_wap_dashboard_hands_the_login_to_streamlit_in_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, oidc_provider: OidcProvider
) -> None:
    """What `wap dashboard --host 0.0.0.0` would exec with [dashboard.oidc] and no token: Streamlit with
    --secrets.files naming a 0600 file holding [auth], its redirect URI from [alerts] dashboard_url; the stale
    file of a server no longer running is removed. The output never holds the secret."""
    import wapflow.cli.dashboard as cmd

    alerts = '\n[alerts]\ndashboard_url = "https://wap.example.com"\n'
    cfg = _config(tmp_path, oidc_toml(oidc_provider, SECRET_ENV) + alerts)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.delenv("WAP_DASHBOARD_TOKEN", raising=False)
    monkeypatch.setenv(SECRET_ENV, CLIENT_SECRET)
    folder = tmp_path / "wapflow" / "dashboard"
    folder.mkdir(parents=True, mode=0o700)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (folder / f"secrets-{gone.pid}.toml").write_text("[auth]\n")  # a stopped server's
    execs: list[tuple[str, list[str], dict[str, str]]] = []
    monkeypatch.setattr(cmd.os, "execve", lambda path, args, env: execs.append((path, list(args), dict(env))))
    r = CliRunner().invoke(app, ["dashboard", "--config", str(cfg), "--port", "8765", "--host", "0.0.0.0"])
    assert r.exit_code == 0, r.output
    assert "deciding needs a login with Test IdP" in r.output and CLIENT_SECRET not in r.output
    [(_, args, env)] = execs
    secrets_file = Path(args[args.index("--secrets.files") + 1])
    assert secrets_file == folder / f"secrets-{os.getpid()}.toml"  # the pid the server keeps through exec
    assert not (folder / f"secrets-{gone.pid}.toml").exists()
    assert secrets_file.stat().st_mode & 0o777 == 0o600 and folder.stat().st_mode & 0o777 == 0o700
    auth = tomllib.loads(secrets_file.read_text())["auth"]
    assert auth["client_secret"] == CLIENT_SECRET and auth["client_id"] == CLIENT_ID
    assert auth["redirect_uri"] == "https://wap.example.com/oauth2callback"
    assert auth["server_metadata_url"] == oidc_provider.metadata_url and len(auth["cookie_secret"]) >= 32
    assert CLIENT_SECRET not in " ".join(args) and env["WAP_CONFIG"] == str(cfg)
