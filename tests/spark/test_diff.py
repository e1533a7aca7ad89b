"""`wap diff RUN|BRANCH`: what publishing a run not on main yet would change, on real runs (Spark, Iceberg, the
embedded catalog): rows added, a merge's updates and deletes, and per column main beside the batch, checked
against the data the test generated (read with pyarrow, not with wapflow)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import wapflow
from support.data import trips_file, write_parquet
from support.typer_cli import as_json, wap, write_config
from wapflow.errors import EXIT_USAGE
from wapflow.pipeline import run_wap

pytestmark = pytest.mark.spark


def _column(doc: dict[str, Any], name: str) -> dict[str, Any]:
    (col,) = [c for c in doc["columns"] if c["column"] == name]
    return col


def test_diff_of_a_blocked_append_shows_rows_and_the_null_spike_main_vs_batch(spark, tmp_path, landing):
    cfg = str(write_config(tmp_path, "diff_append", checks=[{"check": "not_null", "column": "passenger_count"}]))
    clean = trips_file(landing, "clean.parquet", 200)
    spiked = trips_file(landing, "spiked.parquet", 100, null_rate=0.3, start_id=1000, seed=7)
    main_data, batch_data = pq.read_table(clean), pq.read_table(spiked)

    first = as_json(wap("run", "nyc.trips", str(clean), "--config", cfg, "--json"))
    assert first["status"] == "published", first
    r = wap("run", "nyc.trips", str(spiked), "--config", cfg, "--json")
    assert r.exit_code == 1, r.output
    blocked = as_json(r)

    r = wap("diff", blocked["run_id"], "--config", cfg, "--json")
    assert r.exit_code == 0, r.output
    doc = as_json(r)
    assert (doc["run_id"], doc["status"], doc["published"]) == (blocked["run_id"], "blocked", False)
    assert doc["rows"] == {"added": 100, "updated": 0, "deleted": 0, "replaced": 0, "main_rows": 200}

    pc_col = _column(doc, "passenger_count")
    assert pc_col["on"] == "both"
    assert pc_col["main"]["null_fraction"] == 0.0
    assert batch_data.column("passenger_count").null_count == 30
    assert pc_col["batch"]["null_fraction"] == pytest.approx(30 / 100)
    fare = _column(doc, "fare_amount")
    assert fare["main"]["min"] == pytest.approx(pc.min(main_data.column("fare_amount")).as_py())
    assert fare["main"]["max"] == pytest.approx(pc.max(main_data.column("fare_amount")).as_py())
    assert fare["batch"]["min"] == pytest.approx(pc.min(batch_data.column("fare_amount")).as_py())
    assert fare["batch"]["max"] == pytest.approx(pc.max(batch_data.column("fare_amount")).as_py())
    ids = _column(doc, "trip_id")
    assert (ids["main"]["min"], ids["main"]["max"], ids["batch"]["min"], ids["batch"]["max"]) == (1, 200, 1000, 1099)
    assert {c["column"] for c in doc["columns"]} == {f.name for f in main_data.schema}
    # Times are shown too, the batch's as main's: the same text as the values written.
    pickup = _column(doc, "pickup_at")
    for side, data in (("main", main_data), ("batch", batch_data)):
        col = data.column("pickup_at")
        assert (pickup[side]["min"], pickup[side]["max"]) == (str(pc.min(col).as_py()), str(pc.max(col).as_py()))

    # The kept branch names the same run; people get the change in words and the columns side by side.
    by_branch = as_json(wap("diff", blocked["branch"], "--config", cfg, "--json"))
    assert by_branch["run_id"] == blocked["run_id"] and by_branch["rows"] == doc["rows"]
    r = wap("diff", blocked["run_id"], "--config", cfg)
    assert r.exit_code == 0, r.output
    assert f"publishing run {blocked['run_id']} (blocked) would add 100 row(s) on main of nyc.trips" in r.stdout
    assert "passenger_count" in r.stdout and "0 → 0.3" in r.stdout

    # `wap report` says it in one line, from the record alone.
    report = as_json(wap("report", blocked["run_id"], "--config", cfg, "--json"))
    assert (
        report["would_change"]
        == f"publishing it would add 100 row(s) (main vs the batch per column: wap diff {blocked['run_id']})"
    )

    # A published run is already on main; an unknown run is exit 2 with near names.
    r = wap("diff", first["run_id"], "--config", cfg, "--json")
    assert r.exit_code == 0, r.output
    done = as_json(r)
    assert done["published"] is True and done["snapshot_id"] == first["snapshot_id"] and done["rows"] is None
    assert "already on main" in done["message"]
    typo = blocked["run_id"][:-1] + ("x" if blocked["run_id"][-1] != "x" else "y")
    r = wap("diff", typo, "--config", cfg)
    assert r.exit_code == EXIT_USAGE == 2
    assert f"no run or kept branch {typo}" in r.stderr and blocked["run_id"] in r.stderr
    r = wap("diff", typo, "--config", cfg, "--json")
    assert r.exit_code == 2 and as_json(r)["error"]["message"].startswith(f"no run or kept branch {typo}")


def _changes(landing: Path, name: str, rows: list[tuple[int, str | None, str]]) -> str:
    import pyarrow as pa

    table = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "name": pa.array([r[1] for r in rows], pa.string()),
            "op": pa.array([r[2] for r in rows], pa.string()),
        }
    )
    return str(write_parquet(landing / name, table))


def test_diff_of_a_blocked_merge_shows_its_updates_and_deletes(lakehouse_factory, landing):
    guard = {"check": "max_change", "metric": "rows_deleted+rows_updated", "max_fraction": 0.3}
    lh = lakehouse_factory(
        {"crm.customers": {"mode": "merge", "key": ["id"], "delete_when": "op = 'D'", "checks": [guard]}}
    )
    seed = run_wap(lh, "crm.customers", [_changes(landing, "seed.parquet", [(i, f"n{i}", "I") for i in range(1, 6)])])
    assert seed.status == "published", seed.message
    # Deletes 1 and 2, updates 3, inserts 9: 3 of main's 5 rows changed, more than 30%: blocked.
    batch = [(1, None, "D"), (2, None, "D"), (3, "u", "U"), (9, "new", "I")]
    res = run_wap(lh, "crm.customers", [_changes(landing, "b.parquet", batch)])
    assert res.status == "blocked", res.message

    doc = wapflow.diff(lh, res.run_id)
    assert doc["rows"] == {"added": 1, "updated": 1, "deleted": 2, "replaced": 0, "main_rows": 5}
    assert "would add 1 row(s), update 1, delete 2 on main of crm.customers (5 row(s) now)" in doc["message"]
    ids = _column(dict(doc), "id")
    assert ids["on"] == "both" and (ids["main"]["min"], ids["main"]["max"]) == (1, 5)
    assert ids["main"]["null_fraction"] == 0.0
