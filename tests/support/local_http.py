"""A quiet HTTP server on 127.0.0.1 (a free port) served from a daemon thread: what the tests' stand-ins for
services outside the machine (the alert receiver, the OIDC identity provider) are built on."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that keeps the test output clean (no access log on stderr)."""

    def log_message(self, *_: Any) -> None:
        return None


def serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """The server and its thread, already serving; its owner's close() shuts it down."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    return server, thread
