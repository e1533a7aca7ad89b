"""The SQL cases both layers of the SQL guard are tested with (tests/unit/test_sql_guard.py: sqlglot at
declaration, no Spark; tests/spark/test_sql_guard.py: Spark's parser and real runs): hostile texts, each with
where it is declared and the word its refusal must name, and legit SQL of every shape the checks and the CLI use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wapflow.sql.identifiers import TableName

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
