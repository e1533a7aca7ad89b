"""A PySpark job through WAP: landed trips into raw, cleaned into silver and totalled per day into gold.

python examples/dataframe_job.py wap.toml landing/trips/2026-11-22.parquet [RUN_ID]

raw.trips is written with wapflow.write: like `df.writeTo("raw.trips").append()`, but to a branch, audited, and
published only if its checks pass. silver.trips and gold.daily are one transaction: both written to a branch
(gold's SQL reads silver as staged), both audited, then published in one commit, or neither. Exit 0 when all
is published, 1 when checks blocked it (main unchanged). Given RUN_ID, running it again (after a crash, say)
publishes nothing twice. The checks are declared here; wap.toml needs only its [lakehouse].
"""

import sys

import wapflow

TABLES = {
    "raw.trips": {"checks": [{"check": "not_null", "column": "passenger_count"}]},
    "silver.trips": {"checks": [{"check": "unique", "columns": ["trip_id"]}]},
    "gold.daily": {"checks": [{"check": "not_null", "column": "day"}], "mode": "merge", "key": ["day"]},
}
DAILY = "SELECT to_date(pickup_at) AS day, count(*) AS trips, sum(fare_amount) AS fare FROM silver.trips GROUP BY 1"


def main(config: str, path: str, run_id: str | None = None) -> int:
    lh = wapflow.connect(config, tables=TABLES)
    raw = lh.spark.read.parquet(path)
    res = wapflow.write(lh, "raw.trips", raw, run_id=run_id and f"{run_id}-raw")
    print(f"raw.trips {res.status} {res.run_id}: {res.message}")
    if res.status != "published":
        return res.exit_code
    with wapflow.transaction(lh, name="trips", run_id=run_id) as tx:
        tx.write("silver.trips", raw.where("fare_amount > 0 AND trip_distance > 0"))
        tx.write("gold.daily", tx.sql(DAILY))  # every day silver holds, this batch's rows included
    assert tx.result is not None
    print(f"silver.trips, gold.daily {tx.result.status} {tx.result.run_id}: {tx.result.message}")
    return tx.result.exit_code


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
