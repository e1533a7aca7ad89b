"""A tiny OpenID Connect provider on 127.0.0.1 (a pytest plugin, see tests/conftest.py): it stands in for the
identity provider outside the machine (Google, Okta...) that the dashboard's login ([dashboard.oidc]) talks to.

It serves what Streamlit's login (Authlib) reads: the discovery document, /authorize (the person is already
"logged in" as `user`, so it redirects straight back with a one-time code and the given state), /token (checks
the client's id and secret, the code, the redirect URI and the PKCE verifier, then answers an RS256-signed
id_token carrying the nonce) and /jwks (the public key). What happened is recorded for the test to check.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, unquote_plus, urlencode, urlsplit

import pytest

from support.local_http import QuietHandler, serve

CLIENT_ID = "wapflow-dashboard"
CLIENT_SECRET = "oidc-client-s3cret-for-the-tests"


class OidcProvider:
    """An OIDC provider for one client (CLIENT_ID / CLIENT_SECRET) whose one person is `user` (claims)."""

    def __init__(self, user: dict[str, Any] | None = None) -> None:
        from joserfc.jwk import RSAKey

        self.user: dict[str, Any] = user or {
            "sub": "u-1001",
            "email": "alice@example.com",
            "email_verified": True,
            "name": "Alice Example",
        }
        self.key = RSAKey.generate_key(2048, parameters={"kid": "test-key", "use": "sig", "alg": "RS256"})
        self.codes: dict[str, dict[str, str]] = {}  # code -> the authorization request it answers
        self.authorized: list[dict[str, str]] = []  # each /authorize request's parameters
        self.token_errors: list[str] = []  # why a /token request was refused
        self.issued: list[dict[str, Any]] = []  # the claims of each id_token given out
        self._lock = threading.Lock()
        provider = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                if url.path == "/.well-known/openid-configuration":
                    self._json(200, provider.discovery())
                elif url.path == "/jwks":
                    self._json(200, {"keys": [provider.key.as_dict(private=False)]})
                elif url.path == "/authorize":
                    self._redirect(provider.authorize({k: v[0] for k, v in parse_qs(url.query).items()}))
                else:
                    self._json(404, {"error": "not_found"})

            def do_POST(self) -> None:
                if urlsplit(self.path).path != "/token":
                    self._json(404, {"error": "not_found"})
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                form = {k: v[0] for k, v in parse_qs(body).items()}
                status, doc = provider.token(form, self.headers.get("Authorization"))
                self._json(status, doc)

            def _json(self, status: int, doc: dict[str, Any]) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def _redirect(self, location: str) -> None:
                self.send_response(302)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server, self.thread = serve(Handler)

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def metadata_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": ["openid", "email", "profile"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "code_challenge_methods_supported": ["S256"],
        }

    def authorize(self, params: dict[str, str]) -> str:
        """The redirect back to the client with a one-time code (errors go back as `error=`, as OIDC says)."""
        with self._lock:
            self.authorized.append(params)
        back = params.get("redirect_uri", "")
        state = {"state": params["state"]} if "state" in params else {}
        if params.get("client_id") != CLIENT_ID or params.get("response_type") != "code" or not back:
            return f"{back}?{urlencode({'error': 'unauthorized_client', **state})}"
        code = secrets.token_urlsafe(16)
        with self._lock:
            self.codes[code] = params
        return f"{back}?{urlencode({'code': code, **state})}"

    def _client(self, form: dict[str, str], authorization: str | None) -> tuple[str, str]:
        if authorization and authorization.lower().startswith("basic "):
            user, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
            return unquote_plus(user), unquote_plus(password)
        return form.get("client_id", ""), form.get("client_secret", "")

    def token(self, form: dict[str, str], authorization: str | None) -> tuple[int, dict[str, Any]]:
        """The code exchanged for tokens, after every check a real provider makes."""
        client_id, client_secret = self._client(form, authorization)
        if (client_id, client_secret) != (CLIENT_ID, CLIENT_SECRET):
            self.token_errors.append("invalid_client")
            return 401, {"error": "invalid_client"}
        with self._lock:
            request = self.codes.pop(form.get("code", ""), None)  # one use only
        if form.get("grant_type") != "authorization_code" or request is None:
            self.token_errors.append("invalid_grant: unknown or used code")
            return 400, {"error": "invalid_grant"}
        if form.get("redirect_uri") != request.get("redirect_uri"):
            self.token_errors.append("invalid_grant: redirect_uri differs")
            return 400, {"error": "invalid_grant"}
        challenge = request.get("code_challenge")
        if challenge:
            verifier = form.get("code_verifier", "")
            digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            if digest != challenge:
                self.token_errors.append("invalid_grant: PKCE verifier does not match")
                return 400, {"error": "invalid_grant"}
        from joserfc import jwt

        now = int(time.time())
        claims = {
            **self.user,
            "iss": self.issuer,
            "aud": CLIENT_ID,
            "iat": now,
            "exp": now + 300,
            **({"nonce": request["nonce"]} if "nonce" in request else {}),
        }
        with self._lock:
            self.issued.append(claims)
        id_token = jwt.encode({"alg": "RS256", "kid": self.key.kid}, claims, self.key)
        return 200, {
            "access_token": secrets.token_urlsafe(24),
            "token_type": "Bearer",
            "expires_in": 300,
            "scope": request.get("scope", "openid"),
            "id_token": id_token,
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def oidc_toml(provider: OidcProvider, secret_env: str, name: str = "Test IdP") -> str:
    """wap.toml's [dashboard.oidc] section for this provider (the secret itself stays in `secret_env`)."""
    return (
        f'\n[dashboard.oidc]\nprovider = "{name}"\nserver_metadata_url = "{provider.metadata_url}"\n'
        f'client_id = "{CLIENT_ID}"\nclient_secret_env = "{secret_env}"\n'
    )


@pytest.fixture
def oidc_provider() -> Iterator[OidcProvider]:
    provider = OidcProvider()
    try:
        yield provider
    finally:
        provider.close()
