"""What `wap run-tables` refuses before anything is written, with no JVM: a catalog that cannot commit several
tables at once, a check naming a table outside the run, a table named twice. The runs themselves:
tests/spark/test_tables_together.py and tests/process/test_tables_together_*.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.typer_cli import runner
from wapflow.cli import app
from wapflow.config import parse_config
from wapflow.errors import EXIT_USAGE, UsageError
from wapflow.lakehouse.group_commit import SqlGroupCommit, group_commit_for
from wapflow.lakehouse.lakehouse import Lakehouse

CHECKS = '[tables."shop.orders"]\nchecks = [{ check = "not_null", column = "id" }]\n'


def config(tmp: Path, lakehouse: str, tables: str = CHECKS) -> Path:
    p = tmp / "wap.toml"
    p.write_text(f'[lakehouse]\nwarehouse = "{tmp / "wh"}"\nmaster = "local[2]"\n{lakehouse}\n{tables}')
    return p


@pytest.mark.parametrize(
    ("catalog", "why"),
    [
        ('catalog = "hive"\ncatalog_properties = { uri = "thrift://127.0.0.1:9" }', "hive metastore commits one table"),
        ('catalog = "glue"', "glue commits one table"),
        ('catalog = "hadoop"', "renaming one table's metadata file"),
    ],
)
def test_a_catalog_without_a_commit_across_tables_is_refused_before_any_write(tmp_path, catalog, why):
    cfg = config(tmp_path, catalog)
    res = runner.invoke(app, ["run-tables", "shop.orders=o.parquet", "shop.lines=l.parquet", "--config", str(cfg)])
    assert res.exit_code == EXIT_USAGE, res.output
    text = " ".join(res.output.split()).lower()
    assert why in text and "several tables" in text, res.output
    assert "jdbc" in text and "nessie" in text  # what to use instead
    assert "Traceback" not in res.output
    assert not (tmp_path / "wh").exists()  # nothing written, no warehouse made


def test_the_embedded_catalog_and_a_jdbc_one_commit_groups_and_no_jvm_is_needed_to_say_so(tmp_path):
    embedded = parse_config({"lakehouse": {"warehouse": str(tmp_path / "wh")}})
    assert isinstance(group_commit_for(embedded), SqlGroupCommit)
    pg = parse_config(
        {
            "lakehouse": {
                "warehouse": str(tmp_path / "wh"),
                "catalog": "jdbc",
                "catalog_properties": {"uri": "jdbc:postgresql://127.0.0.1:9/cat", "jdbc.user": "u"},
            }
        }
    )
    assert isinstance(group_commit_for(pg), SqlGroupCommit)
    lh = Lakehouse(embedded)
    assert lh.iceberg.why_not_together() is None
    assert lh._spark is None
    assert not (tmp_path / "wh").exists()  # the catalog's database is not opened (Iceberg's JdbcCatalog makes it)


def test_a_check_naming_a_table_outside_the_run_and_the_catalog_is_refused(tmp_path):
    tables = CHECKS + (
        '[tables."shop.lines"]\nchecks = [{ check = "foreign_key", column = "order_id", table = "shop.ordrs" }]\n'
    )
    cfg = config(tmp_path, "", tables)
    res = runner.invoke(app, ["run-tables", "shop.orders=o.parquet", "shop.lines=l.parquet", "--config", str(cfg)])
    assert res.exit_code == EXIT_USAGE, res.output
    text = " ".join(res.output.split())
    assert "shop.ordrs" in text and "not a table of this run nor of the catalog" in text, res.output
    assert "Traceback" not in res.output


def test_a_table_twice_is_refused(tmp_path):
    from wapflow.pipeline.group import tables_group

    lh = Lakehouse(parse_config({"lakehouse": {"warehouse": str(tmp_path / "wh")}}))
    with pytest.raises(UsageError, match="appears twice"):
        tables_group(lh, [("shop.orders", ["a.parquet"]), ("shop.orders", ["b.parquet"])])


def test_a_rest_servers_group_commit_is_atomic_only_where_known_or_said() -> None:
    """Nessie's Iceberg REST endpoint is told by its configuration's nessie.* keys; any other server's atomicity
    is what [lakehouse] rest_group_commit says, or not known (its report says so)."""
    from wapflow.errors import ConfigError
    from wapflow.lakehouse.group_commit import rest_atomicity

    uri = "http://127.0.0.1:8181"
    assert rest_atomicity({"nessie.is-nessie-catalog": "true", "uri": uri}, None, uri) == (True, None)
    assert rest_atomicity({"uri": uri}, "atomic", uri) == (True, None)
    atomic, caveat = rest_atomicity({"uri": uri}, None, uri)
    assert atomic is None and caveat is not None and "is not known to commit a group atomically" in caveat
    assert "rest_group_commit" in caveat and uri in caveat
    atomic, caveat = rest_atomicity({"nessie.x": "1"}, "table_by_table", uri)  # what wap.toml says comes first
    assert atomic is False and caveat is not None and "table by table" in caveat
    assert parse_config({"lakehouse": {"rest_group_commit": "atomic"}}).lakehouse.rest_group_commit == "atomic"
    with pytest.raises(ConfigError, match="rest_group_commit"):
        parse_config({"lakehouse": {"rest_group_commit": "sometimes"}})
