"""make bench-groups (benchmarks/bench_groups.py) at a tiny size, on the tests' shared session: its one-table run,
its group and its separate runs each publish (the benchmark aborts otherwise), every table's main holds the rows
of every run made into it (read by PyIceberg's SqlCatalog, not Spark), and its table of figures and verdict are
made from what was measured."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from wapflow.lakehouse.lakehouse import Lakehouse

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_groups import ROWS, SINGLE, Batches, figures, measure, table_names, tables_config, verdicts

pytestmark = pytest.mark.spark


def main_rows(lh: Lakehouse, table: str) -> int:
    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog(lh.catalog, uri=f"sqlite:///{lh.config.embedded_catalog_path()}", warehouse="file:///unused")
    return len(cat.load_table(table).scan().to_arrow())


def test_the_benchmark_measures_published_runs(lakehouse_factory: Any, tmp_path: Path):
    lh = lakehouse_factory(tables_config(3))
    said: list[str] = []
    got = measure(lh, Batches(tmp_path / "batches"), [2, 3], reps=1, say=said.append)
    # Warm-up: the one table twice, each group once; then one rep of every variant.
    assert main_rows(lh, SINGLE) == 3 * ROWS
    assert [main_rows(lh, t) for t in table_names(3)] == [6 * ROWS, 6 * ROWS, 3 * ROWS]  # in 2 groups or 1
    assert set(got["medians"]) == {"one", "group2", "separate2", "group3", "separate3"}
    assert all(m["publish"] > 0 and m["total"] >= m["publish"] for m in got["medians"].values())
    assert len(said) == 2 and said[-1].startswith("  rep 1/1:")
    rows = figures("sqlite", got, [2, 3])
    assert [r["tables"] for r in rows] == [1, 2, 3] and rows[0]["publish_ratio"] == 1.0
    assert rows[1]["run_ratio"] == got["medians"]["group2"]["total"] / got["medians"]["separate2"]["total"]
    assert verdicts(rows) == []  # the target is a group of 10
    ten = [{**rows[1], "tables": 10, "publish_ratio": 1.4}, {**rows[1], "tables": 10, "publish_ratio": 1.6}]
    assert [v["status"] for v in verdicts(ten)] == ["PASS", "MISS"]
