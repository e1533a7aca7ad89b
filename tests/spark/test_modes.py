"""Write modes on real Spark, Iceberg and the embedded catalog: merge (upsert, change feeds), replace, the change
metrics and max_change, a merge re-applied on a moved main. main is read back by PyIceberg, not by Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import wapflow
from support.data import changes_file, write_parquet
from wapflow.config import parse_config
from wapflow.errors import ConfigError
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import WapRun, run_wap
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
T = "crm.customers"
TN = TableName.parse(T)
CDC = {"mode": "merge", "key": ["id"], "delete_when": "op = 'D'"}


def main_rows(lh: Lakehouse, table: str = T) -> list[dict[str, Any]]:
    """main, read without Spark (PyIceberg on the SQLite catalog)."""
    from pyiceberg.catalog.sql import SqlCatalog

    wh = Path(lh.config.warehouse_location())
    cat = SqlCatalog(lh.catalog, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}")
    return sorted(cat.load_table(table).scan().to_arrow().to_pylist(), key=lambda r: (r["id"] is None, r["id"]))


def change_of(res: Any) -> dict[str, int]:
    (row,) = [c for c in res.checks if c["check"] == "changes"]
    return dict(row["observed"])


def unchecked(tables: dict[str, Any]) -> dict[str, Any]:
    """Table sections with checks = [] unless they declare checks: these tests are about write modes, and a
    merge's or replace's own guards (NULL and duplicate keys, replace_where) are not checks."""
    return {name: {"checks": [], **section} for name, section in tables.items()}


def seeded(lakehouse_factory: Any, landing: Path, tables: dict[str, Any]) -> Lakehouse:
    """A lakehouse whose table holds ids 1..5 (merged into a new table: five inserts)."""
    lh = lakehouse_factory(unchecked(tables))
    seed = [(i, f"n{i}", "I") for i in range(1, 6)]
    res = run_wap(lh, T, [changes_file(landing, "seed.parquet", seed)])
    assert res.status == "published", res.message
    assert change_of(res)["rows_inserted"] == 5
    return lh


def test_merge_inserts_updates_and_deletes_row_by_row(lakehouse_factory, landing):
    lh = seeded(lakehouse_factory, landing, {T: CDC})
    before = lh.tables.head(TN)
    batch = [(1, "one", "U"), (2, "two", "U"), (3, None, "D"), (6, "six", "I"), (99, None, "D")]
    f = changes_file(landing, "b1.parquet", batch)
    res = run_wap(lh, T, [f], run_id="merge_one")
    assert res.status == "published", res.message
    assert res.exit_code == 0
    assert main_rows(lh) == [
        {"id": 1, "name": "one", "op": "U"},
        {"id": 2, "name": "two", "op": "U"},
        {"id": 4, "name": "n4", "op": "I"},
        {"id": 5, "name": "n5", "op": "I"},
        {"id": 6, "name": "six", "op": "I"},
    ]
    # The change, from the merge commit's summary: a delete of a key main lacks (99) changes nothing.
    assert change_of(res) == {
        "rows_inserted": 1,
        "rows_updated": 2,
        "rows_deleted": 1,
        "rows_replaced": 0,
        "main_rows": 5,
    }
    assert res.rows_written == 3
    assert "inserted 1, updated 2, deleted 1" in res.message
    # The metric history keeps the change with the run (`wap metrics`, issue 23).
    history = {m["metric"]: m["value"] for m in wapflow.metrics(lh, T, limit=1) if m["column"] is None}
    assert [history[m] for m in ("row_count", "rows_inserted", "rows_updated", "rows_deleted")] == [3, 1, 2, 1]
    # One commit on main, carrying the run id; fast-forwarded from the branch made at `before`.
    snap = lh.tables.snapshots(TN)[lh.tables.head(TN)]
    assert snap.run_id == "merge_one" and snap.parent_id == before
    assert lh.iceberg.list(TN) == []
    # The same run again: found on main, nothing merged twice.
    again = run_wap(lh, T, [f], run_id="merge_one")
    assert again.status == "published" and lh.tables.head(TN) == snap.snapshot_id
    assert "already published" in again.message


@pytest.fixture
def seq_lake(lakehouse_factory, landing) -> Lakehouse:
    lh = lakehouse_factory(unchecked({T: {**CDC, "order_by": ["seq"]}}))
    seed = [(i, f"n{i}", "I", 0) for i in range(1, 4)]
    res = run_wap(lh, T, [changes_file(landing, "seed.parquet", seed, seq=True)])
    assert res.status == "published", res.message
    return lh


def test_order_by_picks_the_greatest_per_key(seq_lake, landing):
    lh = seq_lake
    batch = [(1, "old", "U", 1), (1, "newest", "U", 3), (1, "middle", "U", 2), (2, "re", "U", 4), (2, None, "D", 5)]
    res = run_wap(lh, T, [changes_file(landing, "b.parquet", batch, seq=True)])
    assert res.status == "published", res.message
    assert main_rows(lh) == [
        {"id": 1, "name": "newest", "op": "U", "seq": 3},
        {"id": 3, "name": "n3", "op": "I", "seq": 0},
    ]
    c = change_of(res)
    assert (c["rows_updated"], c["rows_deleted"], c["rows_inserted"]) == (1, 1, 0)


def test_equal_order_by_values_of_one_key_block(seq_lake, landing):
    lh = seq_lake
    head = lh.tables.head(TN)
    res = run_wap(lh, T, [changes_file(landing, "b.parquet", [(1, "a", "U", 7), (1, "b", "U", 7)], seq=True)])
    assert res.status == "blocked" and res.exit_code == 1
    assert "id=1, seq=7" in res.message
    assert lh.tables.head(TN) == head


def test_duplicate_keys_without_order_by_block_naming_sample_keys(lakehouse_factory, landing):
    lh = seeded(lakehouse_factory, landing, {T: CDC})
    head, rows = lh.tables.head(TN), main_rows(lh)
    batch = [(1, "a", "U"), (1, "b", "U"), (7, "x", "I"), (7, "y", "I"), (7, "z", "I"), (8, "ok", "I")]
    res = run_wap(lh, T, [changes_file(landing, "dups.parquet", batch)])
    assert res.status == "blocked" and res.exit_code == 1
    (failed,) = [c for c in res.checks if c["status"] == "failed"]
    assert failed["check"] == "merge_key" and failed["failing_rows"] == 3  # rows beyond the first per key
    assert {(s["id"], s["rows"]) for s in failed["samples"]} == {(1, 2), (7, 3)}
    assert "id=7" in res.message and "id=1" in res.message and "order_by" in failed["threshold"]
    assert "nothing was written" in res.message
    assert lh.tables.head(TN) == head and main_rows(lh) == rows
    assert lh.iceberg.list(TN) == []


def test_null_keys_block_with_sample_rows(lakehouse_factory, landing):
    lh = seeded(lakehouse_factory, landing, {T: CDC})
    head = lh.tables.head(TN)
    res = run_wap(lh, T, [changes_file(landing, "nulls.parquet", [(None, "ghost", "I"), (9, "nine", "I")])])
    assert res.status == "blocked" and res.exit_code == 1
    (failed,) = [c for c in res.checks if c["status"] == "failed"]
    assert failed["name"] == "merge key (id) not null" and failed["failing_rows"] == 1
    assert failed["samples"] == [{"id": None, "name": "ghost", "op": "I"}]
    assert lh.tables.head(TN) == head


def test_a_key_missing_from_the_batch_is_a_config_error(lakehouse_factory, landing):
    """The first batch of a new table lacks the key: exit 2, no table created."""
    lh = lakehouse_factory(unchecked({T: {**CDC, "key": ["customer_id"]}}))
    res = run_wap(lh, T, [changes_file(landing, "b.parquet", [(1, "a", "U")])])
    assert res.status == "failed" and res.exit_code == ConfigError.exit_code == 2
    assert "key column 'customer_id' is not a column of the batch" in res.message
    assert not lh.tables.exists(TN)


def test_a_key_missing_from_the_table_is_a_config_error(lakehouse_factory, landing):
    """The batch has the key column, the table does not: the declaration is wrong (exit 2), not the file (a
    schema block, exit 1), and nothing is written."""
    lh = seeded(lakehouse_factory, landing, {T: CDC})
    head = lh.tables.head(TN)
    lh2 = Lakehouse(_same_lake(lh, {T: {**CDC, "key": ["customer_id"]}}), spark=lh.spark)
    batch = pa.table({"id": [1], "name": ["a"], "op": ["U"], "customer_id": [7]})
    res = run_wap(lh2, T, [str(write_parquet(landing / "k.parquet", batch))])
    assert res.status == "failed" and res.exit_code == 2, res.message
    assert f"key column 'customer_id' is not a column of {T}" in res.message
    assert lh.tables.head(TN) == head and lh.iceberg.list(TN) == []


@pytest.mark.parametrize(
    ("delete_when", "says"),
    [
        ("opp = 'D'", "delete_when is not valid over the batch"),
        ("op", "delete_when is a string, not a boolean"),
    ],
)
def test_a_delete_when_the_batch_cannot_answer_is_a_config_error(lakehouse_factory, landing, delete_when, says):
    lh = seeded(lakehouse_factory, landing, {T: {**CDC, "delete_when": "op = 'D'"}})
    head, rows = lh.tables.head(TN), main_rows(lh)
    lh2 = Lakehouse(_same_lake(lh, {T: {**CDC, "delete_when": delete_when}}), spark=lh.spark)
    res = run_wap(lh2, T, [changes_file(landing, "b.parquet", [(1, None, "D")])])
    assert res.status == "failed" and res.exit_code == 2, res.message
    assert says in res.message
    assert lh.tables.head(TN) == head and main_rows(lh) == rows


@pytest.mark.parametrize(
    ("delete_when", "says"),
    [
        ("op = 'D'; DROP TABLE crm.customers", "found a second statement"),
        ("op = = 'D'", "delete_when"),
        ("(SELECT count(*) FROM parquet.`/etc`) > 0", "delete_when"),
    ],
)
def test_a_delete_when_that_does_not_parse_or_writes_is_refused_in_wap_toml(delete_when, says):
    with pytest.raises(ConfigError) as e:
        parse_config({"tables": {T: {**CDC, "delete_when": delete_when}}})
    assert e.value.exit_code == 2
    assert says in str(e.value) and f'[tables."{T}"].delete_when' in str(e.value)


def _same_lake(lh: Lakehouse, tables: dict[str, Any]) -> Any:
    """Another configuration of the same lakehouse (its catalog and warehouse), with other table sections."""
    lake = lh.config.lakehouse.model_dump(exclude_none=True, mode="json")
    cfg = parse_config({"lakehouse": lake, "tables": unchecked(tables)})
    cfg.base_dir = lh.config.base_dir
    return cfg


def test_max_change_blocks_a_merge_that_deletes_too_much(lakehouse_factory, landing):
    guard = {"check": "max_change", "metric": "rows_deleted+rows_updated", "max_fraction": 0.3}
    lh = seeded(lakehouse_factory, landing, {T: {**CDC, "checks": [guard]}})
    head, rows = lh.tables.head(TN), main_rows(lh)
    # 3 of main's 5 rows deleted or updated: 60% > 30%.
    res = run_wap(lh, T, [changes_file(landing, "b.parquet", [(1, None, "D"), (2, None, "D"), (3, "u", "U")])])
    assert res.status == "blocked" and res.exit_code == 1
    (failed,) = [c for c in res.checks if c["status"] == "failed"]
    assert failed["check"] == "max_change"
    assert failed["observed"] == "rows_deleted+rows_updated = 3 (60.00% of main's 5 rows)"
    assert lh.tables.head(TN) == head and main_rows(lh) == rows
    # The kept branch holds the merged change for inspection.
    assert lh.tables.row_count(TN, res.branch) == 3
    ok = run_wap(lh, T, [changes_file(landing, "c.parquet", [(1, None, "D"), (9, "new", "I")])])
    assert ok.status == "published", ok.message


def test_row_checks_audit_the_inserted_and_updated_rows_only(lakehouse_factory, landing):
    checks = [{"check": "not_null", "column": "name"}, {"check": "row_count", "max": 5}]
    lh = seeded(lakehouse_factory, landing, {T: {**CDC, "checks": checks}})
    # Deletes carry no name and do not count as audited rows; the copied rows of rewritten files are not audited.
    res = run_wap(lh, T, [changes_file(landing, "b.parquet", [(1, None, "D"), (2, None, "D"), (4, "x", "U")])])
    assert res.status == "published", res.message
    by = {c["check"]: c for c in res.checks}
    assert by["not_null"]["status"] == "passed" and by["row_count"]["observed"] == 1
    bad = run_wap(lh, T, [changes_file(landing, "c.parquet", [(4, None, "U")])])
    assert bad.status == "blocked"
    assert [c["check"] for c in bad.checks if c["status"] == "failed"] == ["not_null"]


def test_a_merge_is_applied_again_when_main_moved_before_publish(lakehouse_factory, landing):
    """A concurrent append publishes id 50 while a merge that upserts id 50 waits between audit and publish: a
    cherry-pick would leave two rows of id 50; the merge is applied again on the new main instead."""
    lh = seeded(lakehouse_factory, landing, {T: CDC})
    appender = Lakehouse(_same_lake(lh, {T: {}}), spark=lh.spark)
    m = WapRun(lh, T, [changes_file(landing, "m.parquet", [(1, "merged", "U"), (50, "from merge", "U")])])
    m.prepare()
    m.write()
    m.audit()
    first_base = m.state.base
    app = run_wap(appender, T, [changes_file(landing, "a.parquet", [(50, "from append", "I"), (51, "x", "I")])])
    assert app.status == "published", app.message
    m.publish()  # main moved: back to write, on a fresh branch of the new main
    assert m.state.status == "running" and m.state.done == ["prepare"] and m.state.reapplied == 1
    res = m.run()
    assert res.status == "published", res.message
    assert m.state.base == app.snapshot_id != first_base
    assert "applied again 1 time(s)" in res.message
    rows = main_rows(lh)
    assert [r["id"] for r in rows] == [1, 2, 3, 4, 5, 50, 51]
    assert {r["id"]: r["name"] for r in rows}[50] == "from merge" and rows[0]["name"] == "merged"
    c = change_of(res)
    assert (c["rows_updated"], c["rows_inserted"], c["main_rows"]) == (2, 0, 7)
    assert lh.iceberg.list(TN) == []


def test_a_merge_resumed_after_its_write_merges_once(lakehouse_factory, landing):
    """A process that wrote and audited a merge dies; the same run id resumes it: found on its branch, published
    once; and once published, the run again changes nothing."""
    lh = seeded(lakehouse_factory, landing, {T: CDC})
    f = changes_file(landing, "m.parquet", [(1, "merged", "U"), (7, "seven", "I")])
    first = WapRun(lh, T, [f], run_id="resumed_merge")
    first.prepare()
    first.write()
    first.audit()
    branch_head = lh.tables.head(TN, first.branch)
    again = WapRun(lh, T, [f], run_id="resumed_merge").run()
    assert again.status == "published", again.message
    assert lh.tables.head(TN) == branch_head  # its own commit, fast-forwarded: not merged a second time
    assert [r["id"] for r in main_rows(lh)] == [1, 2, 3, 4, 5, 7]
    head = lh.tables.head(TN)
    third = WapRun(lh, T, [f], run_id="resumed_merge").run()
    assert third.status == "published" and lh.tables.head(TN) == head


# --- replace --------------------------------------------------------------------------------------------------


def day_file(landing: Path, name: str, rows: list[tuple[int, int, str]]) -> str:
    t = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "day": pa.array([r[1] for r in rows], pa.int32()),
            "v": pa.array([r[2] for r in rows], pa.string()),
        }
    )
    return str(write_parquet(landing / name, t))


def test_replace_overwrites_the_partitions_the_batch_touches(lakehouse_factory, landing):
    lh = lakehouse_factory(unchecked({"ev.daily": {"mode": "replace"}}))
    ident = lh.tables.ident(TableName.parse("ev.daily"))
    lh.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {TableName.parse('ev.daily').namespace_sql(lh.catalog)}")
    # The table is partitioned by day (created here: partition_by in wap.toml is another part of issue 22).
    lh.spark.sql(
        f"CREATE TABLE {ident} (id BIGINT, day INT, v STRING) USING iceberg PARTITIONED BY (day) "
        "TBLPROPERTIES ('format-version' = '2', 'write.wap.enabled' = 'true')"
    )
    lh.spark.sql(f"INSERT INTO {ident} VALUES (1, 1, 'a'), (2, 1, 'b'), (3, 2, 'c'), (4, 2, 'd'), (5, 3, 'e')")
    res = run_wap(lh, "ev.daily", [day_file(landing, "day2.parquet", [(30, 2, "C"), (31, 2, "D"), (32, 2, "E")])])
    assert res.status == "published", res.message
    assert [(r["id"], r["day"]) for r in main_rows(lh, "ev.daily")] == [
        (1, 1),
        (2, 1),
        (5, 3),
        (30, 2),
        (31, 2),
        (32, 2),
    ]
    c = change_of(res)
    assert (c["rows_inserted"], c["rows_replaced"], c["main_rows"]) == (3, 2, 5)


def test_replace_where_replaces_the_matching_rows(lakehouse_factory, landing):
    lh = lakehouse_factory(unchecked({"ev.daily": {"mode": "replace", "replace_where": "day = 2"}}))
    appender = Lakehouse(_same_lake(lh, {"ev.daily": {}}), spark=lh.spark)
    rows = [(1, 1, "a"), (2, 2, "b"), (3, 2, "c")]
    first = run_wap(appender, "ev.daily", [day_file(landing, "all.parquet", rows)])
    assert first.status == "published", first.message
    res = run_wap(lh, "ev.daily", [day_file(landing, "day2.parquet", [(9, 2, "new")])])
    assert res.status == "published", res.message
    assert [(r["id"], r["v"]) for r in main_rows(lh, "ev.daily")] == [(1, "a"), (9, "new")]
    assert change_of(res)["rows_replaced"] == 2
    # A batch row outside replace_where would be added without replacing anything of its kind: blocked.
    head = lh.tables.head(TableName.parse("ev.daily"))
    bad = run_wap(lh, "ev.daily", [day_file(landing, "mixed.parquet", [(10, 2, "x"), (11, 3, "y")])])
    assert bad.status == "blocked" and "1 batch row(s) outside replace_where" in bad.message
    assert lh.tables.head(TableName.parse("ev.daily")) == head


def test_replace_on_an_unpartitioned_table_without_replace_where_is_a_config_error(lakehouse_factory, landing):
    lh = lakehouse_factory(unchecked({"ev.daily": {"mode": "replace"}}))
    res = run_wap(lh, "ev.daily", [day_file(landing, "d.parquet", [(1, 1, "a")])])
    assert res.status == "failed" and res.exit_code == 2
    assert "is not partitioned" in res.message and "replace_where" in res.message
    assert not lh.tables.exists(TableName.parse("ev.daily"))  # the table this run created is gone again


def test_revert_of_a_merge_rolls_main_back_only_while_it_is_the_latest(lakehouse_factory, landing):
    from wapflow.errors import UsageError
    from wapflow.outer.revert import revert

    lh = seeded(lakehouse_factory, landing, {T: CDC})
    before, rows = lh.tables.head(TN), main_rows(lh)
    m = run_wap(lh, T, [changes_file(landing, "m.parquet", [(1, "merged", "U"), (2, None, "D")])])
    assert m.status == "published", m.message
    out = revert(lh, m.run_id)
    # Removing the merge's files would also remove rows it only copied: main goes back to before it instead.
    assert out["snapshot_id"] == before and lh.tables.head(TN) == before
    assert main_rows(lh) == rows and out["rows_removed"] == {T: -1}  # the deleted row is back
    m2 = run_wap(lh, T, [changes_file(landing, "m2.parquet", [(3, "merged", "U")])])
    later = run_wap(lh, T, [changes_file(landing, "later.parquet", [(9, "nine", "I")])])
    assert m2.status == later.status == "published"
    head = lh.tables.head(TN)
    with pytest.raises(UsageError) as e:
        revert(lh, m2.run_id)
    assert "main has moved on since" in str(e.value)
    assert lh.tables.head(TN) == head


def test_max_change_bounds_an_append_by_its_rows(lakehouse_factory, landing):
    lh = lakehouse_factory({T: {"checks": [{"check": "max_change", "metric": "rows_inserted", "max_rows": 3}]}})
    ok = run_wap(lh, T, [changes_file(landing, "a.parquet", [(1, "a", "I"), (2, "b", "I")])])
    assert ok.status == "published", ok.message
    assert [c["check"] for c in ok.checks] == ["max_change"]  # an append's report has no `changes` line
    res = run_wap(lh, T, [changes_file(landing, "b.parquet", [(i, "x", "I") for i in range(10, 14)])])
    assert res.status == "blocked" and res.checks[0]["observed"] == "rows_inserted = 4 (200.00% of main's 2 rows)"


def test_a_sources_files_are_merged_while_other_runs_append(spark: Any, tmp_path: Path, landing: Path) -> None:
    """[sources.cdc] mode = "merge" on a table whose own mode is append: `wap ingest cdc` merges the feed's
    files by key; a plain run of the table still appends."""
    import os

    from wapflow.outer.ingest import ingest

    feed = tmp_path / "cdc"
    feed.mkdir()
    cfg = parse_config(
        {
            "lakehouse": {
                "warehouse": str(tmp_path / "lakehouse"),
                "catalog_name": f"srcmode_{os.getpid()}",
                "master": "local[2]",
            },
            "tables": {T: {"checks": []}},
            "sources": {"cdc": {"table": T, "location": str(feed), "settle_seconds": 0, **CDC}},
        }
    )
    cfg.base_dir = tmp_path
    lh = Lakehouse(cfg, spark=spark)
    seed = run_wap(lh, T, [changes_file(landing, "seed.parquet", [(i, f"n{i}", "I") for i in (1, 2, 3)])])
    assert seed.status == "published", seed.message
    changes_file(feed, "c1.parquet", [(1, "one", "U"), (2, None, "D"), (4, "four", "I")])
    res = ingest(lh, "cdc")
    assert res.exit_code == 0, res.message()
    (run,) = res.runs
    assert change_of(run) == {
        "rows_inserted": 1,
        "rows_updated": 1,
        "rows_deleted": 1,
        "rows_replaced": 0,
        "main_rows": 3,
    }
    assert main_rows(lh) == [
        {"id": 1, "name": "one", "op": "U"},
        {"id": 3, "name": "n3", "op": "I"},
        {"id": 4, "name": "four", "op": "I"},
    ]
    # The table's own mode for a run that is not the source's: the same key appended, not merged.
    plain = run_wap(lh, T, [changes_file(landing, "again.parquet", [(4, "four again", "I")])])
    assert plain.status == "published", plain.message
    assert [r["id"] for r in main_rows(lh)] == [1, 3, 4, 4]


def quarantine_rows(lh: Lakehouse) -> list[dict[str, Any]]:
    """main of the quarantine table, read without Spark."""
    return main_rows(lh, f"{T}__quarantine")


def test_unique_on_a_merge_looks_up_the_touched_keys_in_the_merged_table(lakehouse_factory, landing):
    """unique(name) on a merge: a batch whose names are distinct still blocks when the merge leaves a name it
    touched twice in the table; a duplicate the batch does not touch (n4 twice) is not its concern."""
    checks = [{"check": "unique", "columns": ["id"]}, {"check": "unique", "columns": ["name"]}]
    lh = seeded(lakehouse_factory, landing, {T: {**CDC, "checks": checks}})
    dup = run_wap(lh, T, [changes_file(landing, "dup.parquet", [(5, "n4", "U")])])
    assert dup.status == "blocked" and "unique(name)" in dup.message  # n4 would be held by ids 4 and 5
    lh.spark.sql(f"UPDATE {lh.tables.ident(TN)} SET name = 'n4' WHERE id = 5")  # a duplicate made outside
    ok = run_wap(lh, T, [changes_file(landing, "ok.parquet", [(1, "one", "U"), (9, "nine", "I")])])
    assert ok.status == "published", ok.message
    by = {c["name"]: c for c in ok.checks}
    assert by["unique(name)"]["status"] == "passed" and by["unique(name)"]["source"] == "join"
    head = lh.tables.head(TN)
    res = run_wap(lh, T, [changes_file(landing, "b.parquet", [(2, "nine", "U"), (3, "n3b", "U"), (10, "x", "I")])])
    assert res.status == "blocked" and res.exit_code == 1, res.message
    (failed,) = [c for c in res.checks if c["status"] == "failed"]
    assert failed["name"] == "unique(name)" and failed["failing_rows"] == 1
    assert failed["samples"] == [{"name": "nine", "count": 2}]
    assert lh.tables.head(TN) == head
    assert [r["name"] for r in main_rows(lh)] == ["one", "n2", "n3", "n4", "n4", "nine"]


def test_a_merge_quarantines_failing_changes_and_merges_the_rest(lakehouse_factory, landing):
    """on_row_failure = "quarantine" with a merge: a change failing a row check goes to the quarantine table and
    its key keeps its row on main; deletes are judged by nothing and applied."""
    cfg = {**CDC, "on_row_failure": "quarantine", "checks": [{"check": "not_null", "column": "name"}]}
    lh = seeded(lakehouse_factory, landing, {T: cfg})
    batch = [(1, "one", "U"), (2, None, "U"), (3, None, "D"), (7, None, "I"), (8, "eight", "I")]
    res = run_wap(lh, T, [changes_file(landing, "b.parquet", batch)], run_id="merge_q")
    assert res.status == "published" and res.exit_code == 0, res.message
    assert main_rows(lh) == [
        {"id": 1, "name": "one", "op": "U"},
        {"id": 2, "name": "n2", "op": "I"},
        {"id": 4, "name": "n4", "op": "I"},
        {"id": 5, "name": "n5", "op": "I"},
        {"id": 8, "name": "eight", "op": "I"},
    ]
    q = quarantine_rows(lh)
    assert [(r["id"], r["op"], r["_wap_run_id"], r["_wap_failed_checks"]) for r in q] == [
        (2, "U", "merge_q", ["not_null(name)"]),
        (7, "I", "merge_q", ["not_null(name)"]),
    ]
    assert res.quarantined_rows == 2
    by = {c["check"]: c for c in res.checks}
    assert by["not_null"]["status"] == "quarantined" and by["not_null"]["failing_rows"] == 2
    assert change_of(res) == {
        "rows_inserted": 1,
        "rows_updated": 1,
        "rows_deleted": 1,
        "rows_replaced": 0,
        "main_rows": 5,
    }
