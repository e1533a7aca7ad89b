"""shop.orders: a materialized view from a small inline dataset, with a check next to it (wapflow.expect)."""

from pyspark import pipelines as dp
from pyspark.sql import SparkSession

import wapflow

spark = SparkSession.active()

ORDERS = [
    (1, "2026-12-01", "ann", 12.50),
    (2, "2026-12-01", "bob", 30.00),
    (3, "2026-12-02", "ann", 7.25),
    (4, "2026-12-02", "cid", 18.00),
    (5, "2026-12-03", "bob", 42.10),
]


@dp.materialized_view
@wapflow.expect("positive_amount", "amount > 0")  # below @dp.materialized_view, right above the function
def orders():
    return spark.createDataFrame(ORDERS, "id INT, day STRING, customer STRING, amount DOUBLE").selectExpr(
        "id", "to_date(day) AS day", "customer", "amount"
    )
