"""wap.toml for the process tests of external catalogs (PostgreSQL JDBC, Iceberg REST, Nessie; plain or behind the
TLS proxy), and a `wap` process that cannot start Spark (it answers only if the command needs none)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from support.cli_harness import Proc, wap
from support.no_jvm import NO_SPARK_HOME


def catalog_config(folder: Path, lakehouse: str, table: str, *, extra: str = "", catalog: str = "lake") -> Path:
    """A wap.toml in `folder`: a local warehouse, `lakehouse` (the catalog's keys) and `extra` in [lakehouse], and
    `table` with one not_null check; `catalog`: Spark's name for it (one of its own for runs made on the tests'
    shared session, support.cli_harness.setup_run)."""
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
        + lakehouse
        + extra
        + '\n[lakehouse.spark_conf]\n"spark.sql.shuffle.partitions" = "2"\n\n'
        + f'[tables."{table}"]\nchecks = [{{ check = "not_null", column = "passenger_count" }}]\n'
    )
    return cfg


def no_jvm(*args: str, **env: str) -> Proc:
    """A `wap` process that cannot start Spark: it answers only if it needs none."""
    return wap(*args, SPARK_HOME=NO_SPARK_HOME, JAVA_HOME=NO_SPARK_HOME, **env)
