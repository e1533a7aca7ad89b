"""A TLS-terminating reverse proxy on 127.0.0.1 with a throwaway CA: a real `https://` endpoint (and optionally a
bearer token) in front of a local server that speaks plain HTTP or gRPC.

Production catalogs sit behind TLS and ask for a token; the local servers the tests start (Iceberg's REST
fixture, Nessie, a Spark Connect server) do neither. This proxy puts both in front of them, so that wapflow's
`ca_bundle` and token settings meet a real handshake with a certificate no public CA signed, and a real 401:

- `make_ca(folder)` writes a CA (ca.pem) and a server certificate for 127.0.0.1 / localhost signed by it, with
  the `cryptography` package; nothing is trusted by default, exactly like a company's private CA.
- `TlsProxy(upstream_port, ca, token=...)` listens on a free port of 127.0.0.1 (asyncio + ssl, on a thread of
  its own). `mode="http"`: it reads each request's head (HTTP/1.1), answers 401 with a JSON error body (the
  shape Iceberg's REST servers use; Nessie's client reads the status) when `token` is set and the
  `Authorization: Bearer ...` header is missing or wrong, else forwards the head with `Connection: close` and
  relays both directions until one side closes (one request per connection: no response parsing needed).
  `mode="tcp"`: a plain TCP relay after the handshake (gRPC: ALPN offers h2), no token check.

A development and test tool (like wapflow._dev.nessie_server): nothing in wapflow's runtime uses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hmac
import ipaddress
import json
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

HOST = "127.0.0.1"
_MAX_HEAD = 64 * 1024
_DRAIN_LIMIT = 16 * 1024 * 1024


@dataclass(frozen=True)
class Authority:
    """A throwaway CA and the server certificate it signed (PEM files)."""

    ca_pem: Path  # what a client trusts: `ca_bundle = "<this>"`
    cert_pem: Path
    key_pem: Path


def make_ca(folder: Path, name: str = "wapflow test CA") -> Authority:
    """A new CA and a server certificate for 127.0.0.1 and localhost, valid for a day, in `folder`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST))]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    out = Authority(folder / "ca.pem", folder / "server.pem", folder / "server-key.pem")
    out.ca_pem.write_bytes(ca.public_bytes(pem))
    out.cert_pem.write_bytes(cert.public_bytes(pem))
    out.key_pem.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    out.key_pem.chmod(0o600)
    return out


def _unauthorized(message: str) -> bytes:
    """A 401 as a REST catalog sends it (Iceberg's ErrorResponse), with the bearer challenge."""
    body = json.dumps(
        {
            "error": {"message": message, "type": "NotAuthorizedException", "code": 401},
            "status": 401,
            "reason": "Unauthorized",
            "message": message,
        }
    ).encode()
    head = (
        "HTTP/1.1 401 Unauthorized\r\n"
        "Content-Type: application/json\r\n"
        'WWW-Authenticate: Bearer realm="wapflow-test"\r\n'
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class TlsProxy:
    """https://127.0.0.1:PORT in front of 127.0.0.1:`upstream_port`; `start()` / `stop()` (or a `with` block)."""

    def __init__(
        self,
        upstream_port: int,
        authority: Authority,
        *,
        token: str | None = None,
        mode: Literal["http", "tcp"] = "http",
        upstream_host: str = HOST,
    ) -> None:
        if token is not None and mode != "http":
            raise ValueError("a token can only be enforced on HTTP/1.1 (mode='http')")
        self.upstream = (upstream_host, upstream_port)
        self.authority = authority
        self.token = token
        self.mode = mode
        self.port = 0
        # Request lines answered 401, with why and the client ("GET /x: missing bearer token (python-httpx/0.28)").
        self.refused: list[str] = []
        self.forwarded = 0  # requests (http) or connections (tcp) relayed upstream
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}"

    def _context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.authority.cert_pem, self.authority.key_pem)
        # gRPC clients insist on h2 by ALPN; HTTP clients must stay on HTTP/1.1, the only thing parsed here.
        ctx.set_alpn_protocols(["h2", "http/1.1"] if self.mode == "tcp" else ["http/1.1"])
        return ctx

    def start(self) -> TlsProxy:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._serve, HOST, 0, ssl=self._context(), ssl_handshake_timeout=10)
                )
                self.port = self._server.sockets[0].getsockname()[1]
            except BaseException as e:  # noqa: BLE001 - handed to start()'s caller
                failure.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            self._server.close()
            # Connections still relaying end here, on the open loop (closed under them, their cleanup would
            # schedule callbacks on a closed loop: "Event loop is closed" at garbage collection).
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(self._server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=run, name="tls-proxy", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(15)
            self._loop = None

    def __enter__(self) -> TlsProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- connections -------------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self.mode == "tcp":
                up_reader, up_writer = await asyncio.open_connection(*self.upstream)
                self.forwarded += 1
                await self._relay(reader, writer, up_reader, up_writer)
            else:
                await self._http(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ssl.SSLError, OSError):
            pass
        finally:
            writer.close()

    async def _http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > _MAX_HEAD:
            return
        lines = head.decode("latin-1").split("\r\n")
        request_line, fields = lines[0], [ln for ln in lines[1:] if ln]
        headers: list[tuple[str, str]] = []
        for field in fields:
            name, _, value = field.partition(":")
            headers.append((name.strip(), value.strip()))
        lower = {n.lower(): v for n, v in headers}
        if self.token is not None and not self._authorized(lower.get("authorization")):
            why = "missing bearer token" if "authorization" not in lower else "invalid bearer token"
            agent = lower.get("user-agent", "no user agent")
            self.refused.append(f"{request_line.rsplit(' ', 1)[0]}: {why} ({agent})")
            await self._drain_body(reader, lower)
            writer.write(_unauthorized(f"Not authorized: {why}"))
            await writer.drain()
            return
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        hop = ("connection", "keep-alive", "proxy-connection")
        kept = [f"{n}: {v}" for n, v in headers if n.lower() not in hop]
        up_writer.write(("\r\n".join([request_line, *kept, "Connection: close"]) + "\r\n\r\n").encode("latin-1"))
        self.forwarded += 1
        await self._relay(reader, writer, up_reader, up_writer, response_head=True)

    def _authorized(self, value: str | None) -> bool:
        if not value or value[:7].lower() != "bearer ":
            return False
        assert self.token is not None
        return hmac.compare_digest(value[7:].strip().encode(), self.token.encode())

    @staticmethod
    async def _drain_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> None:
        """Read the refused request's body, so that closing the connection does not reset it under the client
        before it read the 401 (a client that waits for 100-continue sends none)."""
        if headers.get("expect", "").lower() == "100-continue":
            return
        if "chunked" in headers.get("transfer-encoding", "").lower():
            total = 0
            while total < _DRAIN_LIMIT:
                size_line = await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)) != b"\r\n":
                        pass  # trailer fields
                    return
                await asyncio.wait_for(reader.readexactly(size + 2), 10)
                total += size
            return
        length = int(headers.get("content-length", "0") or "0")
        if 0 < length <= _DRAIN_LIMIT:
            await asyncio.wait_for(reader.readexactly(length), 10)

    @staticmethod
    async def _relay(
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        *,
        response_head: bool = False,
    ) -> None:
        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, half_close: bool, head: bool) -> None:
            try:
                while head:  # the response's head says Connection: close (1xx interim responses pass as they are)
                    raw = await src.readuntil(b"\r\n\r\n")
                    status_line, *fields = raw.decode("latin-1").split("\r\n")
                    interim = status_line[9:10] == "1"
                    if not interim:
                        hop = ("connection:", "keep-alive:")
                        fields = [f for f in fields if f and not f.lower().startswith(hop)] + ["Connection: close"]
                        raw = ("\r\n".join([status_line, *fields]) + "\r\n\r\n").encode("latin-1")
                    dst.write(raw)
                    head = interim
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, ssl.SSLError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                pass
            finally:
                if half_close and dst.can_write_eof():
                    with contextlib.suppress(OSError, RuntimeError):
                        dst.write_eof()
                else:
                    dst.close()

        try:
            # client -> server: a half-close (the plain TCP side can); server -> client: the end of the response.
            down = asyncio.ensure_future(pipe(up_reader, writer, False, response_head))
            await asyncio.gather(pipe(reader, up_writer, True, False), down)
        finally:
            up_writer.close()
