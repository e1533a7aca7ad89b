"""Every row figure wapflow prints about a v3 merge-on-read table is the count a reader of main gets (issue 62,
"right numbers"): `wap diff`, the audit's `changes` line, `wap metrics`, the Slack alert of a held run, `wap
history` and the dashboard, after merges that leave deletion vectors on main, an approval and a compaction.
PyIceberg is the independent reader: its own scan of main and of the run's branch (manifests, deletion vectors,
data files); the batch's own rows are read by pyarrow. Real Spark 4.1 / Iceberg 1.11, the SQLite catalog, the
CLI in this process; only Slack is replaced, by a receiver on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from support.data import changes_file
from support.receiver import Receiver
from wapflow.cli import app

pytestmark = pytest.mark.spark
TABLE = "crm.customers"


def _wap(cfg: Path, *args: str, code: int = 0, **env: str) -> dict[str, Any]:
    got = CliRunner().invoke(app, [*args, "--config", str(cfg), "--json"], env=env)
    assert got.exit_code == code, got.output
    return dict(json.loads(got.stdout))


def _reader(folder: Path, catalog: str) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    wh = folder / "lakehouse"
    return SqlCatalog(catalog, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}").load_table(TABLE)


def _rows(table: Any, ref: str = "main") -> dict[int, str]:
    """id -> name of the rows a reader of `ref` gets (PyIceberg's scan, deletion vectors applied)."""
    snap = table.refs()[ref].snapshot_id
    got = table.scan(snapshot_id=snap).to_arrow()
    return dict(zip(got.column("id").to_pylist(), got.column("name").to_pylist(), strict=True))


def _change(before: dict[int, str], after: dict[int, str]) -> dict[str, int]:
    """What a reader sees change between two states of the table, keyed by id."""
    return {
        "added": len(after.keys() - before.keys()),
        "updated": sum(1 for k in after.keys() & before.keys() if after[k] != before[k]),
        "deleted": len(before.keys() - after.keys()),
    }


def test_every_row_figure_of_a_v3_merge_is_the_count_a_reader_of_main_gets(
    spark: Any, tmp_path: Path, landing: Path, receiver: Receiver
) -> None:
    from wapflow.service import dashboard as svc

    catalog = "true_figures"
    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{tmp_path / "lakehouse"}"\ncatalog_name = "{catalog}"\nmaster = "local[2]"\n\n'
        f'[tables."{TABLE}"]\nmode = "merge"\nkey = ["id"]\ndelete_when = "op = \'D\'"\nformat_version = 3\n'
        'review = "always"\nmaintenance = { min_input_files = 2, every = "never" }\n'
        'checks = [{ check = "not_null", column = "id" }]\n\n'
        '[alerts.sinks.team]\ntype = "slack"\nurl_env = "WAP_T_SLACK"\n'
    )
    env = {"WAP_T_SLACK": receiver.url}

    def merge(name: str, rows: list[tuple[Any, ...]]) -> tuple[str, dict[str, Any]]:
        """A merge run held for review, approved: its file, and its held document."""
        path = changes_file(landing, name, rows)
        held = _wap(cfg, "run", TABLE, path, code=6, **env)
        assert held["status"] == "awaiting_review", held
        return path, held

    seed = [(i, f"n{i}", "I") for i in range(1, 21)]
    _, first = merge("seed.parquet", seed)
    _wap(cfg, "approve", first["run_id"], "--reason", "seed")
    # Deletes and updates leave deletion vectors on main: its data files still hold 20 records, a reader 17.
    _, second = merge("b1.parquet", [(1, None, "D"), (2, None, "D"), (3, None, "D"), (4, "u4", "U"), (21, "x", "I")])
    _wap(cfg, "approve", second["run_id"], "--reason", "first changes")
    table = _reader(tmp_path, catalog)
    main = _rows(table)
    assert len(main) == 18 and table.scan().plan_files() and any(t.delete_files for t in table.scan().plan_files())

    batch = [(5, None, "D"), (6, None, "D"), (7, "u7", "U"), (8, "u8", "U"), (9, "u9", "U")]
    batch += [(100 + i, f"new{i}", "I") for i in range(4)]
    path, held = merge("b2.parquet", batch)
    run_id = held["run_id"]
    table = _reader(tmp_path, catalog)
    branch = _rows(table, held["branch"])
    truth = {**_change(main, branch), "main_rows": len(main)}
    assert truth == {"added": 4, "updated": 3, "deleted": 2, "main_rows": 18}

    # wap diff: what publishing would change, and main's rows now.
    diff = _wap(cfg, "diff", run_id)
    assert {k: diff["rows"][k] for k in truth} == truth, diff["rows"]
    # The audit's `changes` line (wap report): the merge's figures and main's rows at its base.
    report = _wap(cfg, "report", run_id)
    (changes,) = [c for c in report["checks"] if c["check"] == "changes"]
    observed = changes["observed"]
    assert (observed["rows_inserted"], observed["rows_updated"], observed["rows_deleted"]) == (4, 3, 2), observed
    assert observed["main_rows"] == len(main), observed
    # wap metrics: the run's change metrics, and its batch as applied (the rows that only delete their key left
    # out, as the row-level checks see it), counted by pyarrow from the file and by PyIceberg's change.
    metrics = _wap(cfg, "metrics", TABLE)
    recorded = {m["metric"]: m["value"] for m in metrics["metrics"] if m["run_id"] == run_id and not m["column"]}
    applied = pq.read_table(path).filter(pc.field("op") != "D").num_rows
    assert recorded["row_count"] == applied == truth["added"] + truth["updated"], recorded
    assert (recorded["rows_inserted"], recorded["rows_updated"], recorded["rows_deleted"]) == (4, 3, 2), recorded
    # The Slack alert of the held run: the same figures, main's rows as a reader counts them.
    texts = [json.dumps(b) for b in receiver.bodies]
    (alert,) = [t for t in texts if run_id in t]
    assert f"rows: 4 added, 3 updated, 2 deleted (main has {len(main)})" in alert, alert

    # Approved: main as the branch was; history, the dashboard and wap diff count what a reader gets.
    _wap(cfg, "approve", run_id, "--reason", "checked")
    table = _reader(tmp_path, catalog)
    assert _rows(table) == branch
    history = _wap(cfg, "history", TABLE)
    src = svc.open_sources(cfg)
    try:
        page = svc.table_detail(src, TABLE)
    finally:
        src.close()
    assert history["snapshots"][0]["total_rows"] == page["rows_on_main"] == len(branch) == 20
    runs = {r["run_id"]: r for r in _wap(cfg, "runs", "--table", TABLE)["runs"]}
    assert runs[run_id]["status"] == "published" and runs[run_id]["rows"] == applied, runs[run_id]
    files = len(list(table.scan().plan_files()))

    # Compacted (deletion vectors applied into new files): the same count everywhere.
    done = _wap(cfg, "maintain", TABLE)
    assert done["exit_code"] == 0, done
    assert len(list(_reader(tmp_path, catalog).scan().plan_files())) < files, done
    table = _reader(tmp_path, catalog)
    assert _rows(table) == branch
    assert _wap(cfg, "history", TABLE)["snapshots"][0]["total_rows"] == len(branch)
