"""How to reach Nessie, from wap.toml: its API base, token and Iceberg catalog properties.

Apart from the client and the branch backend (wapflow.lakehouse.nessie) so that the Spark session,
which needs these properties, and the backend, which needs the session, do not import each other.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from wapflow.errors import ConfigError

if TYPE_CHECKING:
    from wapflow.config import WapConfig

NESSIE_CATALOG_IMPL = "org.apache.iceberg.nessie.NessieCatalog"
TOKEN_ENV = "WAP_NESSIE_TOKEN"
# Where Nessie's token is set (what a refused one's message tells the user to check).
TOKEN_SETTING = f"[lakehouse] nessie_token or ${TOKEN_ENV}"


def normalize_uri(uri: str) -> str:
    """Accept http://host:19120, .../api, .../api/v2; return the API v2 base."""
    u = uri.strip().rstrip("/")
    if u.endswith("/api/v2"):
        return u
    if u.endswith("/api/v1"):
        return u[: -len("/v1")] + "/v2"
    if u.endswith("/api"):
        return u + "/v2"
    return u + "/api/v2"


def nessie_token(cfg: WapConfig) -> str | None:
    return cfg.lakehouse.nessie_token or os.environ.get(TOKEN_ENV) or None


def nessie_uri(cfg: WapConfig) -> str:
    uri = cfg.lakehouse.nessie_uri
    if not uri:
        raise ConfigError(
            'catalog = "nessie" needs [lakehouse].nessie_uri',
            hint='e.g. nessie_uri = "http://127.0.0.1:19120/api/v2" (start a local server with `wap nessie up`)',
        )
    return normalize_uri(uri)


def catalog_properties(cfg: WapConfig, ref: str = "main") -> dict[str, str]:
    """Iceberg NessieCatalog properties for one Nessie ref (the warehouse is added by the session)."""
    props = {
        "catalog-impl": NESSIE_CATALOG_IMPL,
        "uri": nessie_uri(cfg),
        "ref": ref,
        # Main's catalog must see merges made through other catalogs at once: no table cache.
        "cache-enabled": "false",
    }
    token = nessie_token(cfg)
    if token:
        props["authentication.type"] = "BEARER"
        props["authentication.token"] = token
        # The client's API compatibility check asks GET /config through a client without the authentication
        # filter: with a token, every JVM catalog would send requests the server refuses (401) and logs.
        # wapflow's own client reads /config (with the token) before Spark starts.
        props["enable-api-compatibility-check"] = "false"
    return props
