"""The run store's listings read an index, not the whole history (issue 60: flat per-run cost after a year;
benchmarks/bench_store.py times them at 2,000 and 10,000 runs). Asserted on SQLite's own query plan of the
statements wapflow sends, on a store made by its migrations, and on what the queries return. No JVM."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_store import fill, queries

from wapflow.runs.store import runs_table


def _plan(engine: sa.Engine, stmt: Any) -> str:
    sql = str(stmt.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        return " | ".join(str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))


def test_listings_newest_first_and_by_branch_or_status_use_an_index(tmp_path: Path) -> None:
    store, history, ledger = fill(tmp_path, 300, 3)
    t = runs_table
    newest = sa.select(t).order_by(t.c.started_at.desc()).limit(100)
    plans = {
        "ix_wap_runs_started_at": _plan(store.engine, newest),
        "ix_wap_runs_table_started": _plan(store.engine, newest.where(t.c.table_name == "bench.t01")),
        "ix_wap_runs_branch": _plan(store.engine, sa.select(t).where(t.c.branch == "wap_r000299")),
        "ix_wap_runs_table_status": _plan(
            store.engine, sa.select(t.c.run_id).where(t.c.table_name == "bench.t01", t.c.status == "running")
        ),
    }
    for index, plan in plans.items():
        assert index in plan and "TEMP B-TREE" not in plan, (index, plan)  # no sort of the whole table either

    q = queries(store, history, ledger, 300, 3)
    assert [r.run_id for r in q["wap runs (latest 100)"]()] == [f"r{i:06d}" for i in range(299, 199, -1)]
    assert {r.table_name for r in q["wap runs --table (latest 100)"]()} == {"bench.t02"}
    assert [r.run_id for r in q["a branch's runs (wap discard, diff BRANCH)"]()] == ["r000299"]
    assert q["published already? 2 new files (every run)"]() == []
    assert q["a run's metrics (wap diff, review)"]()[("row_count", "")] == 0.0 + 299 % 17
    assert len(q["a source's ledger states (wap ingest)"]()) == 100
    store.close()
