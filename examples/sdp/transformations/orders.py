"""shop.orders: a materialized view from a small inline dataset, with a check next to it (wapflow.expect)."""

from pyspark import pipelines as dp
from pyspark.sql import SparkSession

import wapflow

spark = SparkSession.active()

# Rows as SQL text: a query function may build a DataFrame, never analyse or run one (SDP refuses
# spark.createDataFrame of local rows there, and collect(), count(), ...).
ORDERS = """
SELECT id, to_date(day) AS day, customer, amount FROM VALUES
  (1, '2026-12-01', 'ann', 12.50D),
  (2, '2026-12-01', 'bob', 30.00D),
  (3, '2026-12-02', 'ann', 7.25D),
  (4, '2026-12-02', 'cid', 18.00D),
  (5, '2026-12-03', 'bob', 42.10D)
AS t(id, day, customer, amount)
"""


@dp.materialized_view
@wapflow.expect("positive_amount", "amount > 0")  # below @dp.materialized_view, right above the function
def orders():
    return spark.sql(ORDERS)
