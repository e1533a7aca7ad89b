"""`wap runs` and `wap report` after real multi-table runs (issue 46 item 4): `wap run-tables` published, then
blocked by one table's foreign key, then `wap run-models` failed by a model whose SQL names a missing column. The
runs list shows each run once with its tables below it; the report of a group shows every table, the one that
stopped it, the model named with its line; a table's report names its group. The embedded catalog, read back by
PyIceberg's own client for the snapshots main holds."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from support.data import write_parquet
from wapflow.cli import app
from wapflow.config import load_config

pytestmark = pytest.mark.spark

BAD_MODEL = "SELECT order_id,\n       totl FROM shop.orders"  # `totl`: no such column, on the model's line 2


def orders(landing: Path, name: str, ids: list[int]) -> str:
    t = pa.table({"order_id": pa.array(ids, pa.int64()), "total": pa.array([10.0 * i for i in ids])})
    return str(write_parquet(landing / name, t))


def lines(landing: Path, name: str, order_ids: list[int]) -> str:
    t = pa.table({"order_id": pa.array(order_ids, pa.int64()), "amount": pa.array([1.0] * len(order_ids))})
    return str(write_parquet(landing / name, t))


def main_head(cfg: Path, table: str) -> int | None:
    from pyiceberg.catalog.sql import SqlCatalog

    config = load_config(cfg)
    catalog = SqlCatalog(
        config.lakehouse.catalog_name, uri=f"sqlite:///{config.embedded_catalog_path()}", warehouse="file:///x"
    )
    snap = catalog.load_table(tuple(table.split("."))).current_snapshot()
    return None if snap is None else snap.snapshot_id


def test_runs_and_report_show_real_multi_table_runs_with_their_tables(
    spark: Any, tmp_path: Path, landing: Path
) -> None:
    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f"""
[lakehouse]
warehouse = "{tmp_path / "lh"}"
catalog_name = "groups{os.getpid()}"
master = "local[2]"

[tables."shop.orders"]
checks = [{{ check = "not_null", column = "order_id" }}]

[tables."shop.lines"]
checks = [{{ check = "foreign_key", column = "order_id", table = "shop.orders" }}]

[models."shop.order_totals"]
sql = '''{BAD_MODEL}'''
""",
        encoding="utf-8",
    )
    runner = CliRunner()

    def wap(*args: str) -> Any:
        return runner.invoke(app, [*args, "--config", str(cfg)])

    ok = wap("run-tables", f"shop.orders={orders(landing, 'o1.parquet', [1, 2])}",
             f"shop.lines={lines(landing, 'l1.parquet', [1, 1, 2])}", "--json")  # fmt: skip
    assert ok.exit_code == 0, ok.output
    published = json.loads(ok.stdout)["run_id"]
    bad = wap("run-tables", f"shop.orders={orders(landing, 'o2.parquet', [3])}",
              f"shop.lines={lines(landing, 'l2.parquet', [3, 9])}", "--json")  # fmt: skip
    assert bad.exit_code == 1, bad.output  # order 9 is nowhere: blocked
    blocked = json.loads(bad.stdout)["run_id"]
    model = wap("run-models", "--json")
    assert model.exit_code not in (0, 1), model.output
    failed = json.loads(model.stdout)["run_id"]

    # wap runs: one entry per run, newest first, each group's tables right after it.
    r = wap("runs", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [g["group_id"] for g in doc["groups"]] == [failed, blocked, published]
    assert [g["status"] for g in doc["groups"]] == ["failed", "blocked", "published"]
    assert [x["run_id"] for x in doc["runs"]] == [
        f"{failed}-1", f"{blocked}-1", f"{blocked}-2", f"{published}-1", f"{published}-2"
    ]  # fmt: skip
    g_blocked = doc["groups"][1]
    assert g_blocked["tables"] == ["shop.orders", "shop.lines"] and g_blocked["blocked_by"] == ["shop.lines"]
    assert g_blocked["reason"].startswith("blocked by shop.lines: foreign_key") and g_blocked["source"] == "files"
    assert doc["groups"][0]["source"] == "dataframes" and doc["groups"][0]["tables"] == ["shop.order_totals"]
    took = [g["seconds"] for g in doc["groups"]]
    assert None not in took and took[1] > 0 and took[2] > 0, took  # a model failing at analysis takes ~0 s

    text = wap("runs").stdout
    order = [text.index(w) for w in (failed, blocked, f"├ {blocked}-1", f"└ {blocked}-2", published)]
    assert order == sorted(order), text

    # wap runs --table: the table's own runs, each with its group.
    own = json.loads(wap("runs", "--table", "shop.lines", "--json").stdout)
    assert [(x["run_id"], x["group_id"]) for x in own["runs"]] == [(f"{blocked}-2", blocked),
                                                                   (f"{published}-2", published)]  # fmt: skip

    # wap report of the published group: each table's snapshot is the one main holds.
    rep = json.loads(wap("report", published, "--json").stdout)
    assert rep["status"] == "published" and rep["blocked_by"] == [] and rep["rows_written"] == 5
    assert [(m["table"], m["snapshot_id"]) for m in rep["members"]] == [
        ("shop.orders", main_head(cfg, "shop.orders")), ("shop.lines", main_head(cfg, "shop.lines"))
    ]  # fmt: skip
    # Each table's steps up to its audit; the one commit of every table is in the group's whole time.
    assert all(set(m["timings"]) >= {"prepare", "write", "audit"} for m in rep["members"]), rep["members"]

    # ... of the blocked one: shop.lines' foreign key stopped it, shop.orders passed and was held back.
    rep = json.loads(wap("report", blocked, "--json").stdout)
    assert rep["status"] == "blocked" and rep["blocked_by"] == ["shop.lines"] and rep["branch_kept"]
    statuses = {m["table"]: [(c["check"], c["status"]) for c in m["checks"]] for m in rep["members"]}
    assert ("foreign_key", "failed") in statuses["shop.lines"] and ("not_null", "passed") in statuses["shop.orders"]
    shown = wap("report", blocked)
    assert shown.exit_code == 0 and f"BLOCKED multi-table run {blocked}: 2 tables from files" in shown.stdout
    assert "foreign_key(order_id -> shop.orders.order_id): 1 failing row(s)" in shown.stdout

    # ... of the failed models run: the model named, with the line of its SQL.
    rep = json.loads(wap("report", failed, "--json").stdout)
    assert rep["status"] == "failed" and rep["blocked_by"] == ["shop.order_totals"]
    message = rep["error"]["message"]
    assert message.startswith("model shop.order_totals") and "totl" in message and "line 2" in message, message

    # A table's own report names its group.
    member = wap("report", f"{blocked}-2")
    assert member.exit_code == 0 and f"part of multi-table run {blocked}" in member.stdout
    assert json.loads(wap("report", f"{blocked}-2", "--json").stdout)["group_id"] == blocked

    # The published group's files given again: refused, exit 2, naming the run; --again publishes them.
    o1, l1 = landing / "o1.parquet", landing / "l1.parquet"
    twice = wap("run-tables", f"shop.orders={o1}", f"shop.lines={l1}")
    assert twice.exit_code == 2 and f"by run {published}-1" in twice.output, twice.output
    assert "--again" in twice.output
    forced = wap("run-tables", f"shop.orders={o1}", f"shop.lines={l1}", "--again", "--json")
    assert forced.exit_code == 0 and json.loads(forced.stdout)["status"] == "published", forced.output
