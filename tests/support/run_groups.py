"""A run store holding the records multi-table runs write (one per table, sharing wap_runs.group_id), as
`wap run-tables`, a transaction and `wap run-models` leave them: blocked by one table's check, failed by a model,
held for review, interrupted; and a run of one table. Written by wapflow's own RunStore (no JVM); the tests of
`wap runs`, `wap report` and the dashboard read it."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from wapflow.config import load_config
from wapflow.runs.store import RunRecord, RunStore

T0 = datetime(2026, 11, 28, 20, 0, tzinfo=UTC)
SINGLE = "20261128t195000_aaaaaa"
BLOCKED = "20261128t200000_bbbbbb"  # wap run-tables: shop.lines' foreign key blocked it, shop.orders held back
FAILED = "nightly_20261128t201000_cccccc"  # a transaction named nightly: model gold.daily's SQL did not run
HELD = "20261128t202000_dddddd"  # every table awaits review
GONE = "20261128t203000_eeeeee"  # its process died mid-run
FK = "foreign_key(order_id -> shop.orders)"
MODEL_ERROR = "model gold.daily: its sql does not run: [UNRESOLVED_COLUMN] fare_amout (line 2 pos 7)"


def _check(name: str, status: str) -> dict[str, Any]:
    failing = 1 if status == "failed" else 0
    return {"name": name, "check": name.split("(")[0], "status": status, "severity": "error", "observed": failing,
            "failing_rows": failing, "threshold": "0", "samples": [{"order_id": 9}] if failing else []}  # fmt: skip


def make_store(tmp_path: Path) -> Path:
    """wap.toml of a lakehouse in `tmp_path` whose run store holds the runs above."""
    config = tmp_path / "wap.toml"
    config.write_text(f'[lakehouse]\nwarehouse = "{tmp_path / "lakehouse"}"\n')
    store = RunStore(load_config(config).run_store_url())

    def save(run_id: str, table: str, status: str, minutes: int, took: float = 7.0, **kw: Any) -> None:
        started = T0 + timedelta(minutes=minutes)
        store.save(RunRecord(run_id, table, status, started_at=started, finished_at=started + timedelta(seconds=took),
                             **kw))  # fmt: skip

    save(SINGLE, "nyc.trips", "published", -10, rows_written=200, files=["trips.parquet"], snapshot_id=11)
    kept = {"branch": f"wap_{BLOCKED}", "branch_kept": True, "group_id": BLOCKED}
    save(
        f"{BLOCKED}-1",
        "shop.orders",
        "blocked",
        0,
        5.0,
        rows_written=2,
        files=["o.parquet"],
        snapshot_id=21,
        checks=[_check("not_null(order_id)", "passed")],
        timings={"prepare": 0.2, "write": 3.1, "audit": 1.5},
        **kept,
    )
    save(f"{BLOCKED}-2", "shop.lines", "blocked", 0, 8.5, rows_written=3, files=["l.parquet"], snapshot_id=22,
         checks=[_check("not_null(amount)", "passed"), _check(FK, "failed")], **kept)  # fmt: skip
    held_back = {"message": "not published: gold.daily failed at step write", "step": "write"}
    save(f"{FAILED}-1", "silver.trips", "failed", 10, rows_written=50, group_id=FAILED, error=held_back)
    own = {"message": MODEL_ERROR, "step": "write", "hint": "the line and position are those of the model's sql"}
    save(f"{FAILED}-2", "gold.daily", "failed", 10, group_id=FAILED, error=own)
    for i, table in enumerate(("shop.orders", "shop.lines")):
        save(f"{HELD}-{i + 1}", table, "awaiting_review", 20, rows_written=4, group_id=HELD, branch=f"wap_{HELD}",
             branch_kept=True)  # fmt: skip
    dead = {"host": socket.gethostname(), "pid": 2**22 + 7, "start": "1"}  # no such process
    for i, table in enumerate(("shop.orders", "shop.lines")):
        rec = RunRecord(f"{GONE}-{i + 1}", table, "running", files=[f"{table}.parquet"], group_id=GONE, owner=dead)
        rec.started_at = T0 + timedelta(minutes=30)
        store.save(rec)
    store.close()
    return config
