"""Ad-hoc SQL over the lakehouse, optionally on a branch or as of a snapshot/time (Iceberg time travel).

Branch and time travel are applied by rewriting each table reference in the parsed query
(VERSION AS OF / TIMESTAMP AS OF), never by pasting text into the SQL. Only a single read-only query
is run: spark.sql executes commands (DELETE, DROP, CALL, SET...) at once, so both layers of
wapflow.audit.sqlguard accept the text before Spark sees it.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlglot
from sqlglot import exp

from wapflow.audit import sqlguard
from wapflow.errors import UsageError
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.spark.shared_session import session_change
from wapflow.sql.identifiers import validate_branch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _version_node(branch: str | None, as_of: str | None) -> exp.Version | None:
    if branch and as_of:
        raise UsageError(
            "--branch and --as-of cannot be combined", hint="pick one: a branch, or a point in main's history"
        )
    if branch:
        if branch != "main":
            validate_branch(branch)
        return exp.Version(this="VERSION", kind="AS OF", expression=exp.Literal.string(branch))
    if as_of:
        text = as_of.strip()
        if text.isdigit():
            return exp.Version(this="VERSION", kind="AS OF", expression=exp.Literal.number(int(text)))
        try:
            ts = datetime.fromisoformat(text)
        except ValueError:
            raise UsageError(
                f"--as-of {as_of!r} is neither a snapshot id nor a timestamp",
                hint="use a snapshot id from `wap history TABLE`, or e.g. 2026-11-21T10:00:00",
            ) from None
        return exp.Version(
            this="TIMESTAMP", kind="AS OF", expression=exp.Literal.string(ts.strftime("%Y-%m-%d %H:%M:%S.%f"))
        )
    return None


def rewrite(sql: str, *, branch: str | None = None, as_of: str | None = None) -> str:
    version = _version_node(branch, as_of)
    if version is None:
        return sql
    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except sqlglot.errors.ParseError as e:
        raise UsageError(f"could not parse the query: {str(e).splitlines()[0]}") from None
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    touched = 0
    for table in tree.find_all(exp.Table):
        if not table.name or (not table.db and table.name.lower() in ctes):
            continue
        table.set("version", version.copy())
        touched += 1
    if touched == 0:
        raise UsageError("the query reads no table, so --branch/--as-of has nothing to apply to")
    return tree.sql(dialect="spark")


WHAT = "wap query"
HINT = "wap query only reads: write one SELECT (WITH, JOIN, UNION, subqueries); tables change through wap run"


def read_only(sql: str, spark: SparkSession | None = None) -> None:
    """UsageError unless `sql` is one read-only query: sqlglot's layer, and Spark's parser too given a session."""
    try:
        sqlguard.check_query_text(sql, WHAT, hint=HINT)
        if spark is not None:
            sqlguard.check_query_plan(spark, sql, WHAT, hint=HINT)
    except sqlguard.UnsafeSql as e:
        raise UsageError(e.problem, hint=e.hint) from None


def run_query(
    lh: Lakehouse, sql: str, *, branch: str | None = None, as_of: str | None = None, limit: int = 100
) -> tuple[list[str], list[list[Any]]]:
    """The query's columns and its first `limit` rows (0: all)."""
    cols, rows, _ = query_page(lh, sql, branch=branch, as_of=as_of, limit=limit)
    return cols, rows


def query_page(
    lh: Lakehouse, sql: str, *, branch: str | None = None, as_of: str | None = None, limit: int = 100
) -> tuple[list[str], list[list[Any]], int]:
    """The query's columns, its first `limit` rows (0: all) and how many rows it has in all (counted by Spark
    only when there are more than `limit`: `wap query` says "100 of 102,000 rows")."""
    read_only(sql)  # before anything else, Spark included
    spark = lh.spark
    catalog = lh.catalog
    if branch and branch != "main":
        view = lh.iceberg.tables_for(validate_branch(branch))
        if view.catalog != catalog:
            # A branch spanning the catalog (Nessie) is read through a catalog bound to it.
            if as_of:
                raise UsageError("--branch and --as-of cannot be combined", hint="pick one")
            catalog = view.catalog
        ref = lh.iceberg.iceberg_ref(branch)
        branch = None if ref == "main" else ref
    final = rewrite(sql, branch=branch, as_of=as_of)
    read_only(final, spark)  # the exact text Spark will run, both layers
    try:
        with session_change():  # the current catalog is the session's; the analysed plan keeps what it named
            spark.catalog.setCurrentCatalog(catalog)
            df = spark.sql(final)
        rows = df.limit(limit + 1).collect() if limit > 0 else df.collect()
        total = int(df.count()) if limit > 0 and len(rows) > limit else len(rows)
    except Exception as e:  # noqa: BLE001 - AnalysisException etc.: the user's SQL is wrong
        first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise UsageError(f"query failed: {first}", hint="table names are namespace.table, e.g. nyc.trips") from None
    return list(df.columns), [list(r) for r in rows[: limit or None]], total
