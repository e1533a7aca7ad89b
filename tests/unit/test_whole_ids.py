"""Run ids, branch names, tables and snapshot ids print whole in every list the CLI prints, whatever the width:
the next command needs them as they are (issue 50 item 2). Real `wap` processes, piped as in a script or CI
log, with COLUMNS=100, COLUMNS=60 and none (then 120 columns); a lakehouse made by PyIceberg and a run store
written by wapflow's own RunStore, so no JVM starts. The other columns wrap; only --json is a document."""

from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from support.cli_harness import WAP, env
from wapflow.config import load_config
from wapflow.runs.store import RunRecord, RunStore

T0 = datetime(2026, 11, 28, 14, 34, 35, tzinfo=UTC)
RUN_IDS = ["20261128t143435_4f3a2b", "20261128t151502_9c0d1e", "20261127t093000_ab12cd"]
# wap run's default branch (wap_<run id>) for two of them; one named with --branch, longer than either.
BRANCHES = [f"wap_{RUN_IDS[0]}", f"wap_{RUN_IDS[1]}", "audit_nightly_backfill_2026_11_27_rerun"]
# Long words in the other columns, which must wrap rather than push an id off.
FAILED = [
    {"name": "anomaly(mean of fare_amount, median ± 3 MAD of last 30 runs on the same weekday)", "check": "anomaly",
     "status": "failed", "severity": "error", "failing_rows": 0, "threshold": "[212.5, 1150]",
     "observed": {"value": 759.308, "band": [212.5, 1150.0], "median": 480.0, "mad": 116.0, "history": 30}},
    {"name": "not_null(passenger_count_reported_by_the_vendor_system)", "check": "not_null", "status": "failed",
     "severity": "error", "observed": 3, "failing_rows": 3, "threshold": "= 0",
     "samples": [{"trip_id": 7, "passenger_count_reported_by_the_vendor_system": None}]},
]  # fmt: skip


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    """nyc.trips with three snapshots on main and three kept branches, and the three runs that left them."""
    from pyiceberg.catalog.sql import SqlCatalog

    folder = tmp_path_factory.mktemp("ids")
    cfg = folder / "wap.toml"
    cfg.write_text(f'[lakehouse]\nwarehouse = "{folder / "lakehouse"}"\ncatalog_name = "lake"\n')
    config = load_config(str(cfg))
    (folder / "lakehouse").mkdir()
    cat = SqlCatalog("lake", uri=f"sqlite:///{config.embedded_catalog_path()}", warehouse=f"file://{folder}/lakehouse")
    cat.create_namespace("nyc")
    table = cat.create_table("nyc.trips", schema=pa.schema([("trip_id", pa.int64())]))
    snapshots = []
    for i in range(3):
        table.append(pa.table({"trip_id": pa.array([i], pa.int64())}))
        snapshots.append(table.current_snapshot().snapshot_id)
    for branch, snap in zip(BRANCHES, snapshots, strict=True):
        table.manage_snapshots().create_branch(snap, branch).commit()
    store = RunStore(config.run_store_url())
    for i, (run_id, branch) in enumerate(zip(RUN_IDS, BRANCHES, strict=True)):
        rec = RunRecord(run_id, "nyc.trips", "blocked", rows_written=1000 + i, checks=FAILED)
        rec.started_at, rec.branch, rec.branch_kept = T0 - timedelta(hours=i), branch, True
        rec.files = [f"s3://landing/nyc/trips/2026/11/28/part-{i:05d}-of-the-nightly-export.parquet"]
        if i == 2:  # a failed run: `wap runs` gains its reason, the widest column
            rec.status, rec.error = "failed", {"step": "write", "message": "the catalog refused the commit " * 4}
        store.save(rec)
    store.close()
    return cfg, snapshots


def wap_piped(*args: str, columns: str | None) -> str:
    """`wap ARGS` with stdout a pipe, COLUMNS as given (None: not set); its stdout, after exit 0."""
    e = env()
    e.pop("COLUMNS", None)
    if columns is not None:
        e["COLUMNS"] = columns
    p = subprocess.run([WAP, *args], capture_output=True, text=True, timeout=120, env=e, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def whole(word: str, text: str) -> bool:
    """`word` stands in `text` unbroken and on its own (a run id, not only inside its wap_ branch)."""
    return re.search(rf"(?<![\w.]){re.escape(word)}(?![\w.])", text) is not None


def note_of(text: str) -> str:
    """The caption saying which columns a table left out for the terminal's width (words rejoined), or ""."""
    flat = " ".join(text.split())
    return flat[flat.index("not shown at") :] if "not shown at" in flat else ""


@pytest.mark.parametrize("columns", ["60", "100", "160", "250"])
def test_runs_fits_the_terminal_and_says_which_columns_it_left_out(lake: tuple[Path, list[int]], columns: str):
    """Ids, words and times are never broken across lines: a column that does not fit is left out and named;
    a terminal too narrow for the ids side by side gets one record a run, its columns' names beside values."""
    cfg, _ = lake
    runs = wap_piped("runs", "--config", str(cfg), columns=columns)
    table = runs[: runs.index("not shown at")] if "not shown at" in runs else runs
    assert max(len(line) for line in table.splitlines()) <= int(columns), runs
    note = note_of(runs)
    started = [(T0 - timedelta(hours=i)).strftime("%Y-%m-%d %H:%M:%S") for i in range(3)]
    if columns in ("60", "250"):  # at 60 not even the ids fit side by side: one record a run, every column
        assert note == "" and "refused" in runs, runs
        if columns == "60":
            assert "started at" in runs and all(whole(b, runs) for b in BRANCHES), runs
            assert all(re.search(rf"^run id +{r} *$", runs, re.M) for r in RUN_IDS), runs
    else:
        assert note.startswith(f"not shown at {columns} columns:") and "wap report RUN_ID" in note, runs
    for header, values in (("started at", started), ("reason", ["the catalog refused"])):
        if header in note:
            assert header not in table and not any(v in table for v in values), runs
        else:
            assert header in table and all(v in table for v in values), runs  # each on one line, whole


@pytest.mark.parametrize("columns", ["100", "60", None])
def test_runs_branches_history_and_report_print_every_id_whole(lake: tuple[Path, list[int]], columns: str | None):
    cfg, snapshots = lake
    c = ["--config", str(cfg)]
    runs = wap_piped("runs", *c, columns=columns)
    branches = wap_piped("branches", *c, columns=columns)
    history = wap_piped("history", "nyc.trips", *c, columns=columns)
    assert "refused" in runs or "reason" in note_of(runs)  # shown, or named as left out for the width
    for listing in (runs, branches):
        missing = [w for w in [*RUN_IDS, *BRANCHES] if not whole(w, listing)]
        assert not missing, f"cut at COLUMNS={columns}: {missing}\n{listing}"
        assert whole("nyc.trips", listing)
    assert all(whole(str(s), history) for s in snapshots), history
    for run_id in RUN_IDS:
        report = wap_piped("report", run_id, *c, columns=columns)
        assert whole(run_id, report) and whole(BRANCHES[RUN_IDS.index(run_id)], report)
        assert not re.search(r"[{}]|\bNone\b", report), report  # observed values and NULLs in words


def test_json_is_the_same_document_at_any_width(lake: tuple[Path, list[int]]) -> None:
    cfg, _ = lake
    docs = [json.loads(wap_piped("runs", "--config", str(cfg), "--json", columns=w)) for w in ("60", None)]
    assert docs[0] == docs[1] and [r["run_id"] for r in docs[0]["runs"]] == RUN_IDS
    assert [r["branch"] for r in docs[0]["runs"]] == BRANCHES


def test_no_terminal_width_is_read_from_a_pipe_without_columns() -> None:
    """Without COLUMNS a pipe gets 120 columns, not Rich's 80 (the console reads nothing else)."""
    e = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    code = "from wapflow.cli.output import out; print(out.width)"
    p = subprocess.run([str(Path(WAP).parent / "python"), "-c", code], capture_output=True, text=True, env=e)
    assert p.stdout.strip() == "120", p.stderr
