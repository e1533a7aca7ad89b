"""Checks only read (wapflow.audit.sqlguard): custom_sql, expression, filter and `wap query` SQL is accepted
only as one read-only query or one pure expression, by sqlglot (layer 1) and by Spark's own parser (layer 2),
and nothing hostile ever runs: every case goes through a real run and the lakehouse is read back."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pydantic
import pytest
from typer.testing import CliRunner

from support.data import make_config, write_parquet
from wapflow import checks as C
from wapflow.audit import sqlguard
from wapflow.audit.checks import AuditPlan, evaluate
from wapflow.audit.spec import CustomSqlCheck, ExpressionCheck, NotNullCheck
from wapflow.config import parse_config
from wapflow.errors import ConfigError, UsageError
from wapflow.lakehouse.identifiers import TableName
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import run_wap
from wapflow.query import read_only, run_query

T = TableName.parse("shop.orders")
V = TableName.parse("shop.victim")  # what the hostile statements aim at
EVIL = TableName.parse("shop.evil")
CANARY = "spark.wap.canary"  # RESET would remove it
SYSPROP = "wap.evil"  # reflect(... 'setProperty', 'wap.evil' ...) would set it
SET_PROP = f"reflect('java.lang.System', 'setProperty', '{SYSPROP}', 'pwned')"


@dataclass(frozen=True)
class Case:
    id: str
    where: str  # custom_sql | expression | filter | query
    text: str  # {cat}: the catalog, {snap}: victim's first snapshot, {jar}: an existing jar file
    word: str  # named in the message (layer 1 runs first)
    word2: str | None = None  # named by layer 2, when it says it differently
    hygiene_only: bool = False  # Spark's parser alone would accept it: only the character rules reject it

    def sql(self, cat: str = "lakehouse", snap: int = 1, jar: str = "/tmp/x.jar") -> str:
        return self.text.replace("{cat}", cat).replace("{snap}", str(snap)).replace("{jar}", jar)


def _c(id: str, text: str, word: str, word2: str | None = None, **kw: Any) -> Case:  # noqa: A002 - `id` reads as the pytest id it becomes
    return Case(id, "custom_sql", text, word, word2, **kw)


HOSTILE = [
    _c("delete", "DELETE FROM {cat}.shop.victim", "found DELETE"),
    _c("insert", "INSERT INTO {cat}.shop.victim SELECT * FROM batch", "found INSERT"),
    _c("insert_overwrite", "INSERT OVERWRITE {cat}.shop.victim SELECT * FROM batch WHERE 1 = 0", "found INSERT"),
    _c("update", "UPDATE {cat}.shop.victim SET amount = 0", "found UPDATE"),
    _c(
        "merge",
        "MERGE INTO {cat}.shop.victim t USING batch s ON t.order_id = s.order_id WHEN MATCHED THEN DELETE",
        "found MERGE",
    ),
    _c("drop_table", "DROP TABLE {cat}.shop.victim", "found DROP TABLE"),
    _c("drop_namespace", "DROP NAMESPACE {cat}.shop CASCADE", "found DROP"),
    _c("create_table", "CREATE TABLE {cat}.shop.evil (a INT)", "found CREATE TABLE"),
    _c("ctas", "CREATE TABLE {cat}.shop.evil AS SELECT * FROM batch", "found CREATE TABLE"),
    _c("temp_view", "CREATE OR REPLACE TEMP VIEW batch AS SELECT 1 AS evil", "found CREATE VIEW"),
    _c("alter_branch", "ALTER TABLE {cat}.shop.victim CREATE BRANCH evil", "found ALTER TABLE"),
    _c("alter_props", "ALTER TABLE {cat}.shop.victim SET TBLPROPERTIES ('evil' = 'yes')", "found ALTER TABLE"),
    _c("alter_add_column", "ALTER TABLE {cat}.shop.victim ADD COLUMN evil INT", "found ALTER TABLE"),
    _c("truncate", "TRUNCATE TABLE {cat}.shop.victim", "found TRUNCATE TABLE"),
    _c("call_set_current", "CALL {cat}.system.set_current_snapshot('shop.victim', {snap})", "found CALL"),
    _c("call_rollback", "CALL {cat}.system.rollback_to_snapshot('shop.victim', {snap})", "found CALL"),
    _c("call_fast_forward", "CALL {cat}.system.fast_forward('shop.victim', 'main', 'evil')", "found CALL"),
    _c("call_orphans", "CALL {cat}.system.remove_orphan_files(table => 'shop.victim', dry_run => true)", "found CALL"),
    _c("set", "SET spark.wap.evil=1", "found SET"),
    _c("reset", "RESET", "found RESET"),
    _c("cache", "CACHE TABLE {cat}.shop.victim", "found CACHE TABLE"),
    _c("uncache", "UNCACHE TABLE {cat}.shop.victim", "found UNCACHE TABLE"),
    _c("refresh", "REFRESH TABLE {cat}.shop.victim", "found REFRESH"),
    _c("add_jar", "ADD JAR {jar}", "found ADD JAR"),
    _c("add_file", "ADD FILE {jar}", "found ADD FILE"),
    _c("msck", "MSCK REPAIR TABLE {cat}.shop.victim", "found MSCK REPAIR"),
    _c("use", "USE {cat}.shop", "found USE"),
    _c("load_data", "LOAD DATA INPATH '{jar}' INTO TABLE {cat}.shop.victim", "found LOAD DATA"),
    _c("execute_immediate", "EXECUTE IMMEDIATE 'DROP TABLE {cat}.shop.victim'", "found EXECUTE"),
    _c("script", "BEGIN DROP TABLE {cat}.shop.victim; END", "not valid SQL", "BEGIN ... END script"),
    _c(
        "two_statements",
        "SELECT * FROM batch WHERE amount < 0; DROP TABLE {cat}.shop.victim",
        "second statement after ';' (DROP TABLE)",
        "'DROP'",
    ),
    _c(
        "comment_hidden",
        "SELECT * FROM batch /* looks harmless */; DELETE FROM {cat}.shop.victim",
        "second statement after ';' (DELETE)",
        "'DELETE'",
    ),
    _c(
        "line_comment",
        "SELECT * FROM batch -- only a comment\n; DROP TABLE {cat}.shop.victim",
        "second statement",
        "'DROP'",
    ),
    _c("fullwidth_semicolon", "SELECT * FROM batch\uff1b DROP TABLE {cat}.shop.victim", "U+FF1B"),
    _c("zero_width", "SELECT * FROM batch;\u200b DROP TABLE {cat}.shop.victim", "U+200B"),
    _c("bom", "\ufeffDELETE FROM {cat}.shop.victim", "U+FEFF"),
    _c("nul", "SELECT * FROM batch\x00; DROP TABLE {cat}.shop.victim", "U+0000"),
    _c("bidi", "SELECT * FROM batch WHERE customer = '\u202e'; DELETE FROM {cat}.shop.victim", "U+202E"),
    _c("lookalike", "D\u0415LETE FROM {cat}.shop.victim", "U+0415"),
    _c("nbsp", "SELECT\u00a01;\u00a0DROP TABLE {cat}.shop.victim", "U+00A0"),
    _c("reflect_select", f"SELECT {SET_PROP} FROM batch", "function reflect is not allowed"),
    _c("reflect_exit", "SELECT reflect('java.lang.System', 'exit', 0)", "function reflect is not allowed"),
    _c(
        "java_method",
        f"SELECT * FROM batch WHERE java_method('java.lang.System', 'setProperty', '{SYSPROP}', 'x') IS NULL",
        "function java_method",
    ),
    _c("try_reflect", "SELECT TRY_REFLECT('java.lang.System', 'exit', 0) FROM batch", "function try_reflect"),
    _c(
        "reflect_in_hint",
        "SELECT /*+ COALESCE(reflect('java.lang.System', 'exit', 0)) */ * FROM batch",
        "function reflect",
    ),
    _c(
        "reflect_in_window",
        f"SELECT sum(amount) OVER w FROM batch WINDOW w AS (PARTITION BY {SET_PROP})",
        "function reflect",
    ),
    _c("parquet_path", "SELECT * FROM parquet.`/tmp`", "by path"),
    _c(
        "class_path",
        "SELECT * FROM `org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat`.`/tmp/x`",
        "by path",
    ),
    _c("iceberg_path_table", "SELECT * FROM {cat}.`/tmp/warehouse/shop/victim`", "by path"),
    _c("path_in_subquery", "SELECT * FROM batch WHERE customer IN (SELECT value FROM text.`/etc/hostname`)", "by path"),
    _c("identifier_clause", "SELECT * FROM IDENTIFIER('parquet.`/tmp`')", "IDENTIFIER"),
    _c("file_tvf", "SELECT * FROM read_files('/tmp')", "table function read_files"),
    _c("lateral_file_tvf", "SELECT * FROM batch JOIN LATERAL read_files('/tmp') r", "table function read_files"),
    _c("transform_script", "SELECT TRANSFORM(order_id) USING 'touch /tmp/wap-evil' AS (x) FROM batch", "TRANSFORM"),
    _c(
        "write_in_cte",
        "WITH x AS (DELETE FROM {cat}.shop.victim) SELECT * FROM batch",
        "found DELETE",
        "not valid Spark SQL",
    ),
    _c(
        "write_in_subquery",
        "SELECT * FROM batch WHERE order_id IN (SELECT * FROM (DELETE FROM {cat}.shop.victim))",
        "not valid SQL",
        "not valid Spark SQL",
    ),
    _c("multi_insert", "FROM batch INSERT INTO {cat}.shop.victim SELECT *", "found INSERT"),
    _c("select_into", "SELECT * INTO shop.evil FROM batch", "INTO", "not valid Spark SQL"),
    _c("variable_substitution", "SELECT '${spark.app.name}' AS leak FROM batch", "'${'", hygiene_only=True),
    Case("expr_reflect", "expression", f"{SET_PROP} IS NULL", "function reflect is not allowed"),
    Case(
        "expr_java_method",
        "expression",
        f"java_method('java.lang.System', 'setProperty', '{SYSPROP}', 'x') IS NULL",
        "function java_method",
    ),
    Case(
        "expr_breakout",
        "expression",
        "amount > 0) FROM batch; DROP TABLE {cat}.shop.victim; SELECT (1",
        "second statement",
        "not valid Spark SQL",
    ),
    Case("expr_path_subquery", "expression", "order_id IN (SELECT id FROM parquet.`/tmp`)", "by path"),
    Case(
        "expr_transform_subquery",
        "expression",
        "(SELECT count(*) FROM (SELECT TRANSFORM(order_id) USING 'cat' AS (x) FROM batch)) > 0",
        "TRANSFORM",
    ),
    Case(
        "expr_identifier",
        "expression",
        "IDENTIFIER('reflect')('java.lang.System', 'exit', 0) IS NULL",
        "not valid SQL",
        "IDENTIFIER",
    ),
    Case(
        "expr_write_subquery",
        "expression",
        "EXISTS (WITH x AS (DELETE FROM {cat}.shop.victim) SELECT 1)",
        "found DELETE",
        "not valid Spark SQL",
    ),
    Case("filter_reflect", "filter", f"{SET_PROP} IS NULL", "function reflect is not allowed"),
    Case("filter_exit", "filter", "reflect('java.lang.System', 'exit', 0) IS NULL", "function reflect is not allowed"),
    Case("filter_try_reflect", "filter", "try_reflect('java.lang.System', 'exit', 0) IS NULL", "function try_reflect"),
    Case(
        "filter_second_statement",
        "filter",
        "customer = 'c0'; DROP TABLE {cat}.shop.victim",
        "second statement",
        "not valid Spark SQL",
    ),
    Case("filter_bidi", "filter", "customer = 'c0' \u202e", "U+202E"),
    Case("filter_closes_paren", "filter", "customer = 'c0') OR (1 = 1", "not one expression", "not valid Spark SQL"),
    Case("query_delete", "query", "DELETE FROM shop.victim", "found DELETE"),
    Case("query_insert", "query", "INSERT INTO shop.victim SELECT * FROM shop.victim", "found INSERT"),
    Case("query_drop", "query", "DROP TABLE shop.victim", "found DROP TABLE"),
    Case("query_call", "query", "CALL {cat}.system.set_current_snapshot('shop.victim', {snap})", "found CALL"),
    Case("query_set", "query", "SET spark.wap.evil=1", "found SET"),
    Case("query_temp_view", "query", "CREATE OR REPLACE TEMP VIEW wap_evil AS SELECT 1", "found CREATE VIEW"),
    Case("query_alter", "query", "ALTER TABLE shop.victim CREATE BRANCH evil", "found ALTER TABLE"),
    Case("query_add_jar", "query", "ADD JAR {jar}", "found ADD JAR"),
    Case("query_two_statements", "query", "SELECT 1; DROP TABLE shop.victim", "second statement", "'DROP'"),
    Case("query_reflect", "query", f"SELECT {SET_PROP}", "function reflect"),
    Case("query_path", "query", "SELECT * FROM parquet.`/tmp`", "by path"),
]
CHECK_CASES = [c for c in HOSTILE if c.where != "query"]
QUERY_CASES = [c for c in HOSTILE if c.where == "query"]
SHAPE = {"custom_sql": "a single read-only query", "query": "a single read-only query"}

# Legit SQL of every shape the audit library and the CLI use: all accepted by both layers.
GOOD_QUERIES = [
    "SELECT * FROM batch WHERE amount < 0",
    "SELECT * FROM batch b LEFT ANTI JOIN shop.victim v ON b.order_id = v.order_id WHERE b.order_id > 1000",
    "WITH t AS (SELECT customer, sum(amount) AS s FROM batch GROUP BY customer) SELECT * FROM t WHERE s > 1e9",
    "SELECT customer, sum(amount) AS total FROM batch GROUP BY customer HAVING sum(amount) > 1e9",
    "SELECT * FROM (SELECT order_id, row_number() OVER (PARTITION BY order_id ORDER BY amount) AS rn FROM batch) "
    "WHERE rn > 1",
    "SELECT * FROM batch WHERE customer NOT IN (SELECT customer FROM shop.victim) AND order_id < 0",
    "SELECT order_id FROM batch WHERE amount < 0 UNION ALL SELECT order_id FROM batch WHERE amount IS NULL",
    "SELECT * FROM batch WHERE EXISTS (SELECT 1 FROM range(1) r WHERE r.id > 5)",
    "SELECT * FROM batch LATERAL VIEW explode(array(1, 2)) x AS n WHERE n > 2",
    "SELECT 'Ünïcödé; DROP TABLE x' AS s, `order_id` FROM batch WHERE 1 = 0 -- a comment",
    "SELECT * FROM batch WHERE email RLIKE '^\\\\s' /* no leading blanks */;",
]
RUN_EXPRESSIONS = [  # true on every row the runs below write
    "amount >= 0",
    "customer LIKE 'c%'",
    "coalesce(email, '') <> 'ünïcödé'",
    "transform(array(amount), x -> x + 1)[0] > amount",
]
GOOD_EXPRESSIONS = [
    *RUN_EXPRESSIONS,
    "customer = 'c0'",
    "amount <= (SELECT max(amount) FROM batch)",
    "EXISTS (SELECT 1 FROM shop.victim v WHERE v.order_id = order_id)",
    "email LIKE '%@%' -- has an at",
]


# --- fixtures -----------------------------------------------------------------------------------


def orders(n: int, start: int = 1) -> pa.Table:
    return pa.table(
        {
            "order_id": pa.array(range(start, start + n), pa.int64()),
            "customer": [f"c{i % 3}" for i in range(n)],
            "email": [f"user{i}@example.com" for i in range(n)],
            "amount": pa.array([10.0 + i for i in range(n)]),
        }
    )


@dataclass
class Lab:
    lh: Lakehouse
    spark: Any
    cat: str
    snap: int  # victim's first snapshot (CALL set_current_snapshot / rollback_to_snapshot would move to it)
    jar: str
    batch: str  # a small file for the hostile runs

    def sql(self, case: Case) -> str:
        return case.sql(self.cat, self.snap, self.jar)


@pytest.fixture(scope="module")
def lab(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    tmp = tmp_path_factory.mktemp("guard")
    lh = Lakehouse(make_config(tmp), spark=spark)
    land = tmp / "landing"
    assert run_wap(lh, "shop.orders", [str(write_parquet(land / "o.parquet", orders(5)))]).status == "published"
    assert run_wap(lh, "shop.victim", [str(write_parquet(land / "v1.parquet", orders(3)))]).status == "published"
    snap = lh.tables.head(V)
    assert (
        run_wap(lh, "shop.victim", [str(write_parquet(land / "v2.parquet", orders(3, start=10)))]).status == "published"
    )
    jar = tmp / "wap-evil.jar"
    jar.write_bytes(b"PK\x05\x06" + b"\x00" * 18)  # an empty zip: ADD JAR would accept it
    spark.conf.set(CANARY, "1")
    batch = write_parquet(land / "batch.parquet", orders(4, start=100))
    assert snap is not None
    return Lab(lh, spark, lh.config.lakehouse.catalog_name, snap, str(jar), str(batch))


def _ident(lab: Lab, t: TableName) -> str:
    return lab.lh.tables.ident(t)


def _iceberg(lab: Lab, t: TableName) -> tuple[Any, ...] | None:
    """The table's metadata, freshly loaded from the catalog: main's snapshot, refs, properties, schema."""
    try:
        tbl = lab.spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            lab.spark._jsparkSession, f"{lab.cat}.{t.dotted}"
        )
    except Exception:  # noqa: BLE001 - a table the hostile check dropped reads as None
        return None
    tbl.refresh()
    refs = sorted(f"{k}={tbl.refs().get(k).snapshotId()}" for k in tbl.refs().keySet().toArray())
    return (refs, str(tbl.properties().containsKey("evil")), str(tbl.schema()))


def state(lab: Lab) -> dict[str, Any]:
    """Everything a hostile statement could have changed, read back (metadata from the catalog, rows counted)."""
    spark = lab.spark
    jss = spark._jsparkSession
    sc = spark.sparkContext._jsc.sc()
    out: dict[str, Any] = {
        "orders": _iceberg(lab, T),
        "victim": _iceberg(lab, V),
        "evil": _iceberg(lab, EVIL),
        "conf_evil": spark.conf.get("spark.wap.evil", None),
        "canary": spark.conf.get(CANARY, None),
        "sysprop": spark._jvm.java.lang.System.getProperty(SYSPROP),
        "catalog": spark.catalog.currentCatalog(),
        "database": spark.catalog.currentDatabase(),
        "temp_views": str(jss.sessionState().catalog().listLocalTempViews("*")),
        "batch_view": spark.table("batch").columns
        if jss.sessionState().catalog().getTempView("batch").isDefined()
        else None,
        "jars": sc.listJars().size(),
        "files": sc.listFiles().size(),
    }
    if out["victim"] is not None:
        out["victim_cached"] = spark.catalog.isCached(_ident(lab, V))
        counts = spark.sql(
            f"SELECT 'o', count(*) FROM {_ident(lab, T)} UNION ALL SELECT 'v', count(*) FROM {_ident(lab, V)}"
        ).collect()
        out["rows"] = sorted(tuple(r) for r in counts)
    return out


def hostile_check(case: Case, text: str) -> Any:
    """The check as if declaration had been bypassed (model_construct skips pydantic's validators)."""
    if case.where == "custom_sql":
        return CustomSqlCheck.model_construct(check="custom_sql", sql=text)
    if case.where == "expression":
        return ExpressionCheck.model_construct(check="expression", sql=text)
    return NotNullCheck.model_construct(check="not_null", column="email", filter=text)


def _assert_rejected_run(lab: Lab, case: Case, before: dict[str, Any], words: list[str]) -> None:
    res = run_wap(lab.lh, "shop.orders", [lab.batch], extra_checks=[hostile_check(case, lab.sql(case))])
    assert (res.status, res.exit_code) == ("failed", 2), res.message
    for w in ["on shop.orders", *words]:
        assert w in res.message, (w, res.message)
    assert state(lab) == before


# --- layer 1 at declaration: no Spark -------------------------------------------------------------


@pytest.mark.parametrize("case", HOSTILE, ids=lambda c: c.id)
def test_layer1_rejects_at_declaration_without_spark(case: Case) -> None:
    text = case.sql()
    with pytest.raises(sqlguard.UnsafeSql) as g:
        if case.where in ("custom_sql", "query"):
            sqlguard.check_query_text(text, case.where)
        else:
            sqlguard.check_expression_text(text, case.where)
    assert case.word in g.value.problem and g.value.exit_code == 2, g.value.problem
    if case.where == "query":
        with pytest.raises(UsageError) as q:
            read_only(text)  # no session given: layer 1 only
        assert case.word in q.value.message and q.value.message.startswith("wap query "), q.value.message
        assert q.value.exit_code == 2
        return
    decl = {"custom_sql": {"check": "custom_sql", "sql": text}, "expression": {"check": "expression", "sql": text}}.get(
        case.where, {"check": "not_null", "column": "email", "filter": text}
    )
    with pytest.raises(ConfigError) as e:
        parse_config({"tables": {"shop.orders": {"checks": [decl]}}})
    msg = str(e.value)
    key = "filter" if case.where == "filter" else "sql"
    assert f'[tables."shop.orders"] checks[0].{key}: {g.value.problem}' in msg, msg
    assert e.value.exit_code == 2
    # Declared in Python: the same validator, as pydantic's ValidationError.
    build = {"custom_sql": C.custom_sql, "expression": C.expression}.get(case.where)
    with pytest.raises(pydantic.ValidationError) as v:
        build(text) if build else C.not_null("email", filter=text)
    assert case.word in str(v.value)


def test_declaration_message_reads_well() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(
            {"tables": {"shop.orders": {"checks": [{"check": "custom_sql", "sql": "DELETE FROM shop.orders"}]}}}
        )
    assert str(e.value).splitlines()[1] == (
        '  - [tables."shop.orders"] checks[0].sql: custom_sql must be a single read-only query; found DELETE '
        "(checks only read: write one SELECT over the view `batch`, e.g. SELECT * FROM batch WHERE amount < 0) "
        "(got 'DELETE FROM shop.orders')"
    )


def test_layer1_accepts_legit_sql() -> None:
    for q in GOOD_QUERIES:
        sqlguard.check_query_text(q, "custom_sql")
        read_only(q)
    for x in [*GOOD_EXPRESSIONS, "vendor_id = 2", "dropoff_at >= pickup_at"]:
        sqlguard.check_expression_text(x, "filter")
    parse_config({"tables": {"a.b": {"checks": [{"check": "custom_sql", "sql": q} for q in GOOD_QUERIES]}}})


# --- layer 2 alone: Spark's parser ----------------------------------------------------------------


def _layer2(spark: Any, case: Case, text: str) -> sqlguard.UnsafeSql:
    with pytest.raises(sqlguard.UnsafeSql) as e:
        if case.where in ("custom_sql", "query"):
            sqlguard.check_query_plan(spark, text, case.where)
        else:
            sqlguard.check_expression_plan(spark, text, case.where)
    return e.value


@pytest.mark.spark
@pytest.mark.parametrize("case", HOSTILE, ids=lambda c: c.id)
def test_layer2_alone_rejects_every_hostile_text(lab: Lab, case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    before = state(lab) if case.id in ("delete", "set", "reset", "drop_table") else None
    text = lab.sql(case)
    err = _layer2(lab.spark, case, text)
    assert (case.word2 or case.word) in err.problem, err.problem
    if not case.hygiene_only:
        # Without the character rules both layers share, Spark's parser and the plan whitelist still reject it.
        monkeypatch.setattr(sqlguard, "_check_hygiene", lambda *a, **k: None)
        monkeypatch.setattr(sqlguard, "check_query_text", lambda *a, **k: None)
        monkeypatch.setattr(sqlguard, "check_expression_text", lambda *a, **k: None)
        _layer2(lab.spark, case, text)
    if before is not None:
        assert state(lab) == before  # parsing ran nothing


@pytest.mark.spark
def test_layer2_catches_what_sqlglot_reads_differently(lab: Lab) -> None:
    # sqlglot reads `STREAM batch` as a table named STREAM aliased batch; Spark as a streaming read of batch.
    text = "SELECT * FROM STREAM batch"
    sqlguard.check_query_text(text, "custom_sql")
    with pytest.raises(sqlguard.UnsafeSql, match="STREAM"):
        sqlguard.check_query_plan(lab.spark, text, "custom_sql")
    # Options that name a path: sqlglot cannot parse them, Spark's whitelist walk rejects the option.
    with pytest.raises(sqlguard.UnsafeSql, match="path"):
        sqlguard.check_query_plan(lab.spark, "SELECT * FROM batch WITH ('path' = '/tmp')", "custom_sql")


@pytest.mark.spark
def test_layer2_accepts_legit_sql(lab: Lab) -> None:
    for q in [
        *GOOD_QUERIES,
        "SELECT * FROM shop.victim VERSION AS OF 'main'",
        "SELECT * FROM shop.victim TABLESAMPLE (50 PERCENT) t",
    ]:
        sqlguard.check_query_plan(lab.spark, q, "custom_sql")
    for x in GOOD_EXPRESSIONS:
        sqlguard.check_expression_plan(lab.spark, x, "filter")


# --- through real runs ------------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("case", CHECK_CASES, ids=lambda c: c.id)
def test_hostile_check_fails_the_run_and_changes_nothing(lab: Lab, case: Case) -> None:
    before = state(lab)
    assert before["victim"] and before["rows"] == [("o", 5), ("v", 6)] and before["canary"] == "1"
    _assert_rejected_run(lab, case, before, [case.word])


@pytest.mark.spark
@pytest.mark.parametrize(
    "case",
    [
        c
        for c in CHECK_CASES
        if not c.hygiene_only
        and c.id
        in {
            "delete",
            "drop_table",
            "temp_view",
            "call_set_current",
            "set",
            "reset",
            "add_jar",
            "use",
            "alter_branch",
            "two_statements",
            "reflect_select",
            "reflect_in_window",
            "parquet_path",
            "transform_script",
            "expr_reflect",
            "expr_path_subquery",
            "filter_reflect",
            "filter_second_statement",
            "lookalike",
        }
    ],
    ids=lambda c: c.id,
)
def test_spark_layer_alone_stops_hostile_checks_in_a_run(lab: Lab, case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    """Layer 1 switched off everywhere (declaration, validation, audit): layer 2 alone keeps the lakehouse intact."""
    monkeypatch.setattr(sqlguard, "check_query_text", lambda *a, **k: None)
    monkeypatch.setattr(sqlguard, "check_expression_text", lambda *a, **k: None)
    before = state(lab)
    _assert_rejected_run(lab, case, before, [case.word2 or case.word])


@pytest.mark.spark
def test_bad_check_on_first_run_creates_nothing(lab: Lab) -> None:
    fresh = TableName.parse("shop.fresh")
    for text in ["DROP TABLE {cat}.shop.victim", "SELECT 1; DELETE FROM {cat}.shop.victim"]:
        before = state(lab)
        chk = CustomSqlCheck.model_construct(check="custom_sql", sql=text.replace("{cat}", lab.cat))
        res = run_wap(lab.lh, "shop.fresh", [lab.batch], extra_checks=[chk])
        assert (res.status, res.exit_code) == (
            "failed",
            2,
        ) and "custom_sql must be a single read-only query" in res.message
        assert not lab.lh.tables.exists(fresh)
        assert state(lab) == before


@pytest.mark.spark
def test_audit_time_execution_rechecks(lab: Lab) -> None:
    """A plan built without validate_checks (a resumed run) still never hands hostile SQL to spark.sql."""
    before = state(lab)
    df = lab.spark.createDataFrame([(1, "a@b.c")], "order_id BIGINT, email STRING")
    chk = CustomSqlCheck.model_construct(check="custom_sql", sql=f"DROP TABLE {lab.cat}.shop.victim")
    with pytest.raises(ConfigError, match="found DROP TABLE"):
        evaluate(AuditPlan([chk], df.columns, table="shop.orders"), df, samples=False)
    bad_filter = NotNullCheck.model_construct(check="not_null", column="email", filter=f"{SET_PROP} IS NULL")
    with pytest.raises(ConfigError, match="function reflect is not allowed"):
        AuditPlan([bad_filter], df.columns, table="shop.orders")
    assert state(lab) == before


@pytest.mark.spark
def test_legit_checks_still_run(lab: Lab, tmp_path: Path) -> None:
    lh = Lakehouse(make_config(tmp_path), spark=lab.spark)
    # Other tables are read by their full name (the session's current catalog is not the lakehouse's).
    checks = [
        C.custom_sql(q.replace("shop.victim", lh.tables.ident(V)), name=f"q{i}") for i, q in enumerate(GOOD_QUERIES)
    ]
    checks += [C.expression(x, name=f"x{i}") for i, x in enumerate(RUN_EXPRESSIONS)]
    checks += [C.not_null("email", filter="customer = 'c0'"), C.between("amount", 0, 1000, filter="amount > 0")]
    # The victim table of the lab is joined by name: publish one in this lakehouse too.
    assert run_wap(lh, "shop.victim", [lab.batch]).status == "published"
    res = run_wap(
        lh, "shop.orders", [str(write_parquet(tmp_path / "ok.parquet", orders(6, start=500)))], extra_checks=checks
    )
    assert res.status == "published", res.message
    assert {c["status"] for c in res.checks} == {"passed"}
    negative = write_parquet(
        tmp_path / "neg.parquet", orders(2, start=900).set_column(3, "amount", pa.array([-1.0, 5.0]))
    )
    bad = run_wap(
        lh, "shop.orders", [str(negative)], extra_checks=[C.custom_sql("SELECT * FROM batch WHERE amount < 0")]
    )
    assert bad.status == "blocked" and bad.checks[0]["failing_rows"] == 1


# --- wap query ----------------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("layers", ["both", "spark_only"])
def test_wap_query_runs_only_reads(lab: Lab, layers: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if layers == "spark_only":
        monkeypatch.setattr(sqlguard, "check_query_text", lambda *a, **k: None)
    for case in QUERY_CASES:
        before = state(lab)
        with pytest.raises(UsageError) as e:
            run_query(lab.lh, lab.sql(case))
        word = case.word if layers == "both" else (case.word2 or case.word)
        assert word in e.value.message and e.value.exit_code == 2, (case.id, e.value.message)
        assert state(lab) == before, case.id
    current = lab.spark.catalog.currentCatalog()
    cols, rows = run_query(lab.lh, "WITH v AS (SELECT * FROM shop.victim) SELECT count(*) AS n FROM v")
    assert cols == ["n"] and rows == [[6]]
    cols, rows = run_query(lab.lh, "SELECT count(*) AS n FROM shop.victim", as_of=str(lab.snap))
    assert rows == [[3]]
    lab.spark.catalog.setCurrentCatalog(current)  # run_query switches the shared session to the lakehouse's


@pytest.mark.spark
def test_wap_query_cli_exit_code(lab: Lab, tmp_path: Path) -> None:
    from wapflow.cli import app

    cfg = lab.lh.config
    toml = tmp_path / "wap.toml"
    toml.write_text(f'[lakehouse]\nwarehouse = "{cfg.warehouse_location()}"\ncatalog_name = "{lab.cat}"\n')
    before = state(lab)
    r = CliRunner().invoke(app, ["query", "DROP TABLE shop.victim", "--config", str(toml)])
    assert r.exit_code == 2 and "wap query must be a single read-only query; found DROP TABLE" in r.stderr
    assert state(lab) == before
