"""The TLS test proxy (wapflow._dev.tls_proxy) and `[lakehouse] ca_bundle` on the Python side, no JVM: a real
HTTP/1.1 server on 127.0.0.1 behind the proxy, reached by httpx with the context wapflow builds from the bundle.
The JVM side (keytool trust store, Iceberg's and Nessie's clients) is tested in tests/process/test_tls.py."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from wapflow._dev.tls_proxy import Authority, TlsProxy, make_ca
from wapflow.config import WapConfig, parse_config
from wapflow.errors import ConfigError, EnvironmentProblem
from wapflow.lakehouse import tls
from wapflow.spark import errors as spark_errors

TOKEN = "unit-token-8d2f"


class _Echo(http.server.BaseHTTPRequestHandler):
    """Answers every request with what it received: method, path, body length, Authorization present."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        doc = {"method": self.command, "path": self.path, "bytes": len(body), "auth": "Authorization" in self.headers}
        data = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()  # no Connection: close from here: the proxy must add it
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def upstream() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return make_ca(tmp_path_factory.mktemp("ca"))


def _cfg(tmp_path: Path, **lakehouse: str) -> WapConfig:
    cfg = parse_config({"lakehouse": {"catalog": "rest", "catalog_properties": {"uri": "https://x"}, **lakehouse}})
    return cfg.model_copy(update={"base_dir": tmp_path})


def test_a_token_and_the_ca_bundle_get_through(upstream: int, authority: Authority, tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, ca_bundle=str(authority.ca_pem))
    with TlsProxy(upstream, authority, token=TOKEN) as proxy, httpx.Client(verify=tls.ssl_context(cfg)) as client:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for _ in range(3):  # one request per connection; the client reconnects as the response says
            r = client.get(f"{proxy.url}/v1/config", headers=auth)
            assert r.status_code == 200 and r.json() == {
                "method": "GET",
                "path": "/v1/config",
                "bytes": 0,
                "auth": True,
            }
        big = client.post(f"{proxy.url}/v1/tables", headers=auth, content=b"x" * 300_000)
        assert big.status_code == 200 and big.json()["bytes"] == 300_000
        assert proxy.forwarded == 4 and proxy.refused == []


def test_a_missing_or_wrong_token_is_a_401_with_a_json_body(upstream: int, authority: Authority) -> None:
    ctx = tls.ssl_context(_cfg(Path.cwd(), ca_bundle=str(authority.ca_pem)))
    with TlsProxy(upstream, authority, token=TOKEN) as proxy, httpx.Client(verify=ctx) as client:
        missing = client.get(f"{proxy.url}/v1/config")
        assert missing.status_code == 401 and missing.json()["error"]["type"] == "NotAuthorizedException"
        assert missing.headers["www-authenticate"].startswith("Bearer")
        # A refused request's body is read before the answer (chunked too), so the client gets the 401, not a reset.
        wrong = client.post(
            f"{proxy.url}/v1/tables", headers={"Authorization": "Bearer nope"}, content=iter([b"a" * 70_000] * 3)
        )
        assert wrong.status_code == 401 and "invalid bearer token" in wrong.json()["error"]["message"]
        assert proxy.forwarded == 0
        assert proxy.refused[0].startswith("GET /v1/config: missing bearer token")
        assert proxy.refused[1].startswith("POST /v1/tables: invalid bearer token")


def test_without_the_bundle_the_certificate_is_not_trusted(upstream: int, authority: Authority) -> None:
    with TlsProxy(upstream, authority) as proxy:
        with pytest.raises(httpx.ConnectError) as exc:
            httpx.get(f"{proxy.url}/v1/config", verify=tls.ssl_context(_cfg(Path.cwd())))
        reason = spark_errors.tls_untrusted(exc.value)
        assert reason is not None and "issuer" in reason
        err = spark_errors.untrusted_tls_error(proxy.url, reason)
        assert (err.kind, err.exit_code) == ("environment", 3)
        assert err.message.startswith(f"TLS verification failed for {proxy.url}") and "ca_bundle" in (err.hint or "")
        # A refused connection is no TLS failure: it stays what it was (transient, named elsewhere).
        with pytest.raises(httpx.ConnectError) as refused:
            httpx.get("https://127.0.0.1:1/")
        assert spark_errors.tls_untrusted(refused.value) is None


def test_a_bundle_that_is_missing_or_no_pem_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as missing:
        tls.ca_bundle(_cfg(tmp_path, ca_bundle="certs/ca.pem"))
    assert (
        "[lakehouse] ca_bundle" in missing.value.message and str(tmp_path / "certs" / "ca.pem") in missing.value.message
    )
    (tmp_path / "ca.der").write_bytes(b"\x30\x82\x01\x0a not a PEM file")
    with pytest.raises(ConfigError) as garbage:
        tls.ca_bundle(_cfg(tmp_path, ca_bundle="ca.der"))
    assert "holds no PEM certificate" in garbage.value.message and garbage.value.exit_code == 2
    assert tls.ca_bundle(_cfg(tmp_path)) is None and tls.java_options(_cfg(tmp_path)) == []


@pytest.fixture(scope="module")
def grpc_upstream() -> Iterator[tuple[int, list[str]]]:
    """A plain gRPC server on 127.0.0.1 with one unary method that echoes its request and records the
    `authorization` metadata it got: what the TLS proxy (mode="tcp") fronts for the Spark Connect channel."""
    from concurrent import futures

    import grpc  # type: ignore[import-untyped]  # grpcio ships no types

    seen: list[str] = []

    def echo(request: bytes, context: Any) -> bytes:
        seen.append(dict(context.invocation_metadata()).get("authorization", ""))
        return request

    def refuse(request: bytes, context: Any) -> bytes:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "Invalid authentication token")  # what Spark's check answers
        return b""

    handler = grpc.method_handlers_generic_handler(
        "wapflow.Test",
        {
            "Echo": grpc.unary_unary_rpc_method_handler(echo, lambda b: b, lambda b: b),
            "Refuse": grpc.unary_unary_rpc_method_handler(refuse, lambda b: b, lambda b: b),
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port, seen
    server.stop(grace=None)


def test_the_spark_connect_channel_trusts_the_bundle_and_sends_the_token(
    grpc_upstream: tuple[int, list[str]], authority: Authority, tmp_path: Path
) -> None:
    """wapflow's channel builder (lakehouse.connect_channel): the bundle's CA is trusted over a real TLS handshake
    (ALPN h2), the URL's token goes as a bearer token; without the bundle, one clear error before any gRPC call."""
    from wapflow.lakehouse import connect_channel

    port, seen = grpc_upstream
    with TlsProxy(port, authority, mode="tcp") as proxy:
        url = f"sc://127.0.0.1:{proxy.port}/;use_ssl=true;token={TOKEN}"
        trusted = _cfg(tmp_path, ca_bundle=str(authority.ca_pem))
        builder = connect_channel.channel_builder(trusted, url)
        connect_channel.check_tls(trusted, url, builder)
        channel = builder.toChannel()
        try:
            echo = channel.unary_unary("/wapflow.Test/Echo")
            assert echo(b"ping", timeout=10) == b"ping"
            # A refused token (gRPC UNAUTHENTICATED) is named like the catalogs' 401s: the URL, the setting.
            with pytest.raises(Exception) as refused:
                channel.unary_unary("/wapflow.Test/Refuse")(b"x", timeout=10)
            spark_errors.name_endpoint(connect_channel.SERVICE, "sc://server:443", connect_channel.TOKEN_SETTING)
            named = spark_errors.classify(refused.value, doing="opening a Spark Connect session")
            assert isinstance(named, EnvironmentProblem) and named.exit_code == 3
            assert named.message.startswith("unauthorised: the Spark Connect server at sc://server:443 refused")
            assert "$SPARK_CONNECT_AUTHENTICATE_TOKEN" in (named.hint or "")
        finally:
            channel.close()
        assert seen[-1] == f"Bearer {TOKEN}"

        plain = _cfg(tmp_path)
        with pytest.raises(EnvironmentProblem) as untrusted:
            connect_channel.check_tls(plain, url, connect_channel.channel_builder(plain, url))
        err = untrusted.value
        shown = f"sc://127.0.0.1:{proxy.port}/;use_ssl=true;token=***"
        assert err.message.startswith(f"TLS verification failed for the Spark Connect server at {shown}: "), err
        assert TOKEN not in err.message and "[lakehouse] ca_bundle" in (err.hint or "")
    # Spark Connect's sc:// URLs are shown without their token, like a database URL's password.
    assert connect_channel.shown("sc://h:15002/;token=abc;use_ssl=true") == "sc://h:15002/;token=***;use_ssl=true"
