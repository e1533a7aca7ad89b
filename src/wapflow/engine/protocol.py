"""The frames between a `wap` client and its engine over the Unix socket: a kind byte, a 4-byte length, bytes.

client -> engine   R request (JSON: argv, cwd, environment, terminal)   S stop (the signal number)
engine -> client   W waiting (a line to show)   A command started   O stdout bytes   E stderr bytes
                   X exit code (the last frame)   N refused (why; the client runs the command itself)

A connection carries one command. The client's end closing before X is a stop of the command; the engine's
end closing before X is a lost engine.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

VERSION = 1
REQUEST, STOP = b"R", b"S"
WAITING, STARTED, STDOUT, STDERR, EXIT, REFUSED = b"W", b"A", b"O", b"E", b"X", b"N"
_HEAD = struct.Struct(">cI")
MAX_FRAME = 64 * 2**20


class Closed(Exception):
    """The other end closed the connection (or broke it) before the frame was whole."""


class Channel:
    """Frames over one connected socket; sends from several threads do not interleave."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send = threading.Lock()
        self._buf = bytearray()

    def send(self, kind: bytes, payload: bytes = b"") -> None:
        with self._send:
            self.sock.sendall(_HEAD.pack(kind, len(payload)) + payload)

    def _fill(self, n: int) -> None:
        while len(self._buf) < n:
            try:
                chunk = self.sock.recv(max(65536, n - len(self._buf)))
            except (ConnectionResetError, BrokenPipeError) as e:
                raise Closed(str(e)) from None
            if not chunk:
                raise Closed("closed")
            self._buf += chunk

    def recv(self) -> tuple[bytes, bytes]:
        """The next frame (kind, payload); Closed if the connection ends first."""
        self._fill(_HEAD.size)
        kind, size = _HEAD.unpack(bytes(self._buf[: _HEAD.size]))
        if size > MAX_FRAME:
            raise Closed(f"a frame of {size} bytes")
        self._fill(_HEAD.size + size)
        payload = bytes(self._buf[_HEAD.size : _HEAD.size + size])
        del self._buf[: _HEAD.size + size]
        return kind, payload

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
