"""The commit layer (wapflow.lakehouse.commits) on a classic session: chosen once, Iceberg's Java API through the
gateway; refs created, moved and dropped, an append re-applied on a moved main (cherry-pick), read back by
PyIceberg from the catalog itself. The shared session; no new JVM."""

from __future__ import annotations

from typing import Any

import pytest

from wapflow.lakehouse.commits import JvmCommits
from wapflow.lakehouse.pyiceberg_client import open_catalog
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
T = TableName.parse("shop.orders")


def main_ids(lh: Any) -> list[int]:
    tbl = open_catalog(lh.config, why="the test").load_table("shop.orders")
    return sorted(tbl.scan().to_arrow().column("id").to_pylist())


def test_a_classic_session_commits_through_the_java_api(lakehouse_factory: Any) -> None:
    lh = lakehouse_factory()
    tables = lh.tables
    assert isinstance(tables.commits, JvmCommits)  # chosen once, in the constructor
    ident = tables.ident(T)
    lh.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {T.namespace_sql(lh.catalog)}")
    lh.spark.sql(f"CREATE TABLE {ident} (id INT) USING iceberg")
    lh.spark.sql(f"INSERT INTO {ident} VALUES (1)")
    base = tables.head(T, "main")

    assert tables.commits.create_branch(T, "wap_a") == base
    lh.spark.sql(f"INSERT INTO {T.branch_sql(lh.catalog, 'wap_a')} VALUES (2)")
    picked = tables.head(T, "wap_a")
    lh.spark.sql(f"INSERT INTO {ident} VALUES (3)")  # main moved: no fast-forward now
    assert picked is not None and main_ids(lh) == [1, 3]

    head = tables.commits.cherry_pick(T, picked)
    assert head == tables.head(T, "main") and head not in (base, picked)
    assert main_ids(lh) == [1, 2, 3]

    tables.commits.drop_branch(T, "wap_a")
    tables.commits.drop_branch(T, "wap_a")  # no such branch: nothing to do
    assert "wap_a" not in tables.refs(T)

    tables.commits.create_branch(T, "wap_b")
    lh.spark.sql(f"INSERT INTO {T.branch_sql(lh.catalog, 'wap_b')} VALUES (4)")
    moved, dropped = tables.commits.fast_forward(T, "wap_b", drop=True)
    assert dropped and moved == tables.head(T, "main") and "wap_b" not in tables.refs(T)
    assert main_ids(lh) == [1, 2, 3, 4]
