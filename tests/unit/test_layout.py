"""partition_by / sort_by parsed and checked without Spark: canonical spellings, DDL quoting, errors that name
the table, the key and the entry, types checked against the batch's columns, and evolution planned as a diff."""

from __future__ import annotations

import pytest

from wapflow.config import parse_config
from wapflow.errors import EXIT_USAGE, ConfigError
from wapflow.lakehouse.layout import Current, distribution_for, keyed, plan
from wapflow.sql.layout import (
    Layout,
    PartitionField,
    SortField,
    check_types,
    layout_of,
    parse_partition_field,
    parse_sort_field,
    split_top_level,
    type_kind,
)


def _table(**keys: object) -> dict[str, object]:
    return {"tables": {"nyc.trips": keys}}


@pytest.mark.parametrize(
    ("text", "field", "canonical", "sql"),
    [
        ("region", PartitionField("identity", "region"), "region", "`region`"),
        ("identity(region)", PartitionField("identity", "region"), "region", "`region`"),
        ("day(ts)", PartitionField("day", "ts"), "day(ts)", "days(`ts`)"),
        ("days(ts)", PartitionField("day", "ts"), "day(ts)", "days(`ts`)"),
        ("  DAYS( ts ) ", PartitionField("day", "ts"), "day(ts)", "days(`ts`)"),
        ("year(ts)", PartitionField("year", "ts"), "year(ts)", "years(`ts`)"),
        ("months(ts)", PartitionField("month", "ts"), "month(ts)", "months(`ts`)"),
        ("hour(ts)", PartitionField("hour", "ts"), "hour(ts)", "hours(`ts`)"),
        ("bucket(16, id)", PartitionField("bucket", "id", 16), "bucket(16, id)", "bucket(16, `id`)"),
        ("truncate(4,name)", PartitionField("truncate", "name", 4), "truncate(4, name)", "truncate(4, `name`)"),
        ("`ts_day`", PartitionField("identity", "ts_day"), "ts_day", "`ts_day`"),
    ],
)
def test_partition_fields_parse_to_one_canonical_form(text, field, canonical, sql):
    parsed = parse_partition_field(text)
    assert parsed == field and parsed.text() == canonical and parsed.sql() == sql


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("ts", SortField("ts", False, True)),
        ("id DESC", SortField("id", True, False)),
        ("id desc nulls first", SortField("id", True, True)),
        ("name ASC NULLS LAST", SortField("name", False, False)),
        ("  x   asc ", SortField("x", False, True)),
    ],
)
def test_sort_fields_default_null_order_follows_direction(text, field):
    assert parse_sort_field(text) == field
    assert parse_sort_field(field.text()) == field  # its own text reads back the same


def test_config_keeps_canonical_spellings_and_typed_layout():
    cfg = parse_config(_table(partition_by=["days(ts)", "bucket(16, trip_id)"], sort_by=["ts", "trip_id desc"]))
    t = cfg.tables["nyc.trips"]
    assert t.partition_by == ["day(ts)", "bucket(16, trip_id)"]
    assert t.sort_by == ["ts ASC NULLS FIRST", "trip_id DESC NULLS LAST"]
    assert t.layout() == Layout(
        (PartitionField("day", "ts"), PartitionField("bucket", "trip_id", 16)),
        (SortField("ts"), SortField("trip_id", True, False)),
    )
    assert t.layout().columns() == ["ts", "trip_id"]
    assert parse_config(_table()).tables["nyc.trips"].layout() == Layout(None, None)
    assert not Layout().declared and Layout((), None).declared


@pytest.mark.parametrize(
    ("keys", "words"),
    [
        ({"partition_by": ["dya(ts)"]}, ["partition_by", "unknown partition transform 'dya'", "did you mean 'day'"]),
        ({"partition_by": ["bucket(id)"]}, ["bucket takes a number and a column"]),
        ({"partition_by": ["bucket(0, id)"]}, ["positive whole number"]),
        ({"partition_by": ["truncate(x, id)"]}, ["positive whole number N, not 'x'"]),
        ({"partition_by": ["day(ts, id)"]}, ["day takes one column"]),
        ({"partition_by": ["day(ts"]}, ["is not a partition transform"]),
        ({"partition_by": ["day(ts)", "hour(ts)"]}, ["two time units"]),
        ({"partition_by": ["region", "identity(region)"]}, ["listed twice"]),
        ({"partition_by": ["a.b"]}, ["column 'a.b' is not a column name", "top-level"]),
        ({"partition_by": ["day(`x; DROP`)"]}, ["is not a column name"]),
        ({"partition_by": [""]}, ["is not a partition transform"]),
        ({"sort_by": ["ts upward"]}, ["sort_by", "'ts upward' is not a sort column"]),
        ({"sort_by": ["day(ts)"]}, ["takes columns, not transforms"]),
        ({"sort_by": ["a", "A DESC"]}, ["sorted on twice"]),
    ],
)
def test_bad_layout_is_a_config_error_naming_table_key_and_entry(keys, words):
    with pytest.raises(ConfigError) as e:
        parse_config(_table(**keys), source="wap.toml")
    msg = str(e.value)
    assert e.value.exit_code == EXIT_USAGE
    assert '[tables."nyc.trips"]' in msg and e.value.hint
    for w in words:
        assert w in msg, (w, msg)


def test_wrong_value_types_are_refused_by_the_model():
    with pytest.raises(ConfigError, match="partition_by"):
        parse_config(_table(partition_by="day(ts)"))


COLUMNS = {
    "id": "bigint",
    "ts": "timestamp",
    "d": "date",
    "name": "string",
    "code": "varchar(8)",
    "price": "decimal(10,2)",
    "ratio": "double",
    "flag": "boolean",
    "info": "struct<a:int>",
    "tags": "array<string>",
}


@pytest.mark.parametrize(
    "spec",
    ["day(ts)", "day(d)", "year(d)", "hour(ts)", "bucket(8, id)", "bucket(8, name)", "bucket(4, price)",
     "truncate(3, code)", "truncate(10, id)", "ratio", "flag", "name"],
)  # fmt: skip
def test_transforms_that_fit_their_column(spec):
    layout = layout_of([spec], None)
    assert check_types(layout, COLUMNS, table="nyc.trips") == layout


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("day(name)", ["column name is string", "a date or timestamp column"]),
        ("hour(d)", ["column d is date", "a timestamp column"]),
        ("bucket(8, ratio)", ["column ratio is double"]),
        ("bucket(8, flag)", ["column flag is boolean"]),
        ("truncate(2, ts)", ["column ts is timestamp"]),
        ("info", ["column info is struct<a:int>", "primitive"]),
        ("bucket(8, tags)", ["array<string>"]),
        ("day(tss)", ["no column 'tss' in the batch", "did you mean 'ts'"]),
    ],
)
def test_transforms_that_do_not_fit_are_config_errors(spec, words):
    with pytest.raises(ConfigError) as e:
        check_types(layout_of([spec], None), COLUMNS, table="nyc.trips")
    assert e.value.exit_code == EXIT_USAGE and '[tables."nyc.trips"]' in e.value.message
    for w in words:
        assert w in e.value.message, (w, e.value.message)


def test_every_problem_is_named_at_once_and_names_follow_the_batch():
    with pytest.raises(ConfigError) as e:
        check_types(layout_of(["day(name)", "nope"], ["info"]), COLUMNS, table="t.x")
    for named in ("'day(name)'", "no column 'nope'", "column info is struct"):  # three problems, one error
        assert named in e.value.message
    resolved = check_types(layout_of(["DAY(TS)"], ["ID desc"]), COLUMNS, table="t.x")
    assert resolved.columns() == ["ts", "id"]


def test_type_kinds_from_spark_names():
    assert [type_kind(t) for t in ("decimal(10,2)", "varchar(3)", "char(2)", "struct<a:int>", "timestamp_ntz")] == [
        "decimal", "string", "string", "struct", "timestamp_ntz"
    ]  # fmt: skip
    assert split_top_level("bucket(16, id) ASC NULLS FIRST, ts DESC NULLS LAST") == [
        "bucket(16, id) ASC NULLS FIRST",
        "ts DESC NULLS LAST",
    ]


IDENT = "`c`.`ns`.`t`"


def test_plan_is_a_diff_and_empty_when_the_table_matches():
    want = layout_of(["day(ts)", "bucket(4, id)"], ["ts"])
    cur = Current((PartitionField("day", "ts"), PartitionField("bucket", "id", 4)), (SortField("ts"),), "range")
    assert plan(cur, want, IDENT) == []
    # Column names compare as Spark's do; unset keys leave the table's own layout alone.
    assert plan(Current((PartitionField("day", "TS"),), (), "hash"), layout_of(["day(ts)"], None), IDENT) == []
    assert plan(cur, Layout(None, None), IDENT) == []


def test_plan_drops_before_it_adds_then_orders_then_distributes():
    cur = Current((PartitionField("day", "ts"), PartitionField("identity", "region")), (), None)
    steps = plan(cur, layout_of(["hour(ts)", "region"], None), IDENT)
    assert steps == [
        (f"ALTER TABLE {IDENT} DROP PARTITION FIELD days(`ts`)", "partition field day(ts) dropped"),
        (f"ALTER TABLE {IDENT} ADD PARTITION FIELD hours(`ts`)", "partition field hour(ts) added"),
        (
            f"ALTER TABLE {IDENT} SET TBLPROPERTIES ('write.distribution-mode' = 'hash')",
            "write.distribution-mode set to hash",
        ),
    ]
    ordered = plan(Current((), (), None), layout_of([], ["id DESC"]), IDENT)
    assert ordered == [
        (f"ALTER TABLE {IDENT} WRITE ORDERED BY `id` DESC NULLS LAST", "sort order set to id DESC NULLS LAST")
    ]
    unordered = plan(Current((), (SortField("id"),), "range"), layout_of(None, []), IDENT)
    assert unordered == [(f"ALTER TABLE {IDENT} WRITE UNORDERED", "sort order removed")]


def test_a_layout_wap_toml_cannot_express_is_left_alone_unless_declared():
    cur = Current((), (), "range", foreign_partitions=("weird(x)",), foreign_sort="bucket(4, id) ASC NULLS FIRST")
    assert plan(cur, layout_of(None, None), IDENT) == []
    with pytest.raises(ConfigError, match="cannot evolve"):
        plan(cur, layout_of(["day(ts)"], None), IDENT)
    assert plan(cur, layout_of(None, ["id"]), IDENT) == [
        (f"ALTER TABLE {IDENT} WRITE ORDERED BY `id` ASC NULLS FIRST", "sort order set to id ASC NULLS FIRST")
    ]


def test_distribution_follows_the_layout():
    assert distribution_for(True, False) == "hash"
    assert distribution_for(True, True) == distribution_for(False, True) == "range"
    assert distribution_for(False, False) is None


@pytest.mark.parametrize(
    ("partition_by", "key", "expected"),
    [
        (["bucket(8, id)"], ["id"], True),
        (["bucket(8, ID)"], ["id"], True),  # Iceberg's names are case-insensitive here
        (["bucket(8, id)", "region"], ["id", "region"], True),
        (["truncate(4, id)"], ["id"], True),
        (["bucket(8, id)", "day(ts)"], ["id"], False),  # one key's rows over many days
        (["region"], ["id"], False),
        ([], ["id"], False),  # unpartitioned: nothing to join where it lies
        (["day(id_day)"], ["id_day"], False),  # a time transform: not what a storage-partitioned join groups by
    ],
)
def test_a_merge_uses_the_tables_partitions_as_they_lie_only_where_they_are_a_function_of_the_key(
    partition_by: list[str], key: list[str], expected: bool
) -> None:
    cur = Current(tuple(f for p in partition_by if (f := parse_partition_field(p)) is not None), (), None)
    assert keyed(cur, key) is expected
