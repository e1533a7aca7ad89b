"""What a warm process skips on its second small run (issue 24's warm path), checked for what it must still be:
a plan compiled once serves the next batch of the same columns only, a catalog is registered again only when its
settings differ, the table's schema read from the catalog is the one Spark reads, and a batch already shaped like
its table goes through the schema contract untouched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from support.data import make_config, write_parquet
from wapflow.audit.checks import AuditPlan
from wapflow.config import TableConfig
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.session import register_catalog
from wapflow.sql.identifiers import TableName
from wapflow.writing.schema import apply_contract

pytestmark = pytest.mark.spark


def _checks(*specs: dict[str, Any]) -> list[Any]:
    return TableConfig.model_validate({"checks": list(specs)}).checks


def test_a_plan_is_compiled_once_per_checks_and_columns(spark: Any) -> None:
    checks = _checks({"check": "not_null", "column": "id"}, {"check": "between", "column": "v", "min": 0, "max": 9})
    first = AuditPlan.for_batch(checks, ["id", "v"], table="w.plan")
    # The same checks (equal, not the same objects: each run builds its own) over the same columns: reused.
    again = AuditPlan.for_batch(_checks(*[c.model_dump() for c in checks]), ["id", "v"], table="w.plan")
    assert again is first
    assert first.observable(counted=True) is first.observable(counted=True)
    # Anything that changes the expressions compiles a new plan.
    assert AuditPlan.for_batch(checks, ["ID", "v"], table="w.plan") is not first  # another spelling of the column
    assert AuditPlan.for_batch(checks, ["id", "v", "x"], table="w.plan") is not first
    assert AuditPlan.for_batch(checks[:1], ["id", "v"], table="w.plan") is not first
    assert AuditPlan.for_batch(checks, ["id", "v"], table="w.other") is not first
    assert AuditPlan.for_batch(checks, ["id", "v"], table="w.plan", key=["id"]) is not first
    wider = _checks({"check": "not_null", "column": "id"}, {"check": "between", "column": "v", "min": 0, "max": 10})
    assert AuditPlan.for_batch(wider, ["id", "v"], table="w.plan") is not first


def test_a_catalog_is_registered_again_only_when_its_settings_differ(spark: Any, tmp_path: Path) -> None:
    a = make_config(tmp_path / "a")
    b = make_config(tmp_path / "b", catalog_name=a.lakehouse.catalog_name)  # another warehouse, the same name
    key = f"spark.sql.catalog.{a.lakehouse.catalog_name}.warehouse"
    register_catalog(spark, a)
    assert spark.conf.get(key).endswith("a/lakehouse")
    spark.conf.set(key, "marker")
    register_catalog(spark, a)  # the settings this process last sent: nothing sent again
    assert spark.conf.get(key) == "marker"
    register_catalog(spark, b)
    assert spark.conf.get(key).endswith("b/lakehouse")
    register_catalog(spark, a)  # b's since: a's are sent again
    assert spark.conf.get(key).endswith("a/lakehouse")


def test_the_schema_from_the_catalog_is_the_one_spark_reads(spark: Any, tmp_path: Path) -> None:
    lh = Lakehouse(make_config(tmp_path), spark=spark)
    cat = lh.catalog
    lh.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cat}.w")  # lh.spark: the catalog registered on the session
    spark.sql(
        f"CREATE TABLE {cat}.w.types (a int NOT NULL, b decimal(12,3), c timestamp, d timestamp_ntz, "
        "e struct<f: string, g: array<double>>, h map<string, bigint>, i binary, j date, "
        "k boolean COMMENT 'a comment', l float) USING iceberg"
    )
    t = TableName.parse("w.types")
    assert lh.tables.schema(t) == spark.table(lh.tables.ident(t)).schema
    assert lh.tables.schema(t).fields[0].nullable is False
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        lh.tables.schema(TableName.parse("w.missing"))


def test_a_batch_shaped_like_its_table_goes_through_the_contract_untouched(spark: Any, tmp_path: Path) -> None:
    f = write_parquet(tmp_path / "b.parquet", pa.table({"id": pa.array([1, 2], pa.int32()), "v": [0.5, 1.5]}))
    df = spark.read.parquet(str(f))
    same = apply_contract(df, df.schema, table="w.t")
    assert same.df is df and not same.new_columns and not same.dropped_extra
    # Another order, or another type, is shaped like the table by a projection, as before.
    reordered = spark.createDataFrame([], "v double, id int").schema
    shaped = apply_contract(df, reordered, table="w.t")
    assert shaped.df is not df and shaped.df.columns == ["v", "id"]
    widened = spark.createDataFrame([], "id bigint, v double").schema
    cast = apply_contract(df, widened, table="w.t")
    assert dict(cast.df.dtypes) == {"id": "bigint", "v": "double"}
    assert sorted(r["id"] for r in cast.df.collect()) == [1, 2]
