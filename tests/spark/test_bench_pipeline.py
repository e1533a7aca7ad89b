"""make bench-pipeline (benchmarks/bench_pipeline.py) at a tiny size, on the tests' shared session: both of
wapflow's ways (models, a transaction) publish the three tables (the benchmark aborts otherwise), each holding on
main what the plain job wrote (read by PyIceberg's SqlCatalog, not Spark), and the figures are made from what
was measured."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from wapflow.lakehouse.lakehouse import Lakehouse

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_pipeline import measure, pipeline, summarize

pytestmark = pytest.mark.spark
ROWS = 2000
# spark.range(2000): a tenth void, 20 more with amount < 1; 1,782 ids each of its own (day, category).
WANT = {"raw": ROWS, "silver": 1782, "gold": 1782}


def main_rows(lh: Lakehouse, table: str) -> int:
    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog(lh.catalog, uri=f"sqlite:///{lh.config.embedded_catalog_path()}", warehouse="file:///unused")
    return len(cat.load_table(table).scan().to_arrow())


def test_the_benchmark_measures_published_pipelines(lakehouse_factory: Any):
    both = [pipeline(1, "m"), pipeline(1, "t")]
    tables = both[0]["tables"] | both[1]["tables"]
    lh = lakehouse_factory(tables)
    cfg = lh.config.model_copy(
        update={"models": lh.config.model_validate({"models": both[0]["models"] | both[1]["models"]}).models}
    )
    lh = Lakehouse(cfg, spark=lh.spark)
    said: list[str] = []
    for style, tag in (("models", "m"), ("transaction", "t")):
        runs = measure(lh, ROWS, 1, style, tag=tag, warmup=False, say=said.append)
        for ns in (f"w{tag}1", f"p{tag}1"):
            assert {k: main_rows(lh, f"{ns}.{k}") for k in WANT} == WANT, (style, ns)
        s = summarize(ROWS, runs)
        assert s["ratio"] == pytest.approx(s["wapflow_s"] / s["plain_s"], rel=0.05)
        assert s["status"] == ("PASS" if s["ratio"] <= 1.15 else "MISS")
        # Every table's run was timed step by step: its write and audit at least.
        assert set(s["steps_mean_s"]) == {"raw", "silver", "gold"}
        assert all({"write", "audit"} <= set(st) for st in s["steps_mean_s"].values()), s["steps_mean_s"]
    assert len(said) == 2 and all(line.startswith("rep 1/1 (2,000 rows") for line in said)
