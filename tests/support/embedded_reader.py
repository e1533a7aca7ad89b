"""An independent reader of a test lakehouse's embedded catalog: PyIceberg's SqlCatalog on its SQLite database,
and the rows of a table's main as it reads them."""

from __future__ import annotations

from typing import Any

from wapflow.lakehouse.lakehouse import Lakehouse


def reader(lh: Lakehouse) -> Any:
    """PyIceberg's SqlCatalog on the catalog's database: an independent reader of every table's pointer."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(lh.catalog, uri=f"sqlite:///{lh.config.embedded_catalog_path()}", warehouse="file:///unused")


def rows(lh: Lakehouse, table: str) -> list[dict[str, Any]]:
    """The rows on `table`'s main (none: no table, or no snapshot yet), in a stable order."""
    from pyiceberg.exceptions import NoSuchTableError

    ns, name = table.split(".")
    try:
        tbl = reader(lh).load_table((ns, name))
    except NoSuchTableError:
        return []
    return [] if tbl.current_snapshot() is None else sorted(tbl.scan().to_arrow().to_pylist(), key=str)
