"""gateway_nodelay against py4j's connection list as other threads and forked children change it: a connection
with no socket (null) or a closed one is skipped, and the others still get TCP_NODELAY (a CI run's `wap run`
failed with `'NoneType' object has no attribute 'getTcpNoDelay'` from a connection being opened meanwhile)."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from py4j.protocol import Py4JError  # type: ignore[import-untyped]

from wapflow.lakehouse import session


class _Socket:
    def __init__(self, closed: bool = False) -> None:
        self.nodelay = False
        self.closed = closed

    def getTcpNoDelay(self) -> bool:
        if self.closed:
            raise Py4JError("java.net.SocketException: Socket is closed")
        return self.nodelay

    def setTcpNoDelay(self, on: bool) -> None:
        self.nodelay = on


class _Conns:
    """A java.util.List seen through py4j; `gone` entries were removed after size() was read."""

    def __init__(self, sockets: list[_Socket | None], gone: int = 0) -> None:
        self.sockets = sockets
        self.gone = gone

    def size(self) -> int:
        return len(self.sockets) + self.gone

    def get(self, i: int) -> Any:
        if i >= len(self.sockets):
            raise Py4JError("java.lang.IndexOutOfBoundsException")
        return SimpleNamespace(getSocket=lambda: self.sockets[i])


def _spark(conns: _Conns) -> Any:
    cls = SimpleNamespace(getName=lambda: "py4j.GatewayServer", getSuperclass=lambda: None)
    field = SimpleNamespace(setAccessible=lambda on: None, get=lambda server: conns)
    cls.getDeclaredField = lambda name: field
    server = SimpleNamespace(getClass=lambda: cls)
    return SimpleNamespace(_sc=SimpleNamespace(_gateway=SimpleNamespace(java_gateway_server=server)))


def _in_a_new_thread(spark: Any) -> list[BaseException]:
    """gateway_nodelay on a fresh thread (it runs once per thread); what it raised, if anything."""
    errors: list[BaseException] = []

    def call() -> None:
        try:
            session.gateway_nodelay(spark)
        except BaseException as e:  # noqa: BLE001 - the test reports what escaped
            errors.append(e)

    t = threading.Thread(target=call)
    t.start()
    t.join()
    return errors


def test_connections_without_a_socket_or_closed_or_gone_are_skipped_and_the_rest_get_nodelay() -> None:
    first, closed, last = _Socket(), _Socket(closed=True), _Socket()
    conns = _Conns([first, None, closed, last], gone=2)
    assert _in_a_new_thread(_spark(conns)) == []
    assert first.nodelay and last.nodelay and not closed.nodelay
