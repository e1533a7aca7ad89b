"""A webhook receiver on 127.0.0.1 for alert tests (a pytest plugin, see tests/conftest.py): `Receiver` answers
each POST as told, and the `receiver` fixture gives a test one."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from support.local_http import QuietHandler, serve

SECRET = "T000SECRET/B000SECRET/xoxbsecrettoken"


class Receiver:
    """A webhook on 127.0.0.1: answers each POST as `plan` says (first item first, then `default`):
    "200", "429" (Retry-After: 1), "500", "404", or "hang" (answers nothing for `hang_seconds`)."""

    def __init__(self) -> None:
        self.plan: list[str] = []
        self.default = "200"
        self.hang_seconds = 5.0
        self.bodies: list[Any] = []
        self.paths: list[str] = []  # each POST's path
        self.auth: list[str | None] = []  # each POST's Authorization header
        self.times: list[float] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        receiver = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.bodies.append(json.loads(body))
                    receiver.paths.append(self.path)
                    receiver.auth.append(self.headers.get("Authorization"))
                    receiver.times.append(time.monotonic())
                    how = receiver.plan.pop(0) if receiver.plan else receiver.default
                if how == "hang":
                    receiver._stop.wait(receiver.hang_seconds)
                    return
                self.send_response(int(how))
                if how == "429":
                    self.send_header("Retry-After", "1")
                text = {"200": b"ok", "404": b"no_service", "500": b"internal_error", "429": b"rate_limited"}[how]
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

        self.server, self.thread = serve(Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/services/{SECRET}"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def count(self) -> int:
        return len(self.bodies)

    def close(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()
