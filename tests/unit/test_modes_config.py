"""Write modes without Spark: the wap.toml keys each mode needs, max_change's parameters and verdict, and the
change read from commit summaries."""

from __future__ import annotations

from typing import Any

import pytest

from wapflow import checks as C
from wapflow.audit.checktype import AuditContext
from wapflow.config import TableConfig, parse_config
from wapflow.errors import ConfigError
from wapflow.writing.modes import Changes, write_mode

T = "crm.customers"


def table(**kw: Any) -> TableConfig:
    return parse_config({"tables": {T: kw}}).tables[T]


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        ({"mode": "merge"}, 'mode = "merge" needs key = [...]'),
        ({"mode": "upsert"}, "'append', 'merge' or 'replace'"),
        ({"delete_when": "op = 'D'"}, 'delete_when and order_by need mode = "merge"'),
        ({"mode": "replace", "order_by": ["seq"]}, 'delete_when and order_by need mode = "merge"'),
        ({"mode": "merge", "key": ["id"], "replace_where": "day = 1"}, 'replace_where needs mode = "replace"'),
        ({"mode": "replace", "on_row_failure": "quarantine"}, 'on_row_failure = "quarantine" yet'),
        ({"mode": "replace", "schema": "add_columns"}, 'schema = "add_columns": the new columns would change main'),
        (
            {"mode": "merge", "key": ["id"], "schema": "add_columns"},
            'mode = "merge" cannot be combined with schema = "add_columns": the new columns would change main\'s '
            "schema before the audit; add them to the table first",
        ),
        ({"mode": "merge", "key": ["id"], "delete_when": "op = 'D'; DELETE FROM t"}, "second statement"),
        ({"mode": "replace", "replace_where": "(SELECT 1 FROM parquet.`/x`) = 1"}, "replace_where"),
    ],
)
def test_a_mode_without_what_it_needs_is_a_config_error(keys: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as e:
        table(**keys)
    assert says in str(e.value) and e.value.exit_code == 2
    assert f'[tables."{T}"]' in str(e.value)


def test_merge_and_replace_are_accepted_on_nessie() -> None:
    """Nessie branches hold a merge or replace like table branches do (tests/spark/test_nessie.py runs them)."""
    cfg = parse_config({"lakehouse": {"catalog": "nessie"}, "tables": {T: {"mode": "merge", "key": ["id"]}}})
    assert cfg.tables[T].mode == "merge"
    assert parse_config({"lakehouse": {"catalog": "nessie"}, "tables": {T: {}}}).tables[T].mode == "append"


def test_the_default_is_append_and_merge_keeps_its_keys() -> None:
    assert table().mode == "append" and write_mode(table()).reapplies is False
    cfg = table(mode="merge", key=["id"], delete_when="op = 'D'", order_by=["seq"])
    mode = write_mode(cfg)
    assert (mode.name, mode.reapplies, cfg.sample_key()) == ("merge", True, ["id"])


def test_merge_changes_come_from_the_merge_summary() -> None:
    summary = {
        "added-records": "40",
        "deleted-records": "38",
        "spark.merge-into.num-target-rows-inserted": "3",
        "spark.merge-into.num-target-rows-matched-updated": "5",
        "spark.merge-into.num-target-rows-matched-deleted": "1",
    }
    got = write_mode(table(mode="merge", key=["id"])).changes([summary], main_rows=100)
    assert got == Changes(rows_inserted=3, rows_updated=5, rows_deleted=1, main_rows=100)
    assert got.written == 8 and got.describe() == "inserted 3, updated 5, deleted 1"


def test_replace_changes_from_an_overwrite_summary() -> None:
    got = write_mode(table(mode="replace")).changes([{"added-records": "7", "deleted-records": "4"}], 10)
    assert (got.rows_inserted, got.rows_replaced, got.rows_updated) == (7, 4, 0)


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"metric": "rows_removed", "max_rows": 1}, "unknown change metric 'rows_removed'"),
        ({"metric": "rows_deleted"}, "max_rows and/or max_fraction"),
        ({"metric": "rows_deleted", "max_rows": 1, "filter": "a = 1"}, "takes no filter"),
    ],
)
def test_max_change_parameters(kw: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config({"tables": {T: {"checks": [{"check": "max_change", **kw}]}}})
    assert says in str(e.value)


def _verdict(chk: Any, changes: dict[str, int] | None, rows: int = 0) -> Any:
    return chk.verdict(None, {}, rows, AuditContext(changes=changes))


def test_max_change_judges_a_sum_of_metrics_against_main() -> None:
    chk = C.max_change("rows_deleted + rows_updated", max_fraction=0.05)
    assert chk.metric == "rows_deleted+rows_updated"
    base = {"rows_inserted": 900, "rows_updated": 3, "rows_deleted": 2, "main_rows": 100}
    assert _verdict(chk, base).ok  # 5 of 100: at the bound
    v = _verdict(chk, {**base, "rows_deleted": 3})
    assert not v.ok and v.observed == "rows_deleted+rows_updated = 6 (6.00% of main's 100 rows)" and v.failing_rows == 6
    assert _verdict(chk, {"rows_inserted": 10, "main_rows": 0}).ok  # an empty main: a fraction of it passes
    rows = C.max_change("rows_inserted", max_rows=10)
    assert not _verdict(rows, None, rows=11).ok  # an append: its rows are its inserts


def _with_source(table_keys: dict[str, Any], source_keys: dict[str, Any], **lakehouse: Any) -> Any:
    src = {"table": T, "location": "/landing/cdc", **source_keys}
    return parse_config({"lakehouse": lakehouse, "tables": {T: table_keys}, "sources": {"cdc": src}})


def test_a_source_sets_its_own_mode_and_other_runs_keep_the_tables() -> None:
    cfg = _with_source({"key": ["id"]}, {"mode": "merge", "delete_when": "op = 'D'", "order_by": ["seq"]})
    assert cfg.table(T).mode == "append"  # `wap run` of the table, other sources
    merged = cfg.table(T, source="cdc")
    assert (merged.mode, merged.key, merged.delete_when, merged.order_by) == ("merge", ["id"], "op = 'D'", ["seq"])
    assert write_mode(merged).name == "merge"
    # A source with a mode of its own does not inherit the table's mode-specific keys.
    cfg = _with_source({"mode": "merge", "key": ["id"], "delete_when": "op = 'D'"}, {"mode": "replace"})
    replaced = cfg.table(T, source="cdc")
    assert replaced.mode == "replace" and replaced.delete_when is None
    assert cfg.table(T).delete_when == "op = 'D'"


@pytest.mark.parametrize(
    ("table_keys", "source_keys", "says"),
    [
        ({}, {"mode": "merge"}, '[sources.cdc] (its table crm.customers): mode = "merge" needs key = [...]'),
        ({}, {"delete_when": "op = 'D'"}, 'delete_when and order_by need mode = "merge"'),
        ({}, {"mode": "merge", "key": ["id"], "delete_when": "op = 'D'; DROP TABLE t"}, "second statement"),
        ({"on_row_failure": "quarantine"}, {"mode": "replace"}, 'on_row_failure = "quarantine" yet'),
        ({"schema": "add_columns"}, {"mode": "merge", "key": ["id"]}, 'cannot be combined with schema = "add_columns"'),
        ({}, {"mode": "upsert"}, "'append', 'merge' or 'replace'"),
    ],
)
def test_a_source_mode_without_what_it_needs_is_a_config_error(
    table_keys: dict[str, Any], source_keys: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigError) as e:
        _with_source(table_keys, source_keys)
    assert says in str(e.value) and e.value.exit_code == 2, str(e.value)


def test_a_source_mode_merge_is_accepted_on_nessie() -> None:
    cfg = _with_source({}, {"mode": "merge", "key": ["id"]}, catalog="nessie")
    assert cfg.table(T, source="cdc").mode == "merge"
