"""Checks only read (wapflow.audit.sqlguard), layer 1 without Spark: every hostile text is refused by sqlglot
when declared (wap.toml, Python or `wap query`) and legit SQL of every shape is accepted. Layer 2 (Spark's parser)
and real runs over the same cases: tests/spark/test_sql_guard.py."""

from __future__ import annotations

import pydantic
import pytest

from support.sql_cases import GOOD_EXPRESSIONS, GOOD_QUERIES, HOSTILE, Case
from wapflow import checks as C
from wapflow.audit import sqlguard
from wapflow.config import parse_config
from wapflow.errors import ConfigError, UsageError
from wapflow.service.query import read_only


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
