"""The trigger a task held for review defers to: it reads the run store (no Spark, no worker slot) until every
run it waits for is decided (`wap approve` / `wap reject`, the dashboard, a timeout's rejection) or its deadline
passes.

It runs in Airflow's triggerer, which needs wapflow installed (the same `wapflow[airflow]`) and the wap.toml
path readable; the run store URL is read from that file there, so no database URL (or its password) is kept in
Airflow's trigger table. One store query per run every `poll_interval` seconds; the store is opened once per
trigger run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from wapflow.config import load_config
from wapflow.runs.store import RunStore
from wapflow.service.runs import group_status
from wapflow.vocabulary import AWAITING_REVIEW

CLASSPATH = "wapflow.integrations.airflow.triggers.ReviewTrigger"


def statuses(store: RunStore, run_ids: list[str]) -> dict[str, str]:
    """Each run's (or multi-table run's) status as `wap runs` shows it; "missing" for an id the store lacks."""
    out: dict[str, str] = {}
    for rid in run_ids:
        rec = store.get(rid)
        if rec is not None:
            out[rid] = rec.shown_status
            continue
        members = store.group(rid)
        out[rid] = group_status(members) if members else "missing"
    return out


class ReviewTrigger(BaseTrigger):
    """Fires once none of `run_ids` awaits review any more, or at `deadline` (ISO time, UTC) if given."""

    def __init__(
        self, run_ids: list[str], config: str | None, poll_interval: float = 30.0, deadline: str | None = None
    ) -> None:
        super().__init__()
        self.run_ids = list(run_ids)
        self.config = config
        self.poll_interval = float(poll_interval)
        self.deadline = deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, {
            "run_ids": self.run_ids,
            "config": self.config,
            "poll_interval": self.poll_interval,
            "deadline": self.deadline,
        }

    def _open(self) -> RunStore:
        return RunStore(load_config(self.config).run_store_url())

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = await asyncio.to_thread(self._open)
        until = datetime.fromisoformat(self.deadline) if self.deadline else None
        try:
            while True:
                now = await asyncio.to_thread(statuses, store, self.run_ids)
                if AWAITING_REVIEW not in now.values():
                    yield TriggerEvent({"decided": True, "statuses": now})
                    return
                if until is not None and datetime.now(UTC) >= until:
                    yield TriggerEvent({"decided": False, "timed_out": True, "statuses": now})
                    return
                await asyncio.sleep(self.poll_interval)
        finally:
            await asyncio.to_thread(store.close)
