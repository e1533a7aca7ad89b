"""The Python model of examples/pipeline/wap.toml: trips and fares per vendor, over all of silver."""

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def by_vendor(spark: SparkSession, inputs: dict[str, DataFrame]) -> DataFrame:
    """inputs: each table in depends_on as the run sees it (silver.trips staged by this run)."""
    silver = inputs["silver.trips"]
    return silver.groupBy("vendor_id").agg(F.count("*").alias("trips"), F.sum("fare_amount").alias("fare"))
