"""Several tables published in one commit on the embedded SQLite JDBC catalog: all or nothing, read back by
PyIceberg's own client of the catalog (not wapflow's Spark session)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from support.data import write_parquet
from support.embedded_reader import reader
from wapflow.lakehouse.group_commit import SqlGroupCommit, publish_group
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import group_result, run_group, run_wap, tables_group
from wapflow.pipeline.group import Group, apply
from wapflow.pipeline.steps.publish import slices
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark

ORDERS, LINES = TableName.parse("shop.orders"), TableName.parse("shop.lines")
TABLES = {
    "shop.orders": {
        "checks": [{"check": "not_null", "column": "order_id"}, {"check": "unique", "columns": ["order_id"]}]
    },
    "shop.lines": {
        "checks": [
            {"check": "not_null", "column": "amount"},
            {"check": "foreign_key", "column": "order_id", "table": "shop.orders"},
        ]
    },
}


def orders(landing: Path, name: str, ids: list[int]) -> str:
    t = pa.table({"order_id": pa.array(ids, pa.int64()), "total": pa.array([10.0 * i for i in ids])})
    return str(write_parquet(landing / name, t))


def lines(landing: Path, name: str, order_ids: list[int], amounts: list[float | None] | None = None) -> str:
    amounts = amounts if amounts is not None else [10.0 * i for i in order_ids]
    t = pa.table(
        {
            "order_id": pa.array(order_ids, pa.int64()),
            "line": pa.array(range(len(order_ids)), pa.int64()),
            "amount": pa.array(amounts, pa.float64()),
        }
    )
    return str(write_parquet(landing / name, t))


def main_rows(lh: Lakehouse, table: TableName) -> int:
    tbl = reader(lh).load_table((*table.namespace, table.name))
    return 0 if tbl.current_snapshot() is None else len(tbl.scan().to_arrow())


def refs(lh: Lakehouse, table: TableName) -> set[str]:
    return set(reader(lh).load_table((*table.namespace, table.name)).metadata.refs)


@pytest.fixture
def shop(lakehouse_factory: Any) -> Lakehouse:
    return lakehouse_factory(TABLES)


def test_two_tables_publish_in_one_commit_on_the_embedded_catalog(shop, landing):
    lh = shop
    res = run_group(
        lh,
        [
            ("shop.lines", [lines(landing, "l.parquet", [1, 1, 2])]),
            ("shop.orders", [orders(landing, "o.parquet", [1, 2])]),
        ],
    )
    assert res.status == "published", res.message
    assert res.exit_code == 0
    assert "in one commit" in res.message
    # The foreign key read the orders of the same run on their branch (main had none).
    assert main_rows(lh, ORDERS) == 2 and main_rows(lh, LINES) == 3
    assert refs(lh, ORDERS) == {"main"} and refs(lh, LINES) == {"main"}
    for r in res.tables:
        tbl = reader(lh).load_table((*TableName.parse(r.table).namespace, TableName.parse(r.table).name))
        snap = tbl.current_snapshot()
        assert snap is not None and snap.snapshot_id == r.snapshot_id
        assert snap.summary is not None and snap.summary["wapflow.run-id"] == r.run_id
    # Spark's session sees the commit made outside it.
    assert lh.tables.row_count(ORDERS) == 2 and lh.tables.row_count(LINES) == 3


def test_a_failing_check_of_one_table_leaves_every_main_unchanged(shop, landing):
    lh = shop
    first = run_group(
        lh, [("shop.orders", [orders(landing, "o1.parquet", [1])]), ("shop.lines", [lines(landing, "l1.parquet", [1])])]
    )
    assert first.status == "published", first.message
    heads = {t: reader(lh).load_table((*t.namespace, t.name)).metadata.current_snapshot_id for t in (ORDERS, LINES)}
    res = run_group(
        lh,
        [
            ("shop.orders", [orders(landing, "o2.parquet", [2, 3])]),
            ("shop.lines", [lines(landing, "l2.parquet", [2, 9])]),  # order 9 is in neither main nor the run
        ],
    )
    assert res.status == "blocked" and res.exit_code == 1, res.message
    assert "foreign_key" in res.message and "no table changed on main" in res.message
    after = {t: reader(lh).load_table((*t.namespace, t.name)).metadata.current_snapshot_id for t in (ORDERS, LINES)}
    assert after == heads
    assert main_rows(lh, ORDERS) == 1 and main_rows(lh, LINES) == 1


def test_a_one_table_run_publishing_between_audit_and_publish_keeps_both_runs_rows(shop, landing):
    """main of orders moves after the group's audit: the group's rows are added on top of it (as a cherry-pick),
    and the one-table run's rows stay."""
    lh = shop
    state = tables_group(
        lh,
        [
            ("shop.orders", [orders(landing, "o1.parquet", [1, 2])]),
            ("shop.lines", [lines(landing, "l1.parquet", [1, 2])]),
        ],
    )
    for step in ("prepare", "write", "audit"):
        state = apply(lh, state, step)
        assert state.status == "running", state.message
    alone = run_wap(lh, "shop.orders", [orders(landing, "o_alone.parquet", [7])])
    assert alone.status == "published", alone.message
    outcome = group_result(lh, apply(lh, state, "publish"))
    assert outcome.status == "published", outcome
    assert {r.published_via for r in outcome.tables} == {"cherry_pick"}
    assert main_rows(lh, ORDERS) == 3 and main_rows(lh, LINES) == 2
    assert refs(lh, ORDERS) == {"main"} and refs(lh, LINES) == {"main"}


def test_a_table_committed_to_between_plan_and_commit_rolls_the_whole_commit_back_and_plans_again(shop, landing):
    """The first commit attempt meets a pointer moved by another writer: the database transaction rolls back
    (no table moved, checked inside the attempt by the independent reader), then the group is planned on the
    new heads and committed."""
    lh = shop
    seed = run_group(
        lh,
        [
            ("shop.orders", [orders(landing, "o0.parquet", [100])]),
            ("shop.lines", [lines(landing, "l0.parquet", [100])]),
        ],
    )
    assert seed.status == "published", seed.message
    state = tables_group(
        lh, [("shop.orders", [orders(landing, "o1.parquet", [1])]), ("shop.lines", [lines(landing, "l1.parquet", [1])])]
    )
    for step in ("prepare", "write", "audit"):
        state = apply(lh, state, step)
    run = Group(lh, state)
    committer = SqlGroupCommit(reader(lh))
    real_commit = committer.commit
    seen: list[dict[str, int | None]] = []

    def commit_after_another_writer(moves: Any) -> None:
        if not seen:
            # Another writer commits to lines (a real append through PyIceberg) after the plan read its pointer.
            other = reader(lh).load_table(("shop", "lines"))
            other.append(
                pa.table(
                    {
                        "order_id": pa.array([100], pa.int64()),
                        "line": pa.array([5], pa.int64()),
                        "amount": pa.array([1.0]),
                    }
                )
            )
        heads = {
            t.dotted: reader(lh).load_table((*t.namespace, t.name)).metadata.current_snapshot_id
            for t in (ORDERS, LINES)
        }
        try:
            real_commit(moves)
        finally:
            after = {
                t.dotted: reader(lh).load_table((*t.namespace, t.name)).metadata.current_snapshot_id
                for t in (ORDERS, LINES)
            }
            seen.append(after)
            if len(seen) == 1:
                assert after == heads  # the refused attempt moved no table: not orders either

    committer.commit = commit_after_another_writer  # type: ignore[method-assign]
    done = publish_group(committer, run.branch, run.run_id, [sl for r in run.members for sl in slices(r)])
    assert len(seen) == 2
    assert main_rows(lh, ORDERS) == 2 and main_rows(lh, LINES) == 3  # seed + run, and the other writer's line
    assert done["heads"][LINES.dotted] == reader(lh).load_table(("shop", "lines")).metadata.current_snapshot_id


def test_new_columns_on_table_branches_fail_the_group_with_every_main_unchanged(lakehouse_factory, landing):
    """A table's new columns wait in a staging table until main's schema changes: two commits, which a group
    cannot make one. The group fails (exit 2) naming the table and what to do; nothing reaches main."""
    lh = lakehouse_factory({**TABLES, "shop.lines": {**TABLES["shop.lines"], "schema": "add_columns"}})
    first = run_group(
        lh, [("shop.orders", [orders(landing, "o1.parquet", [1])]), ("shop.lines", [lines(landing, "l1.parquet", [1])])]
    )
    assert first.status == "published", first.message
    wide = pa.table(
        {
            "order_id": pa.array([2], pa.int64()),
            "line": pa.array([0], pa.int64()),
            "amount": pa.array([20.0]),
            "note": pa.array(["gift"]),
        }
    )
    res = run_group(
        lh,
        [
            ("shop.orders", [orders(landing, "o2.parquet", [2])]),
            ("shop.lines", [str(write_parquet(landing / "l2.parquet", wide))]),
        ],
    )
    assert res.status == "failed" and res.exit_code == 2, res.message
    assert "shop.lines adds new column(s)" in res.message
    assert main_rows(lh, ORDERS) == 1 and main_rows(lh, LINES) == 1
    names = [f.name for f in reader(lh).load_table(("shop", "lines")).schema().fields]
    assert "note" not in names


def test_review_holds_the_whole_group_and_one_approval_publishes_every_table_in_one_commit(
    lakehouse_factory, landing, receiver, monkeypatch
):
    """review = "always" on one table holds every table of the run, with one alert asking to decide on the group;
    a table's own run id cannot be approved alone; `diff` of the group's id shows each table; approving the
    group's id publishes both together."""
    from wapflow import api
    from wapflow.config import AlertsConfig
    from wapflow.errors import UsageError
    from wapflow.lakehouse.lineage import approval_of

    lh = lakehouse_factory({**TABLES, "shop.orders": {**TABLES["shop.orders"], "review": "always"}})
    monkeypatch.setenv("WAP_T_HOOK", receiver.url)
    sinks = {"ops": {"type": "webhook", "url_env": "WAP_T_HOOK", "events": ["awaiting_review"]}}
    lh = Lakehouse(
        lh.config.model_copy(update={"alerts": AlertsConfig.model_validate({"sinks": sinks})}), spark=lh.spark
    )
    held = api.run_tables(
        lh,
        [("shop.orders", [orders(landing, "o.parquet", [1, 2])]), ("shop.lines", [lines(landing, "l.parquet", [1])])],
    )
    assert held.status == "awaiting_review" and held.exit_code == 6, held.message
    assert f"wap approve {held.run_id}" in held.message
    (alert,) = receiver.bodies  # one request for the group, not one per table
    assert alert["event"] == "awaiting_review" and alert["run_id"] == held.run_id
    assert any(f"wap approve {held.run_id}" in c for c in alert["commands"]), alert
    assert main_rows(lh, ORDERS) == 0 and main_rows(lh, LINES) == 0
    members = lh.store.group(held.run_id)
    assert [(m.table_name, m.status, m.branch_kept) for m in members] == [
        ("shop.orders", "awaiting_review", True),
        ("shop.lines", "awaiting_review", True),
    ]
    with pytest.raises(UsageError, match=f"part of multi-table run {held.run_id}"):
        api.approve(lh, members[1].run_id, reason="lines look fine")
    diffs = api.group_diff(lh, held.run_id)
    assert [d["run_id"] for d in diffs] == [m.run_id for m in members]
    assert [d["rows"]["added"] for d in diffs if d["rows"]] == [2, 1]

    res = api.approve(lh, held.run_id, reason="checked with the shop team", by="alice")
    assert res.status == "published", res.message
    assert main_rows(lh, ORDERS) == 2 and main_rows(lh, LINES) == 1
    assert refs(lh, ORDERS) == {"main"} and refs(lh, LINES) == {"main"}
    for t in (ORDERS, LINES):
        snap = reader(lh).load_table((*t.namespace, t.name)).current_snapshot()
        assert snap is not None and approval_of(dict(snap.summary.additional_properties)) == (
            "alice",
            "checked with the shop team",
        )
    assert {m.status for m in lh.store.group(held.run_id)} == {"published"}


def test_rejecting_a_held_group_drops_every_tables_branch(lakehouse_factory, landing):
    from wapflow import api

    lh = lakehouse_factory({**TABLES, "shop.lines": {**TABLES["shop.lines"], "review": "always"}})
    held = api.run_tables(
        lh, [("shop.orders", [orders(landing, "o.parquet", [1])]), ("shop.lines", [lines(landing, "l.parquet", [1])])]
    )
    assert held.status == "awaiting_review", held.message
    doc = api.reject(lh, held.run_id, reason="wrong day", by="bob")
    assert doc["status"] == "rejected" and len(doc["tables"]) == 2, doc
    assert refs(lh, ORDERS) == {"main"} and refs(lh, LINES) == {"main"}
    assert main_rows(lh, ORDERS) == 0 and main_rows(lh, LINES) == 0
    assert {m.status for m in lh.store.group(held.run_id)} == {"rejected"}


def test_a_file_a_table_published_already_fails_the_group_unless_again(shop, landing):
    """The same file given to `run-tables` again (as to `wap run`): the whole run fails before anything is
    written, exit 2, naming the run that published it, every main unchanged; the file rewritten is new data;
    again=True (`--again`) publishes the same file once more."""
    from wapflow import api

    lh = shop
    o, line_file = orders(landing, "o.parquet", [1, 2]), lines(landing, "l.parquet", [1, 2])
    first = api.run_tables(lh, [("shop.orders", [o]), ("shop.lines", [line_file])])
    assert first.status == "published", first.message
    by = next(r.run_id for r in first.tables if r.table == "shop.orders")
    heads = {t: reader(lh).load_table((*t.namespace, t.name)).metadata.current_snapshot_id for t in (ORDERS, LINES)}

    refused = api.run_tables(lh, [("shop.orders", [o]), ("shop.lines", [lines(landing, "l2.parquet", [2])])])
    assert refused.status == "failed" and refused.exit_code == 2, refused.message
    assert f"{o} by run {by}" in refused.message and "published to shop.orders already" in refused.message
    after = {t: reader(lh).load_table((*t.namespace, t.name)).metadata.current_snapshot_id for t in (ORDERS, LINES)}
    assert after == heads and main_rows(lh, ORDERS) == 2 and main_rows(lh, LINES) == 2

    rewritten = orders(landing, "o.parquet", [3, 4, 5])  # the same path, other rows: a new delivery
    res = api.run_tables(lh, [("shop.orders", [rewritten]), ("shop.lines", [lines(landing, "l3.parquet", [3])])])
    assert res.status == "published", res.message
    assert main_rows(lh, ORDERS) == 5

    forced = api.run_tables(lh, [("shop.orders", [rewritten]), ("shop.lines", [line_file])], again=True)
    assert forced.status == "published", forced.message
    assert main_rows(lh, ORDERS) == 8 and main_rows(lh, LINES) == 5
