"""A small Spark Declarative Pipelines project for tests: orders (a Python materialized view, with a check in the
code), big_orders (SQL, over a temporary view of orders), in namespace `sales`."""

from __future__ import annotations

import textwrap
from pathlib import Path

ORDERS_PY = """
from pyspark import pipelines as dp
from pyspark.sql import SparkSession

import wapflow

spark = SparkSession.active()


@dp.materialized_view
@wapflow.expect("positive_amount", "amount >= 0")
def orders():
    n = int(spark.conf.get("demo.rows"))
    shift = int(spark.conf.get("demo.shift"))
    return spark.range(n).selectExpr("id", f"(id - {shift}) * 10 AS amount")
"""
BIG_SQL = """CREATE TEMPORARY VIEW big AS SELECT * FROM orders WHERE amount >= 100;
CREATE MATERIALIZED VIEW big_orders AS SELECT id, amount FROM big;
"""
TABLES = {
    "sales.orders": {"checks": [{"check": "not_null", "column": "id"}]},
    "sales.big_orders": {"checks": [{"check": "row_count", "min": 1}]},
}


def project(root: Path, *, rows: int = 20, shift: int = 0, extra_sql: str = "") -> Path:
    """The project's files under `root` (rewritten each call: `rows` orders, the first `shift` of them negative);
    its spec's path."""
    (root / "transformations").mkdir(parents=True, exist_ok=True)
    (root / "transformations" / "orders.py").write_text(ORDERS_PY)
    (root / "transformations" / "big.sql").write_text(BIG_SQL + extra_sql)
    spec = root / "spark-pipeline.yml"
    spec.write_text(
        textwrap.dedent(
            f"""\
            name: shop
            storage: storage
            database: sales
            configuration:
              demo.rows: "{rows}"
              demo.shift: "{shift}"
            libraries:
              - glob:
                  include: transformations/**
            """
        )
    )
    return spec
