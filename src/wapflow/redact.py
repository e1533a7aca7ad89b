"""What wapflow shows, logs, stores or sends never holds a secret: one scrubber for every way out.

Secrets reach wapflow as passwords inside database URLs (`user:PASSWORD@`, `?password=`), S3 keys, catalog
and Nessie tokens, alert and lineage URLs (a Slack webhook URL is its own credential) and API keys. Any text
about to leave (an error message, a delivery failure, a driver's complaint) goes through `redact` with the
secrets its caller knows; URL passwords are found without being named. The bottom layer, so the storage code,
the config model, the alert sinks and lineage all use this one rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^@\s]*)(?P<at>@)", re.IGNORECASE)
# ?password= of a database URL, and ;token= of a Spark Connect URL (sc://host:port/;use_ssl=true;token=...).
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&;](?:password|token)=)(?P<pw>[^&;\s]*)", re.IGNORECASE)


def redact(text: str, *secrets: str | Iterable[str] | None) -> str:
    """`text` with every URL's password and each of `secrets` (strings or iterables of them) replaced by ***.

    Longer secrets go first (a URL that contains a token is masked whole). Secrets shorter than three
    characters are left: a one- or two-letter password would blank out half the message.
    """
    out = _URL_PASSWORD.sub(lambda m: m.group("head") + (MASK if m.group("pw") else "") + m.group("at"), text)
    out = _QUERY_PASSWORD.sub(lambda m: m.group("head") + MASK, out)
    flat: set[str] = set()
    for s in secrets:
        if isinstance(s, str):
            flat.add(s)
        elif s is not None:
            flat.update(x for x in s if x)
    for s in sorted((s for s in flat if len(s) >= 3), key=len, reverse=True):
        out = out.replace(s, MASK)
    return out
