"""What every wap.toml section shares: the strict model base (unknown keys are errors) and the validators
of durations, sizes, names and database URLs several sections use."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from wapflow.errors import ConfigError
from wapflow.vocabulary import parse_duration


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _duration(v: Any) -> Any:
    """Durations stay written as the user wrote them (shown so in messages); checked here. "never" (or
    "off") is how wap.toml, which has no null, unsets an optional one."""
    if v is None or (isinstance(v, str) and v.strip().lower() in ("never", "off")):
        return None
    parse_duration(v)
    return str(v) if not isinstance(v, str) else v.strip()


_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20,
               "GIB": 2**30, "TIB": 2**40}  # fmt: skip
_T = TypeVar("_T")


def _plain_names(named: dict[str, _T], what: str) -> dict[str, _T]:
    """Names that reach commands, ids and SQL rows (sources, sinks): letters, digits, '_' and '-' only."""
    import re

    for name in named:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise ValueError(f"{what} name {name!r}: use letters, digits, '_' and '-' (at most 64)")
    return named


def _database_url(v: str | None) -> str | None:
    """A database wapflow keeps its state in (run store, DBOS): an SQLAlchemy URL, with `postgresql://`
    meaning psycopg 3 (installed with wapflow; SQLAlchemy 2.0 would pick psycopg2, which is not)."""
    if v is None or not v.strip():
        return None
    if "://" not in v:
        raise ValueError("is not a database URL (sqlite:////abs/path/runs.db or postgresql://user:pw@host:5432/db)")
    from wapflow.config.urls import normalize_url

    return normalize_url(v)


def parse_bytes(value: int | str) -> int:
    """2GB, 500MB, 1.5GiB or a plain number of bytes."""
    if isinstance(value, int):
        return value
    text = value.strip().upper().replace(" ", "")
    num = text.rstrip("KMGTIB")
    unit = text[len(num) :]
    if unit not in _SIZE_UNITS or not num:
        raise ValueError(f"{value!r} is not a size (e.g. 2GB, 500MB, 1.5GiB, or bytes)")
    return int(float(num) * _SIZE_UNITS[unit])


_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


def ensure_folder(path: Path, what: str) -> None:
    """Create a folder wapflow writes to, or say clearly why it cannot be one."""
    bad = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if bad is not None:
        raise ConfigError(
            f"{what} {path} cannot be created: {bad} is a file, not a folder",
            hint="point [lakehouse].warehouse at a folder (it is created if missing), or move the file away",
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"{what} {path} cannot be created: {e.strerror}",
            hint="check the path and its permissions ([lakehouse].warehouse in wap.toml)",
        ) from None
