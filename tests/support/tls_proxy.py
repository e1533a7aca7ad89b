"""TLS in front of the test session's servers (issue 25): `tls_authority` is a throwaway CA made once per session,
`tls_proxy` starts a wapflow._dev.tls_proxy.TlsProxy (https://127.0.0.1:PORT, optionally demanding a bearer
token) in front of a local port and stops it when the test ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from wapflow._dev.tls_proxy import Authority, TlsProxy, make_ca


@pytest.fixture(scope="session")
def tls_authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    """A private CA (ca.pem: what `ca_bundle` points at) and its server certificate for 127.0.0.1."""
    return make_ca(tmp_path_factory.mktemp("tls-ca"))


@pytest.fixture
def tls_proxy(tls_authority: Authority) -> Iterator[Callable[..., TlsProxy]]:
    """`tls_proxy(port, token=..., mode="http"|"tcp")`: a started proxy to 127.0.0.1:port, stopped after the test."""
    started: list[TlsProxy] = []

    def start(port: int, *, token: str | None = None, mode: str = "http") -> TlsProxy:
        proxy = TlsProxy(port, tls_authority, token=token, mode=mode)  # type: ignore[arg-type]
        started.append(proxy.start())
        return proxy

    yield start
    for proxy in started:
        proxy.stop()
