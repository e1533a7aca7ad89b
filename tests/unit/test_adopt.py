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

from wapflow.pipeline.steps.adopt import Adoptable, files_fit, sorted_table
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


def columns_differ(meta: dict[str, Any], files: list[Any], storage: Storage, columns: list[str]) -> str | None:
    """files_fit's reason, None when the files are adoptable into an unpartitioned table."""
    got = files_fit(meta, files, storage, columns)
    if isinstance(got, Adoptable):
        assert got == Adoptable(0, [[] for _ in files])
        return None
    return got


def test_the_tables_own_columns_are_adopted(tmp_path):
    assert columns_differ(_meta(), [_file(tmp_path, GOOD)], Storage(), ["id", "name", "at"]) is None


def test_a_narrower_type_iceberg_promotes_on_read_is_adopted(tmp_path):
    """An int column for the table's long (or a float for a double): Iceberg's readers widen it."""
    narrow = _file(tmp_path, GOOD.set(0, pa.field("id", pa.int32())))
    assert columns_differ(_meta(), [narrow], Storage(), ["id", "name", "at"]) is None


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        (GOOD.set(0, pa.field("id", pa.float64())), "column 'id' of f.parquet is double, the table's is long"),
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


def test_a_sorted_table_does_not_adopt():
    assert not sorted_table(_meta())
    assert sorted_table(_meta(**{"sort-orders": [{"order-id": 0, "fields": [{"source-id": 1}]}]}))


def _partitioned(transform: str, column: str) -> dict[str, Any]:
    source = {"id": 1, "name": 2, "at": 3}[column]
    field = {"source-id": source, "field-id": 1000, "transform": transform, "name": f"{column}_p"}
    return _meta(**{"default-spec-id": 1, "partition-specs": [{"spec-id": 1, "fields": [field]}]})


DAY_US = 86_400 * 10**6
LONG = "a value longer than sixteen characters"


@pytest.mark.parametrize(
    ("transform", "column", "rows", "expected"),
    [
        ("month", "at", {"at": [0, 3 * DAY_US]}, "0"),
        ("day", "at", {"at": [DAY_US + 1, 2 * DAY_US - 1]}, "1970-01-02"),
        ("hour", "at", {"at": [DAY_US, DAY_US + 10]}, "24"),
        ("year", "at", {"at": [None, None]}, None),
        ("identity", "name", {"name": [LONG, LONG]}, LONG),
        ("identity", "id", {"id": [7, 7]}, "7"),
        ("truncate[2]", "name", {"name": ["abx", "aby"]}, "ab"),
        ("truncate[10]", "id", {"id": [20, 29]}, "20"),
    ],
)
def test_a_file_of_one_partition_is_adopted_with_its_partition(tmp_path, transform, column, rows, expected):
    table = {"id": [1, 2], "name": ["a", "b"], "at": [0, 1], **rows}
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({f.name: pa.array(table[f.name], f.type) for f in GOOD}, schema=GOOD), path)
    got = files_fit(_partitioned(transform, column), [local_identity(path)], Storage(), ["id", "name", "at"])
    assert got == Adoptable(1, [[expected]]), got


@pytest.mark.parametrize(
    ("transform", "column", "rows", "reason"),
    [
        ("day", "at", {"at": [0, DAY_US]}, "its rows are in several partitions"),
        ("identity", "name", {"name": [LONG, LONG + "!"]}, "its rows are in several partitions"),
        ("identity", "id", {"id": [7, None]}, "column 'id' has nulls and values: rows of several partitions"),
        ("bucket[4]", "id", {"id": [7, 7]}, "partitioned by bucket[4](id), whose values a file's bounds do not give"),
        ("identity", "at", {"at": [5, 5]}, "partitioned by a timestamp value, which adoption does not carry"),
        (
            "identity",
            "name",
            {"name": ["__HIVE_DEFAULT_PARTITION__"] * 2},
            "partitioned by a string value, which adoption does not carry",
        ),
    ],
)
def test_a_file_not_known_to_be_one_partition_is_rewritten_with_the_reason(tmp_path, transform, column, rows, reason):
    table = {"id": [1, 2], "name": ["a", "b"], "at": [0, 1], **rows}
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({f.name: pa.array(table[f.name], f.type) for f in GOOD}, schema=GOOD), path)
    got = files_fit(_partitioned(transform, column), [local_identity(path)], Storage(), ["id", "name", "at"])
    assert got == f"p.parquet: {reason}", got


def test_a_promoted_partition_column_gives_its_partition(tmp_path):
    """An int32 file column of the table's long identity partition: its bounds read as the table's type."""
    schema = GOOD.set(0, pa.field("id", pa.int32()))
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"id": [7, 7], "name": ["a", "b"], "at": [0, 1]}, schema=schema), path)
    got = files_fit(_partitioned("identity", "id"), [local_identity(path)], Storage(), ["id", "name", "at"])
    assert got == Adoptable(1, [["7"]]), got


def test_a_commit_whose_outcome_is_unknown_keeps_its_copies_either_way():
    """Java's unknown outcome (through Spark) and PyIceberg's (Spark Connect) alike: the copies may be referenced."""
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

    from wapflow.pipeline.steps.adopt import _outcome_unknown

    assert _outcome_unknown(CommitStateUnknownException("timed out"))
    assert not _outcome_unknown(CommitFailedException("conflict"))
