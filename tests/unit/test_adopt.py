"""Which landed parquet files wapflow.pipeline.steps.adopt takes as they are, decided from their footers and the
table's Iceberg metadata alone (no JVM): exactly the table's columns, or a reason to rewrite them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType, StructType, TimestampType

from wapflow.pipeline.steps.adopt import columns_differ, unpartitioned_unsorted
from wapflow.storage import Storage
from wapflow.storage.files import local_identity

TABLE = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "at", TimestampType(), required=False),
)
ROWS = {"id": [1, 2], "name": ["a", "b"], "nom": ["a", "b"], "at": [0, 1]}


def _meta(schema: Schema = TABLE, **extra: Any) -> dict[str, Any]:
    return {
        "current-schema-id": 0,
        "schemas": [{**schema.model_dump(by_alias=True), "schema-id": 0}],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        **extra,
    }


def _file(tmp_path: Path, schema: pa.Schema, name: str = "f.parquet") -> Any:
    path = tmp_path / name
    pq.write_table(pa.table({f.name: pa.array(ROWS[f.name], f.type) for f in schema}, schema=schema), path)
    return local_identity(path)


GOOD = pa.schema([("id", pa.int64()), ("name", pa.string()), ("at", pa.timestamp("us"))])


def test_the_tables_own_columns_are_adopted(tmp_path):
    assert columns_differ(_meta(), [_file(tmp_path, GOOD)], Storage(), ["id", "name", "at"]) is None


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        (GOOD.set(0, pa.field("id", pa.int32())), "column 'id' of f.parquet is int, the table's is long"),
        (GOOD.set(2, pa.field("at", pa.timestamp("us", tz="UTC"))), "column 'at' of f.parquet is timestamptz"),
        (GOOD.set(1, pa.field("nom", pa.string())), "f.parquet's columns are not the table's"),
        (GOOD.remove(1), "f.parquet's columns are not the table's"),
        (GOOD.set(2, pa.field("at", pa.timestamp("ns"))), "f.parquet has a type Iceberg does not map"),
        (
            GOOD.set(0, pa.field("id", pa.int64(), metadata={b"PARQUET:field_id": b"7"})),
            "f.parquet carries Iceberg field ids of its own",
        ),
    ],
)
def test_a_file_not_exactly_the_tables_is_rewritten_with_the_reason(tmp_path, schema, reason):
    got = columns_differ(_meta(), [_file(tmp_path, schema)], Storage(), ["id", "name", "at"])
    assert got is not None and got.startswith(reason), got


def test_a_required_table_column_is_adopted_only_from_a_required_file_column(tmp_path):
    required = Schema(*(NestedField(f.field_id, f.name, f.field_type, required=f.name == "id") for f in TABLE.fields))
    optional = _file(tmp_path, GOOD, "optional.parquet")
    not_null = _file(tmp_path, GOOD.set(0, pa.field("id", pa.int64(), nullable=False)), "required.parquet")
    cols = ["id", "name", "at"]
    assert columns_differ(_meta(required), [optional], Storage(), cols) == (
        "column 'id' is required in the table and optional in optional.parquet"
    )
    assert columns_differ(_meta(required), [not_null], Storage(), cols) is None


def test_the_batch_in_another_column_order_or_a_nested_column_is_rewritten(tmp_path):
    assert columns_differ(_meta(), [_file(tmp_path, GOOD)], Storage(), ["name", "id", "at"]) == (
        "the batch's columns are not the table's, in its order"
    )
    nested = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "point", StructType(NestedField(3, "x", LongType(), required=False)), required=False),
    )
    path = tmp_path / "nested.parquet"
    pq.write_table(pa.table({"id": [1], "point": [{"x": 1}]}), path)
    got = columns_differ(_meta(nested), [local_identity(path)], Storage(), ["id", "point"])
    assert got is not None and got.startswith("column 'point' of nested.parquet is struct"), got


def test_only_an_unpartitioned_unsorted_table_adopts():
    assert unpartitioned_unsorted(_meta())
    partitioned = _meta(**{"partition-specs": [{"spec-id": 0, "fields": [{"source-id": 1, "name": "id"}]}]})
    sorted_ = _meta(**{"sort-orders": [{"order-id": 0, "fields": [{"source-id": 1}]}]})
    assert not unpartitioned_unsorted(partitioned) and not unpartitioned_unsorted(sorted_)
