"""`wap run-tables` on the catalogs other than the embedded one (issue 45): a group of two tables published in one
commit on a JDBC catalog on PostgreSQL (one database transaction, tests/support/pg_server.py), read back by
PyIceberg's own client of that catalog; a blocked group leaves every main as it was.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from support.cli_harness import unique_catalog, wap
from support.data import write_parquet
from support.pg_server import PASSWORD
from wapflow._dev.pg_server import Urls

RUN_ID_PROP = "wapflow.run-id"  # the snapshot property naming the run that wrote it

TABLES = """\
[tables."{ns}.orders"]
checks = [{{ check = "not_null", column = "order_id" }}, {{ check = "unique", columns = ["order_id"] }}]

[tables."{ns}.lines"]
checks = [
  {{ check = "not_null", column = "amount" }},
  {{ check = "foreign_key", column = "order_id", table = "{ns}.orders" }},
]
"""


def orders(landing: Path, name: str, ids: list[int]) -> str:
    t = pa.table({"order_id": pa.array(ids, pa.int64()), "total": pa.array([10.0 * i for i in ids])})
    return str(write_parquet(landing / name, t))


def lines(landing: Path, name: str, order_ids: list[int]) -> str:
    t = pa.table(
        {
            "order_id": pa.array(order_ids, pa.int64()),
            "line": pa.array(range(len(order_ids)), pa.int64()),
            "amount": pa.array([10.0 * i for i in order_ids]),
        }
    )
    return str(write_parquet(landing / name, t))


def config(folder: Path, catalog: str, catalog_lines: str, ns: str) -> str:
    """A wap.toml as a user writes it: the catalog's lines, a local warehouse (wapflow's state, and the
    tables' on a JDBC catalog), the two tables' checks."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = folder / "wap.toml"
    cfg.write_text(
        textwrap.dedent(
            f"""\
            [lakehouse]
            warehouse = "{folder / "lake"}"
            catalog_name = "{catalog}"
            master = "local[2]"
            driver_memory = "1g"
            """
        )
        + catalog_lines
        + '\n[lakehouse.spark_conf]\n"spark.sql.shuffle.partitions" = "2"\n\n'
        + TABLES.format(ns=ns)
    )
    return str(cfg)


def main_of(table: Any) -> tuple[int | None, int]:
    """main's snapshot id and its row count."""
    snap = table.current_snapshot()
    return (None, 0) if snap is None else (snap.snapshot_id, len(table.scan().to_arrow()))


def assert_published_together(reader: Any, ns: str, doc: dict[str, Any], rows: dict[str, int]) -> None:
    """Every table's main is its run's snapshot (the run id on it) with the rows the run brought; no branch left."""
    assert doc["status"] == "published" and "in one commit" in doc["message"], doc
    by_table = {r["table"]: r for r in doc["tables"]}
    assert set(by_table) == {f"{ns}.orders", f"{ns}.lines"}
    for name, want in rows.items():
        table = reader.load_table(f"{ns}.{name}")
        snap = table.current_snapshot()
        run = by_table[f"{ns}.{name}"]
        assert snap is not None and snap.snapshot_id == run["snapshot_id"], (name, run)
        assert snap.summary.additional_properties.get(RUN_ID_PROP) == run["run_id"]
        assert len(table.scan().to_arrow()) == want
        assert set(table.metadata.refs) == {"main"}, table.metadata.refs


# --- a JDBC catalog on PostgreSQL ------------------------------------------------------------------------


@pytest.mark.slow  # two `wap run-tables` processes (each a JVM)
def test_a_group_publishes_in_one_commit_and_a_blocked_group_leaves_both_mains_on_a_postgresql_catalog(
    tmp_path: Path, landing: Path, pg_db: Urls
):
    from pyiceberg.catalog.sql import SqlCatalog

    ns, catalog = "shop", unique_catalog("pggroup")
    props = f'uri = "{pg_db.jdbc}", "jdbc.user" = "{pg_db.user}", "jdbc.password" = "{pg_db.password}"'
    cfg = config(
        tmp_path / "project",
        catalog,
        f'catalog = "jdbc"\ncatalog_properties = {{ {props}, "jdbc.schema-version" = "V1" }}\n',
        ns,
    )
    reader = SqlCatalog(catalog, uri=pg_db.sqlalchemy, warehouse=f"file://{tmp_path / 'project' / 'lake'}")

    # 1. lines first on the command line: the foreign key still reads the run's orders (written first).
    ok = wap(
        "run-tables",
        f"{ns}.lines={lines(landing, 'l1.parquet', [1, 1, 2])}",
        f"{ns}.orders={orders(landing, 'o1.parquet', [1, 2])}",
        "--config",
        cfg,
        "--json",
        timeout=600,
    )
    assert ok.code == 0, ok.text
    assert_published_together(reader, ns, ok.doc, {"orders": 2, "lines": 3})
    assert PASSWORD not in ok.text
    heads = {name: main_of(reader.load_table(f"{ns}.{name}")) for name in ("orders", "lines")}

    # 2. A line whose order is in neither main nor the run: the group is blocked, no main moves (orders' rows
    #    passed their own checks and stay off main too), every table's rows kept on the run's branch.
    blocked = wap(
        "run-tables",
        f"{ns}.orders={orders(landing, 'o2.parquet', [3, 4])}",
        f"{ns}.lines={lines(landing, 'l2.parquet', [3, 9])}",
        "--config",
        cfg,
        "--json",
        timeout=600,
    )
    assert blocked.code == 1, blocked.text
    doc = blocked.doc
    assert doc["status"] == "blocked" and "no table changed on main" in doc["message"], doc
    assert "foreign_key" in doc["message"]
    assert {name: main_of(reader.load_table(f"{ns}.{name}")) for name in ("orders", "lines")} == heads
    for name in ("orders", "lines"):
        table = reader.load_table(f"{ns}.{name}")
        assert set(table.metadata.refs) == {"main", doc["branch"]}
        assert len(table.scan().use_ref(doc["branch"]).to_arrow()) == heads[name][1] + 2
