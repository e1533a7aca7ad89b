"""The gRPC channel of a Spark Connect client: `sc://host:port/;use_ssl=true`, a token, and `[lakehouse] ca_bundle`.

- Token: PySpark's own, `;token=...` in the URL, else `$SPARK_CONNECT_AUTHENTICATE_TOKEN` (the variable a
  Spark Connect server also reads for the token it demands: `spark.connect.authenticate.token`). It is sent
  as a bearer token, only over TLS (PySpark's rule). It is never shown: URLs are printed through
  wapflow.config.urls.redact_url (`;token=***`), and a refusal names where it is set.
- Trust: PySpark's channel trusts only the CAs bundled with gRPC. This builder gives the channel the same
  roots every other client of wapflow trusts: the public CAs plus `[lakehouse] ca_bundle` (tls.trusted_pem).
- Before the session is made, one TLS handshake with Python's ssl and those same roots (`check_tls`): an
  untrusted certificate is then one clear error at once, where gRPC reports only UNAVAILABLE, which PySpark's
  client retries for about ten minutes (its default policy, meant for a server that is restarting).
"""

from __future__ import annotations

import os
import socket
import ssl
from typing import TYPE_CHECKING, Any

from wapflow.config.urls import redact_url
from wapflow.lakehouse import tls
from wapflow.spark.errors import CONNECT_SERVER

if TYPE_CHECKING:
    from pyspark.sql.connect.client import DefaultChannelBuilder
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from wapflow.config import WapConfig

SERVICE = CONNECT_SERVER  # how its errors name it
TOKEN_SETTING = "the ;token= of [lakehouse] master (or engine) or $SPARK_CONNECT_AUTHENTICATE_TOKEN"
_HANDSHAKE_TIMEOUT = 10.0


def channel_builder(cfg: WapConfig, url: str) -> DefaultChannelBuilder:
    """PySpark's channel builder for `url`, with wapflow's roots on a TLS channel."""
    import grpc  # type: ignore[import-untyped]  # grpcio ships no types
    from pyspark.sql.connect.client import DefaultChannelBuilder

    roots = tls.trusted_pem(cfg)

    class _Builder(DefaultChannelBuilder):
        def toChannel(self) -> grpc.Channel:  # PySpark's name
            if not _over_tls(self):
                return super().toChannel()  # plain, or local credentials on localhost: nothing to trust
            creds = grpc.ssl_channel_credentials(root_certificates=roots)
            if self.token is not None:
                creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(self.token))
            return self._secure_channel(self.endpoint, creds)

    return _Builder(url)


def _over_tls(builder: DefaultChannelBuilder) -> bool:
    """PySpark's rule: TLS with use_ssl=true, or with a token to any host but localhost (local credentials)."""
    return bool(builder.secure) and (builder.use_ssl or builder.host != "localhost")


def check_tls(cfg: WapConfig, url: str, builder: DefaultChannelBuilder) -> None:
    """One TLS handshake with the channel's roots: an untrusted certificate -> exit 3 naming the URL and
    `ca_bundle`. A server that does not answer is left to the session's own error."""
    from wapflow.spark import errors as spark_errors

    if not _over_tls(builder):
        return
    host, _, port = builder.endpoint.rpartition(":")
    host = host.strip("[]")
    ctx = ssl.create_default_context(cadata=tls.trusted_pem(cfg).decode("ascii", errors="replace"))
    ctx.set_alpn_protocols(["h2"])
    try:
        with (
            socket.create_connection((host, int(port)), timeout=_HANDSHAKE_TIMEOUT) as sock,
            ctx.wrap_socket(sock, server_hostname=host),
        ):
            return
    except ssl.SSLCertVerificationError as e:
        reason = spark_errors.tls_untrusted(e) or "certificate verify failed"
        raise spark_errors.untrusted_tls_error(f"{SERVICE} at {shown(url)}", reason) from None
    except OSError:
        return


def shown(url: str) -> str:
    """The URL as wapflow prints it: its token as ***."""
    return redact_url(url)


def session(cfg: WapConfig, url: str, options: dict[str, Any]) -> ConnectSession:
    """The Spark Connect session on wapflow's channel (trust checked first), with the session settings given."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from wapflow.spark import errors as spark_errors

    builder = channel_builder(cfg, url)
    spark_errors.name_endpoint(SERVICE, shown(url), TOKEN_SETTING)
    check_tls(cfg, url, builder)
    # What PySpark's own builder sets for `.remote(url)`: pyspark.sql.SparkSession then answers with this session.
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    return ConnectSession.builder.channelBuilder(builder).config(map=options).getOrCreate()
