"""Database URLs as wap.toml gives them: which driver they mean, and how they are shown without a password.

Two of the rules every database URL wapflow keeps state in follows (wapflow.runs.databases has the third,
what a failed connection means):

- `postgresql://` (and `postgres://`) mean psycopg 3, the driver that comes with wapflow (DBOS depends on
  it); SQLAlchemy 2.0 would otherwise pick psycopg2, which is not installed.
- A password (or a Spark Connect URL's `;token=`) is never shown: URLs are printed with `***` in its place,
  and messages from a driver are scrubbed of it.

Plain string rules, below both wap.toml's model (which normalises and redacts the URLs it is given) and the
run store's database code.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

from wapflow.redact import redact

_PG_SCHEME = re.compile(r"^(postgres|postgresql)://", re.IGNORECASE)


def normalize_url(url: str) -> str:
    """`postgresql://` / `postgres://` -> `postgresql+psycopg://` (psycopg 3); other URLs as given."""
    return _PG_SCHEME.sub("postgresql+psycopg://", url.strip(), count=1)


def redact_url(url: str) -> str:
    """The URL with its password (user:PASSWORD@ or ?password=) or token (;token=) replaced by ***."""
    return redact(url)


def password_of(url: str) -> str | None:
    """The password in a URL (user:PASSWORD@host or ?password=), to scrub it from driver messages."""
    try:
        parts = urlsplit(url)
        if parts.password:
            return parts.password
        found = parse_qs(parts.query).get("password")
    except ValueError:
        return None
    return found[0] if found else None


def is_postgresql(url: str) -> bool:
    return normalize_url(url).lower().startswith("postgresql")
