"""A run is data: each step in its own fresh Python process, with only the JSON state passed
between them, ends exactly like the same run in one process; a step replayed with the same input
state (a retry after a crash) changes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.cli_harness import Reader, env, unique_catalog, write_config
from support.data import trips_file
from wapflow.config import load_config
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import RunState, new_state, run_state
from wapflow.runs.store import RunStore

pytestmark = pytest.mark.slow

WORKER = str(Path(__file__).resolve().parents[1] / "support" / "step_worker.py")
TABLES = """
[tables."s.clean"]
checks = [{ check = "not_null", column = "passenger_count" }]

[tables."s.dirty"]
checks = [{ check = "not_null", column = "passenger_count" }]

[tables."s.quar"]
on_row_failure = "quarantine"
checks = [{ check = "not_null", column = "passenger_count" }, { check = "row_count", min = 1 }]

[tables."s.cols"]
schema = "add_columns"
checks = [{ check = "not_null", column = "trip_id" }, { check = "not_null", column = "tip_note" }]
"""
RUNS = {  # run id -> (table, expected status)
    "r_clean": ("s.clean", "published"),
    "r_dirty": ("s.dirty", "blocked"),
    "r_quar": ("s.quar", "published"),
    "r_cols": ("s.cols", "published"),
}


def _worker(cfg: Path, *args: str) -> None:
    p = subprocess.run(
        [sys.executable, WORKER, str(cfg), *args], capture_output=True, text=True, env=env(), timeout=600
    )
    assert p.returncode == 0, p.stdout + p.stderr


def _files(landing: Path) -> dict[str, list[str]]:
    landing.mkdir(parents=True, exist_ok=True)
    with_tip = landing / "cols.parquet"
    base = pq.read_table(trips_file(landing, "cols_base.parquet", 40, start_id=500))
    pq.write_table(base.append_column("tip_note", pa.array([f"n{i}" for i in range(40)])), with_tip)
    return {
        "seed": [str(trips_file(landing, "seed.parquet", 10, start_id=1))],
        "r_clean": [str(trips_file(landing, "clean.parquet", 100, start_id=100))],
        "r_dirty": [str(trips_file(landing, "dirty.parquet", 80, start_id=300, null_rate=0.2))],
        "r_quar": [str(trips_file(landing, "quar.parquet", 90, start_id=400, null_rate=0.2))],
        "r_cols": [str(with_tip)],
    }


def _seed(cfg: Path, files: dict[str, list[str]]) -> dict[str, Any]:
    return {"table": "s.cols", "files": files["seed"], "run_id": "seed_cols"}


def _outcome(folder: Path, cfg: Path, state: RunState) -> dict[str, Any]:
    """What a user checks: main's rows (PyIceberg), snapshots, branches, the report and the run store."""
    catalog = load_config(str(cfg)).lakehouse.catalog_name
    reader = Reader(folder, catalog)
    table = state.table
    rec = RunStore(load_config(str(cfg)).run_store_url()).get(state.run_id)
    assert rec is not None
    out: dict[str, Any] = {
        "status": state.status,
        "rows": sorted(json.dumps(r, sort_keys=True, default=str) for r in reader.rows(table)),
        "main_ops": [
            (s.get("operation"), s.get("added-records"), s.get("wapflow.run-id")) for s in reader.summaries(table)
        ],
        "main_is_record": reader.main(table) == state.record["snapshot_id"],
        "branches": reader.branches(table),
        # (a check's reproducing SQL names the catalog, which is each lakehouse's own)
        "checks": json.loads(
            json.dumps([{k: v for k, v in c.items() if k != "samples"} for c in state.record["checks"]]).replace(
                catalog, "CATALOG"
            )
        ),
        "record": {
            k: state.record[k] for k in ("status", "rows_written", "branch", "branch_kept", "files", "file_ids")
        },
        "published_via": state.published_via,
    }
    if reader.exists(f"{table}__quarantine"):
        q = reader.rows(f"{table}__quarantine")
        out["quarantine"] = sorted(
            json.dumps({k: v for k, v in r.items() if k != "_wap_quarantined_at"}, sort_keys=True, default=str)
            for r in q
        )
    out["stored"] = (
        rec.status,
        rec.rows_written,
        rec.snapshot_id == state.record["snapshot_id"],
        rec.checks == state.record["checks"],
    )
    return out


def _in_this_process(spark: Any, cfg: Path, specs: list[dict[str, Any]]) -> dict[str, RunState]:
    """Whole runs, each start to end, in this one process (the shared SparkSession)."""
    lh = Lakehouse(load_config(str(cfg)), spark=spark)
    return {s["run_id"]: run_state(lh, new_state(s["table"], s["files"], run_id=s["run_id"])) for s in specs}


def test_each_step_in_its_own_process_equals_one_process(tmp_path, spark):
    one_dir, many_dir = tmp_path / "one", tmp_path / "many"
    files = _files(tmp_path / "landing")
    # Catalog names of their own: the seeds run on this process's shared SparkSession, which caches catalogs.
    one_cfg = write_config(one_dir, TABLES, catalog=unique_catalog("one"))
    many_cfg = write_config(many_dir, TABLES, catalog=unique_catalog("many"))
    for d in (one_dir, many_dir):
        (d / "states").mkdir()

    # Baseline: the seed of s.cols, then the four runs, each start to end, all in one process (this one).
    specs = [{"table": t, "files": files[rid], "run_id": rid} for rid, (t, _) in RUNS.items()]
    one = _in_this_process(spark, one_cfg, [_seed(one_cfg, files), *specs])

    # The same runs, every step in a fresh process; only the JSON state crosses between them. One process
    # per step serves all four runs (as a queue worker would), so a run's consecutive steps never share one.
    # (The seed of s.cols only sets the scene: it runs here.)
    _in_this_process(spark, many_cfg, [_seed(many_cfg, files)])
    states = many_dir / "states"
    path: dict[str, Path] = {}
    for rid, (table, _) in RUNS.items():
        path[rid] = states / f"{rid}.0.json"
        path[rid].write_text(new_state(table, files[rid], run_id=rid).to_json())
    retried_write: list[str] = []
    for i, step in enumerate(("prepare", "write", "audit", "publish"), start=1):
        nxt = {rid: states / f"{rid}.{i}.json" for rid in RUNS}
        if step == "audit":
            # First, in the audit's fresh process, the write of r_clean retried with its same input state (as
            # after a crash): it finds its rows and appends nothing; the run goes on from the retried write, and
            # its outcome must still equal one process's.
            again = states / "r_clean.2b.json"
            retried_write = ["write", str(states / "r_clean.1.json"), str(again)]
            first_write, path["r_clean"] = path["r_clean"], again
        _worker(many_cfg, "step", *retried_write, *[str(x) for rid in RUNS for x in (step, path[rid], nxt[rid])])
        if step == "audit":
            first, retried = RunState.from_json(first_write.read_text()), RunState.from_json(again.read_text())
            assert retried.run_snapshots == first.run_snapshots and retried.base == first.base
            assert retried.record["base_snapshot_id"] == first.record["base_snapshot_id"]
            assert (retried.done, retried.status) == (first.done, "running")
            retried_write = []
        path = nxt
    many = {rid: RunState.from_json(path[rid].read_text()) for rid in RUNS}

    for rid, (_, status) in RUNS.items():
        assert one[rid].status == status, one[rid].message
        assert many[rid].done == ["prepare", "write", "audit", "publish"]
        assert _outcome(many_dir, many_cfg, many[rid]) == _outcome(one_dir, one_cfg, one[rid]), rid
    reader = Reader(many_dir, load_config(str(many_cfg)).lakehouse.catalog_name)
    # The dirty run's rows wait on its branch; the quarantined rows are on the quarantine table's main.
    assert "wap_r_dirty" in reader.branches("s.dirty")
    assert len(reader.rows("s.quar__quarantine")) > 0
    assert "tip_note" in reader.rows("s.cols")[0]

    # A publish replayed with the same input state (a retry after a crash) publishes nothing twice; so
    # does a write replayed after the run was published.
    main_before = {t: reader.summaries(t) for t in ("s.clean", "s.quar", "s.quar__quarantine")}
    _worker(
        many_cfg,
        "step",
        *("publish", str(states / "r_quar.3.json"), str(states / "r_quar.4b.json")),
        *("write", str(states / "r_clean.1.json"), str(states / "r_clean.2c.json")),
    )
    replayed = RunState.from_json((states / "r_quar.4b.json").read_text())
    assert replayed.status == "published" and replayed.published_via == "already"
    assert replayed.record["snapshot_id"] == many["r_quar"].record["snapshot_id"]
    late = RunState.from_json((states / "r_clean.2c.json").read_text())
    assert late.already_published == many["r_clean"].record["snapshot_id"] and late.run_snapshots == []
    reader = Reader(many_dir, load_config(str(many_cfg)).lakehouse.catalog_name)
    for t, before in main_before.items():
        assert reader.summaries(t) == before, t  # no second append, no second publish
    assert reader.branches("s.clean") == []  # and no branch written again
