"""Checks only read: SQL a person wrote is accepted only as one read-only query or one pure expression.

custom_sql and expression checks, every check's filter and `wap query` are text that Spark would run
with the lakehouse's credentials, and `spark.sql` executes commands (DELETE, DROP, CALL, SET, ADD JAR...)
eagerly, even when only a schema is asked for. So the text is accepted by two independent layers, both
before anything analyses or runs it:

1. `check_query_text` / `check_expression_text` (no Spark): sqlglot's syntax tree must be one query
   (or one expression) with no statement node that can change anything. It runs where a check is
   declared (pydantic validators), so a hostile check never reaches a session.
2. `check_query_plan` / `check_expression_plan`: the session's own parser (Iceberg's extensions
   included) gives the unresolved plan Spark would run, and every node of it must be a read-only query
   node (a whitelist). Parsing executes nothing.

Either layer alone rejects every statement that could change something; if one parser sees the text
differently from Spark, the other still stands. Both also reject characters that can hide statements
(control, format and bidi characters, lookalike letters), calls into the JVM (reflect, java_method)
and relations that read files by path (parquet.`/path`).
"""

from __future__ import annotations

import functools
import logging
import re
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from wapflow.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from sqlglot import exp

# sqlglot is imported where layer 1 runs, not with this module: every command loads the config (and so this
# module), while only text a person wrote (custom_sql, filter, expression, `wap query`) needs the parser.

# A Py4J proxy of a JVM object (Scala plan nodes, expressions, collections): py4j ships no types.
JavaObject = Any

QUERY_SHAPE = "a single read-only query"
EXPRESSION_SHAPE = "a single SQL expression without side effects"
QUERY_HINT = "checks only read: write one SELECT over the view `batch`, e.g. SELECT * FROM batch WHERE amount < 0"
EXPRESSION_HINT = "write a condition over the batch's columns, e.g. dropoff_at >= pickup_at"

# Functions that reach the JVM (arbitrary static methods), and IDENTIFIER(), which hides a name in a string.
FORBIDDEN_FUNCTIONS = frozenset({"reflect", "java_method", "try_reflect", "identifier"})
# Table-valued functions that only generate rows; any other (file readers, user UDTFs) is rejected.
ALLOWED_TABLE_FUNCTIONS = frozenset(
    {
        "range",
        "explode",
        "explode_outer",
        "inline",
        "inline_outer",
        "posexplode",
        "posexplode_outer",
        "json_tuple",
        "stack",
        "variant_explode",
        "variant_explode_outer",
        "sql_keywords",
        "collations",
    }
)
# Data source names Spark accepts in `format`.`path` (spark.sql.runSQLOnFiles); a class name works too.
FILE_SOURCES = frozenset(
    {
        "parquet",
        "csv",
        "json",
        "orc",
        "text",
        "binaryfile",
        "avro",
        "delta",
        "jdbc",
        "xml",
        "iceberg",
        "hive",
        "libsvm",
        "image",
        "kafka",
        "noop",
        "console",
        "rate",
        "socket",
        "memory",
        "hudi",
        "protobuf",
    }
)
_TVF_NOTE = " (only row generators such as range, explode, inline, stack)"
_PATH_CHARS = ("/", "\\", ":")
_FUNC_IN_TEXT = re.compile(r"'(?:[\w`]+\.)*`?(reflect|java_method|try_reflect)`?\(", re.IGNORECASE)
_MAX_PLAN_NODES = 20_000


class UnsafeSql(ConfigError):
    """SQL text a guard rejected (a ConfigError: exit code 2); `problem` and `hint` let callers name the place."""

    def __init__(self, problem: str, hint: str) -> None:
        super().__init__(problem, hint=hint)
        self.problem = problem

    def one_line(self) -> str:
        """Problem and hint in one line, for pydantic (it reports the message with the key's location)."""
        return f"{self.problem} ({self.hint})"


def printable(text: str) -> str:
    """The text with control, format and non-ASCII space characters escaped, safe to put in a message."""
    return "".join(f"\\u{ord(ch):04x}" if _hidden(ch) or (ch.isspace() and ch not in " \n") else ch for ch in text)


# --- text hygiene (both layers) ------------------------------------------------------------------


def _hidden(ch: str) -> bool:
    if ch in "\t\n\r":
        return False
    cat = unicodedata.category(ch)
    return cat[0] == "C" or cat in ("Zl", "Zp")  # Cc Cf Cs Co Cn: controls, bidi, zero-width, unassigned


def _describe_char(ch: str) -> str:
    fallback = "a control character" if unicodedata.category(ch) == "Cc" else "unnamed"
    return f"U+{ord(ch):04X} ({unicodedata.name(ch, fallback)})"


def _code_positions(text: str) -> Iterator[int]:
    """Positions outside 'strings', "strings", r'raw' strings and `identifiers`, as Spark lexes them.

    Comments count as code (plain ASCII there too).
    """
    i, n = 0, len(text)
    quote: str | None = None
    raw = False
    while i < n:
        ch = text[i]
        if quote is not None:
            if ch == "\\" and quote != "`" and not raw:
                i += 2
                continue
            if ch == quote:
                quote = None
            i += 1
            continue
        if ch in "'\"`":
            quote = ch
            prefix = text[i - 2 : i] if i >= 2 else " " + text[:i]
            raw = ch != "`" and prefix[-1:] in ("r", "R") and not (prefix[0].isalnum() or prefix[0] == "_")
        yield i
        i += 1


def _check_hygiene(text: str, what: str, shape: str, hint: str) -> None:
    """Characters that can hide or disguise a statement, and ${...}, which Spark substitutes before parsing."""
    for i, ch in enumerate(text):
        if _hidden(ch):
            raise UnsafeSql(
                f"{what} must be {shape}; it contains the invisible or control character {_describe_char(ch)} "
                f"at position {i}, which can hide a statement",
                hint="retype it as plain text; " + hint,
            )
    for i in _code_positions(text):
        ch = text[i]
        if ord(ch) > 127:
            raise UnsafeSql(
                f"{what} must be {shape}; it contains the non-ASCII character {_describe_char(ch)} at position {i} "
                "outside a quoted string or identifier",
                hint="SQL keywords and names are plain ASCII; put other text inside 'quotes' or `backticks`",
            )
    if "${" in text:
        raise UnsafeSql(
            f"{what} must be {shape}; it contains '${{', which Spark replaces with a configuration value",
            hint="write the value itself; ${...} variable substitution is not allowed",
        )


# --- layer 1: sqlglot ------------------------------------------------------------------------------


@functools.cache
def _query_roots() -> tuple[type[exp.Expr], ...]:
    from sqlglot import exp

    return (exp.Select, exp.SetOperation, exp.Subquery, exp.Values)


# Statement kinds that can change something (or are not a query), rejected anywhere in the tree.
_STATEMENT_NAMES = (
    "Insert",
    "Update",
    "Delete",
    "Merge",
    "Create",
    "Drop",
    "Alter",
    "AlterRename",
    "Command",
    "Set",
    "Use",
    "Cache",
    "Uncache",
    "Refresh",
    "Describe",
    "Show",
    "LoadData",
    "Copy",
    "Transaction",
    "Commit",
    "Rollback",
    "TruncateTable",
    "Grant",
    "Revoke",
    "Pragma",
    "Declare",
    "MultitableInserts",
    "Into",
    "Kill",
    "Analyze",
    "Summarize",
    "Export",
    "Execute",
    "Comment",
    "Attach",
    "Detach",
    "Install",
    "Put",
    "Get",
    "StoredProcedure",
    "QueryTransform",
)


@functools.cache
def _statement_nodes() -> tuple[type[exp.Expr], ...]:
    from sqlglot import exp

    return tuple(
        getattr(exp, n)
        for n in _STATEMENT_NAMES
        if isinstance(getattr(exp, n, None), type) and not issubclass(getattr(exp, n), exp.Func)
    )


_KIND_NAMES = {
    "Insert": "INSERT",
    "MultitableInserts": "INSERT",
    "Update": "UPDATE",
    "Delete": "DELETE",
    "Merge": "MERGE",
    "TruncateTable": "TRUNCATE TABLE",
    "Set": "SET",
    "Use": "USE",
    "Cache": "CACHE TABLE",
    "Uncache": "UNCACHE TABLE",
    "Refresh": "REFRESH",
    "Describe": "DESCRIBE",
    "LoadData": "LOAD DATA",
    "Grant": "GRANT",
    "Revoke": "REVOKE",
    "Declare": "DECLARE",
    "Into": "SELECT ... INTO (a table write)",
    "QueryTransform": "SELECT TRANSFORM (it runs an external program)",
}

_log = logging.getLogger("sqlglot")


@contextmanager
def _quiet_sqlglot() -> Iterator[None]:
    """sqlglot logs a warning when it falls back to a Command; the rejection message says it better."""
    level = _log.level
    _log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        _log.setLevel(level)


def _kind(node: exp.Expr) -> str:
    """The statement's kind in SQL words (DELETE, DROP TABLE, CALL, ADD JAR...)."""
    from sqlglot import exp

    name = type(node).__name__
    if isinstance(node, exp.Command):
        head = str(node.this or "").upper()
        rest = str(node.expression or "").split()
        nxt = rest[0].upper() if rest and rest[0].isalpha() else ""
        return f"{head} {nxt}".strip() if head in ("ADD", "ALTER", "MSCK", "CREATE", "DROP", "SHOW", "LIST") else head
    if isinstance(node, exp.Insert) and node.args.get("overwrite"):
        return "INSERT OVERWRITE"
    if isinstance(node, (exp.Create, exp.Drop, exp.Alter)):
        kind = str(node.args.get("kind") or "").upper()
        return f"{name.upper()} {kind}".strip()
    if name in _KIND_NAMES:
        return _KIND_NAMES[name]
    words = node.sql(dialect="spark").split()
    return words[0].upper() if words else name.upper()


def _parse(text: str, what: str, hint: str) -> list[exp.Expr]:
    import sqlglot
    from sqlglot import exp

    try:
        with _quiet_sqlglot():
            parsed = sqlglot.parse(text, read="spark")
    except sqlglot.errors.SqlglotError as e:
        first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        raise UnsafeSql(f"{what} is not valid SQL: {printable(first)[:300]}", hint=hint) from None
    return [s for s in parsed if s is not None and not isinstance(s, exp.Semicolon)]


def _function_names(node: exp.Func) -> set[str]:
    """Every name the call can go by: as written, sqlglot's names for it, and as Spark SQL would spell it."""
    from sqlglot import exp

    if isinstance(node, exp.Anonymous):
        return {str(node.name).lower()}
    rendered = node.sql(dialect="spark").split("(", 1)[0].strip().lower()
    return {n.lower() for n in type(node).sql_names()} | {node.key.lower(), rendered}


def _table_function_problem(node: exp.Func) -> str | None:
    names = _function_names(node)
    problem = _function_problem(names)
    if not problem and not names & ALLOWED_TABLE_FUNCTIONS:
        problem = f"table function {sorted(names)[0]} is not allowed{_TVF_NOTE}"
    return problem


def _function_problem(names: set[str]) -> str | None:
    bad = sorted(names & FORBIDDEN_FUNCTIONS)
    if not bad:
        return None
    if bad == ["identifier"]:
        return "IDENTIFIER(...) is not allowed (it hides a table or function name inside a string)"
    return f"function {bad[0]} is not allowed (it calls Java methods)"


def _relation_problem(parts: list[str]) -> str | None:
    """Relations that read files or URLs by path: parquet.`/tmp/x`, cat.`s3://b/t` (Iceberg path tables)."""
    shown = ".".join(f"`{p}`" for p in parts)
    if any(c in p for p in parts for c in _PATH_CHARS):
        return f"{printable(shown)} reads a file or location by path, which is not allowed"
    if len(parts) == 2 and (parts[0].lower() in FILE_SOURCES or "." in parts[0]):
        return (
            f"{printable(shown)} reads files by path through the '{printable(parts[0])}' data source, "
            "which is not allowed (a namespace of that name must be qualified with its catalog)"
        )
    return None


def _check_tree(root: exp.Expr, what: str, shape: str, hint: str) -> None:
    """No statement node anywhere, no forbidden function, no file-reading relation or table function."""
    from sqlglot import exp

    for node in root.walk():
        problem: str | None = None
        if isinstance(node, _statement_nodes()):
            problem = f"found {_kind(node)}"
        elif isinstance(node, exp.Table):
            if isinstance(node.this, exp.Func):
                problem = _table_function_problem(node.this)
            else:
                problem = _relation_problem([str(p.name) for p in node.parts])
        elif isinstance(node, exp.Lateral) and isinstance(node.this, exp.Func):
            problem = _table_function_problem(node.this)  # LATERAL VIEW f(...), JOIN LATERAL f(...)
        elif isinstance(node, exp.Func):
            problem = _function_problem(_function_names(node))
        if problem:
            raise UnsafeSql(f"{what} must be {shape}; {problem}", hint=hint)


def check_query_text(text: str, what: str, *, hint: str = QUERY_HINT) -> None:
    """Layer 1 (no Spark): `text` must be exactly one read-only query. Raises UnsafeSql."""
    _check_hygiene(text, what, QUERY_SHAPE, hint)
    statements = _parse(text, what, hint)
    if not statements:
        raise UnsafeSql(f"{what} must be {QUERY_SHAPE}; it is empty", hint=hint)
    if len(statements) > 1:
        raise UnsafeSql(
            f"{what} must be {QUERY_SHAPE}; found a second statement after ';' ({_kind(statements[1])})", hint=hint
        )
    root = statements[0]
    if not isinstance(root, _query_roots()):
        raise UnsafeSql(f"{what} must be {QUERY_SHAPE}; found {_kind(root)}", hint=hint)
    _check_tree(root, what, QUERY_SHAPE, hint)


def check_expression_text(text: str, what: str, *, hint: str = EXPRESSION_HINT) -> None:
    """Layer 1 (no Spark): `text` must be one expression (subqueries only as plain queries). Raises UnsafeSql."""
    import sqlglot
    from sqlglot import exp

    _check_hygiene(text, what, EXPRESSION_SHAPE, hint)
    try:  # only for a clearer message: `a = 1; DROP TABLE t` is two statements, not a syntax error
        with _quiet_sqlglot():
            alone = [s for s in sqlglot.parse(text, read="spark") if s is not None and not isinstance(s, exp.Semicolon)]
    except sqlglot.errors.SqlglotError:
        alone = []
    if len(alone) > 1:
        raise UnsafeSql(
            f"{what} must be {EXPRESSION_SHAPE}; found a second statement after ';' ({_kind(alone[1])})", hint=hint
        )
    # Newlines: a trailing -- comment in the text must not swallow the closing parenthesis.
    statements = _parse(f"SELECT (\n{text}\n)", what, hint)
    if len(statements) != 1:
        detail = "found a second statement after ';'" if len(statements) > 1 else "it is empty"
        raise UnsafeSql(f"{what} must be {EXPRESSION_SHAPE}; {detail}", hint=hint)
    root = statements[0]
    clauses = {k for k, v in root.args.items() if v} - {"expressions"}
    projections = root.expressions if isinstance(root, exp.Select) else []
    single = len(projections) == 1 and isinstance(projections[0], exp.Paren)
    if not isinstance(root, exp.Select) or clauses or not single:
        raise UnsafeSql(
            f"{what} must be {EXPRESSION_SHAPE}; it is not one expression (it closes a parenthesis it did not open "
            "or adds clauses)",
            hint=hint,
        )
    _check_tree(root, what, EXPRESSION_SHAPE, hint)


# --- layer 2: Spark's parser ----------------------------------------------------------------------

_LOGICAL = "org.apache.spark.sql.catalyst.plans.logical."
_ANALYSIS = "org.apache.spark.sql.catalyst.analysis."
# Unresolved (parsed) plan nodes of read-only queries, by class, as Spark 4.1's parser produces them.
READ_ONLY_PLAN_NODES = frozenset(
    [
        _LOGICAL + n
        for n in (
            "Project",
            "Filter",
            "Aggregate",
            "Sort",
            "GlobalLimit",
            "LocalLimit",
            "LimitAll",
            "Offset",
            "Tail",
            "Distinct",
            "Deduplicate",
            "Union",
            "Intersect",
            "Except",
            "Join",
            "LateralJoin",
            "LocalRelation",
            "OneRowRelation",
            "SubqueryAlias",
            "UnresolvedWith",
            "WithCTE",
            "CTERelationDef",
            "CTERelationRef",
            "Window",
            "WithWindowDefinition",
            "Generate",  # LATERAL VIEW: only ALLOWED_TABLE_FUNCTIONS
            "Pivot",
            "Unpivot",
            "Expand",
            "Sample",
            "Repartition",
            "RepartitionByExpression",
            "RebalancePartitions",
            "Range",
            "UnresolvedHint",
            "PipeOperator",
        )
    ]
    + [
        _ANALYSIS + n
        for n in (
            "UnresolvedRelation",
            "RelationTimeTravel",
            "UnresolvedInlineTable",
            "UnresolvedSubqueryColumnAliases",
            "UnresolvedTableValuedFunction",  # only ALLOWED_TABLE_FUNCTIONS
            "UnresolvedTVFAliases",
            "UnresolvedHaving",
        )
    ]
)
_SPARK_KINDS = {
    "InsertIntoStatement": "INSERT",
    "DeleteFromTable": "DELETE",
    "UpdateTable": "UPDATE",
    "MergeIntoTable": "MERGE",
    "Call": "CALL",
    "SetCommand": "SET",
    "ResetCommand": "RESET",
    "SetCatalogAndNamespace": "USE",
    "RepairTable": "MSCK REPAIR TABLE",
    "AddJarsCommand": "ADD JAR",
    "AddFilesCommand": "ADD FILE",
    "AddArchivesCommand": "ADD ARCHIVE",
    "CreateViewCommand": "CREATE VIEW",
    "CreateTableAsSelect": "CREATE TABLE ... AS SELECT",
    "ReplaceTableAsSelect": "REPLACE TABLE ... AS SELECT",
    "CreateOrReplaceBranch": "ALTER TABLE ... CREATE BRANCH",
    "CreateOrReplaceTag": "ALTER TABLE ... CREATE TAG",
    "SetTableProperties": "ALTER TABLE ... SET TBLPROPERTIES",
    "AddColumns": "ALTER TABLE ... ADD COLUMNS",
    "ScriptTransformation": "SELECT TRANSFORM (it runs an external program)",
    "PlanWithUnresolvedIdentifier": "IDENTIFIER(...) (it hides a table name inside a string)",
    "UnresolvedExecuteImmediate": "EXECUTE IMMEDIATE",
    "CompoundBody": "a BEGIN ... END script",
    "CreateVariable": "DECLARE VARIABLE",
    "SetVariable": "SET VAR",
    "ClearCacheCommand": "CLEAR CACHE",
    "ExplainCommand": "EXPLAIN",
}


def _spark_kind(simple: str) -> str:
    name = simple.rstrip("$")
    if name in _SPARK_KINDS:
        return f"{_SPARK_KINDS[name]} (Spark's {name})"
    words = re.sub(r"(Command|Statement|Exec)$", "", name) or name
    return f"{re.sub(r'(?<!^)(?=[A-Z])', ' ', words).upper()} (Spark's {name})"


def _seq(s: JavaObject) -> list[JavaObject]:
    """A Scala Seq (through Py4J) as a list."""
    return [s.apply(i) for i in range(s.size())]


class _SparkTree:
    """Walks a parsed plan or expression through Py4J and rejects anything that is not a pure read."""

    def __init__(self, jvm: JavaObject, what: str, shape: str, hint: str) -> None:
        self.what, self.shape, self.hint = what, shape, hint
        self.left = _MAX_PLAN_NODES
        self.subquery_class = jvm.java.lang.Class.forName(
            "org.apache.spark.sql.catalyst.expressions.SubqueryExpression"
        )

    def reject(self, problem: str) -> UnsafeSql:
        return UnsafeSql(f"{self.what} must be {self.shape}; {problem}", hint=self.hint)

    def _spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise self.reject("it is too large to check")

    def text(self, tree_string: str) -> None:
        """Belt and braces: a forbidden call anywhere in Spark's printout of the tree (incl. maps it holds)."""
        m = _FUNC_IN_TEXT.search(tree_string)
        if m:
            raise self.reject(f"function {m.group(1).lower()} is not allowed (it calls Java methods)")

    def plan(self, node: JavaObject) -> None:
        self._spend()
        cls = str(node.getClass().getName())
        simple = cls.rsplit(".", 1)[-1]
        if cls not in READ_ONLY_PLAN_NODES:
            raise self.reject(f"found {_spark_kind(simple)}")
        if simple == "UnresolvedRelation":
            problem = _relation_problem([str(p) for p in _seq(node.multipartIdentifier())])
            if problem:
                raise self.reject(problem)
            if node.isStreaming():
                raise self.reject("found a STREAM relation")
            self._relation_options(node)
        elif simple == "RelationTimeTravel":
            self.plan(node.relation())  # a field, not a child
        elif simple == "UnresolvedTableValuedFunction":
            parts = [str(p).lower() for p in _seq(node.name())]
            if len(parts) != 1 or parts[0] not in ALLOWED_TABLE_FUNCTIONS:
                raise self.reject(f"table function {printable('.'.join(parts))} is not allowed{_TVF_NOTE}")
        elif simple == "Generate":  # LATERAL VIEW f(...): f must be a row generator too
            gen = node.generator()
            if str(gen.getClass().getSimpleName()) == "UnresolvedGenerator":
                name = str(gen.name().funcName()).lower()
                if name not in ALLOWED_TABLE_FUNCTIONS:
                    problem = _function_problem({name}) or f"generator {printable(name)} is not allowed{_TVF_NOTE}"
                    raise self.reject(problem)
        elif simple == "WithWindowDefinition":
            specs = node.windowDefinitions().valuesIterator()  # a Map: not among expressions()
            while specs.hasNext():
                self.expression(specs.next())
        for e in _seq(node.expressions()):
            self.expression(e)
        for child in _seq(node.children()):
            self.plan(child)
        for inner in _seq(node.innerChildren()):  # subqueries, CTE definitions, lateral subqueries
            self.plan(inner)

    def _relation_options(self, node: JavaObject) -> None:
        keys = node.options().keySet().iterator()
        while keys.hasNext():
            if "path" in str(keys.next()).lower():
                raise self.reject("a relation option names a path, which is not allowed")

    def expression(self, node: JavaObject) -> None:
        self._spend()
        simple = str(node.getClass().getSimpleName())
        name: str | None = None
        if simple == "UnresolvedFunction":
            name = str(_seq(node.nameParts())[-1])
        elif simple == "UnresolvedGenerator":
            name = str(node.name().funcName())
        elif simple in ("ExpressionWithUnresolvedIdentifier", "PlanWithUnresolvedIdentifier"):
            name = "identifier"
        if name is not None:
            problem = _function_problem({name.lower()})
            if problem:
                raise self.reject(problem)
        if self.subquery_class.isInstance(node):
            sub = node.plan()
            self.text(str(sub.treeString()))
            self.plan(sub)
        for child in _seq(node.children()):
            self.expression(child)


def _parser(spark: SparkSession) -> tuple[JavaObject, JavaObject] | None:
    """The session's SQL parser and JVM view, or None on Spark Connect (no JVM on this side)."""
    from wapflow.spark.kind import is_connect

    if is_connect(spark):
        return None
    jss, jvm = getattr(spark, "_jsparkSession", None), getattr(spark, "_jvm", None)
    return None if jss is None or jvm is None else (jss.sessionState().sqlParser(), jvm)


def _spark_parse_error(e: BaseException) -> str:
    from wapflow.spark.errors import describe

    return printable(describe(e))[:300]


def check_query_plan(spark: SparkSession, text: str, what: str, *, hint: str = QUERY_HINT) -> None:
    """Layer 2: Spark's parser must see one query made only of read-only plan nodes. Raises UnsafeSql."""
    _check_hygiene(text, what, QUERY_SHAPE, hint)
    jvm_side = _parser(spark)
    if jvm_side is None:
        # Spark Connect: the client has no parser to ask, and analysing spark.sql(text) is not safe
        # (Connect executes commands eagerly too). Only layer 1 stands here; run it explicitly.
        check_query_text(text, what, hint=hint)
        return
    parser, jvm = jvm_side
    try:
        plan = parser.parsePlan(text)
    except Exception as e:  # noqa: BLE001 - ParseException through Py4J
        raise UnsafeSql(f"{what} is not valid Spark SQL: {_spark_parse_error(e)}", hint=hint) from None
    walker = _SparkTree(jvm, what, QUERY_SHAPE, hint)
    walker.plan(plan)
    walker.text(str(plan.treeString()))


def check_expression_plan(spark: SparkSession, text: str, what: str, *, hint: str = EXPRESSION_HINT) -> None:
    """Layer 2: Spark's expression parser; no forbidden call, subqueries only of read-only nodes. Raises UnsafeSql."""
    _check_hygiene(text, what, EXPRESSION_SHAPE, hint)
    jvm_side = _parser(spark)
    if jvm_side is None:
        # Spark Connect: see check_query_plan; layer 1 only, run explicitly.
        check_expression_text(text, what, hint=hint)
        return
    parser, jvm = jvm_side
    try:
        expr = parser.parseExpression(text)
    except Exception as e:  # noqa: BLE001 - ParseException through Py4J
        raise UnsafeSql(f"{what} is not valid Spark SQL: {_spark_parse_error(e)}", hint=hint) from None
    walker = _SparkTree(jvm, what, EXPRESSION_SHAPE, hint)
    walker.expression(expr)
    walker.text(str(expr.toString()))


def query_tables(text: str, what: str, *, hint: str = QUERY_HINT) -> list[tuple[str, ...]]:
    """The tables a read-only query reads (name parts as written: ns.table, or catalog.ns.table), in order of
    first mention, without its own CTE names. Raises UnsafeSql for text that is not one read-only query."""
    from sqlglot import exp

    check_query_text(text, what, hint=hint)
    root = _parse(text, what, hint)[0]
    ctes = {str(c.alias_or_name).lower() for c in root.find_all(exp.CTE)}
    found: list[tuple[str, ...]] = []
    for t in root.find_all(exp.Table):
        if isinstance(t.this, exp.Func):
            continue  # range(...) and other generators read no table
        parts = tuple(str(p.name) for p in t.parts)
        if len(parts) == 1 and parts[0].lower() in ctes:
            continue
        if parts not in found:
            found.append(parts)
    return found


def with_tables_renamed(text: str, what: str, names: dict[tuple[str, ...], str]) -> str:
    """The query with each table it reads (as query_tables gives them) replaced by a plain name (a temporary
    view), as Spark SQL. The text is kept as written, lines and all, so Spark's "line N" of an error is the
    line the person wrote; where a name cannot be found in the text's tokens, the query is rendered again."""
    kept = _renamed_in_place(text, names)
    if kept is not None and not set(query_tables(kept, what)) & set(names):
        return kept
    return _renamed_by_tree(text, what, names)


def _renamed_in_place(text: str, names: dict[tuple[str, ...], str]) -> str | None:
    """Each `ns.table` after FROM, JOIN or a comma swapped in the text itself (an alias added where the query
    has none, so `table.col` keeps resolving); None when the text does not tokenize."""
    from sqlglot import TokenType
    from sqlglot.dialects.spark import Spark

    try:
        with _quiet_sqlglot():
            toks = Spark().tokenize(text)
    except Exception:  # noqa: BLE001 - the tree's rendering then does it
        return None
    keys = {tuple(p.lower() for p in k): v for k, v in names.items()}
    after = {TokenType.FROM, TokenType.JOIN, TokenType.COMMA}
    out: list[str] = []
    pos, i = 0, 0
    while i < len(toks):
        if i and toks[i - 1].token_type in after:
            for n in (3, 2):
                span = toks[i : i + 2 * n - 1]
                if len(span) < 2 * n - 1 or any(span[j].token_type != TokenType.DOT for j in range(1, 2 * n - 1, 2)):
                    continue
                parts = tuple(span[j].text.lower() for j in range(0, 2 * n - 1, 2))
                if parts not in keys:
                    continue
                nxt = toks[i + 2 * n - 1] if i + 2 * n - 1 < len(toks) else None
                aliased = nxt is not None and nxt.token_type in (TokenType.ALIAS, TokenType.VAR, TokenType.IDENTIFIER)
                out += [text[pos : span[0].start], keys[parts] + ("" if aliased else f" AS `{span[-1].text}`")]
                pos = span[-1].end + 1
                i += 2 * n - 2
                break
        i += 1
    return "".join(out) + text[pos:]


def _renamed_by_tree(text: str, what: str, names: dict[tuple[str, ...], str]) -> str:
    from sqlglot import exp

    root = _parse(text, what, QUERY_HINT)[0]

    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Table) and not isinstance(node.this, exp.Func):
            parts = tuple(str(p.name) for p in node.parts)
            if parts in names:
                alias = node.args.get("alias")
                new = exp.to_table(names[parts])
                if alias is not None:
                    new.set("alias", alias)
                elif len(parts) > 1:
                    new.set("alias", exp.TableAlias(this=exp.to_identifier(parts[-1])))  # t.col keeps resolving
                return new
        return node

    return str(root.transform(swap).sql(dialect="spark"))
