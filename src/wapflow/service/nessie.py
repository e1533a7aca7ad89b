"""Rows of `wap nessie log`: main's Nessie commits with the run and tables each publish carried.

Plain HTTP to the Nessie server, no Spark: a dashboard can show the catalog's publish log cheaply.
"""

from __future__ import annotations

from typing import TypedDict

from wapflow.config import WapConfig
from wapflow.lakehouse.nessie import NessieClient


class CommitRow(TypedDict):
    """One commit on main (one element of the JSON `commits` list)."""

    hash: str  # the first 16 hex digits
    committed_at: str | None
    run_id: str | None  # the wapflow run that published it, if any
    tables: list[str]
    message: str


def main_commits(cfg: WapConfig, limit: int = 20) -> list[CommitRow]:
    """main's commits, newest first."""
    commits = NessieClient.for_config(cfg).log("main", limit=limit, with_keys=True)
    return [
        {
            "hash": c.hash[:16],
            "committed_at": c.committed_at.isoformat(sep=" ", timespec="seconds") if c.committed_at else None,
            "run_id": c.run_id,
            "tables": c.keys,
            "message": c.message,
        }
        for c in commits
    ]
