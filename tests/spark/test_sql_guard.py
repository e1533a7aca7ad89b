"""Checks only read (wapflow.audit.sqlguard): custom_sql, expression, filter and `wap query` SQL is accepted
only as one read-only query or one pure expression, by sqlglot (layer 1) and by Spark's own parser (layer 2),
and nothing hostile ever runs: every case goes through a real run and the lakehouse is read back."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from support.data import make_config, write_parquet
from support.sql_cases import (
    CANARY,
    CHECK_CASES,
    EVIL,
    GOOD_EXPRESSIONS,
    GOOD_QUERIES,
    HOSTILE,
    QUERY_CASES,
    RUN_EXPRESSIONS,
    SET_PROP,
    SYSPROP,
    Case,
    T,
    V,
)
from wapflow import checks as C
from wapflow.audit import sqlguard
from wapflow.audit.checks import AuditPlan, evaluate
from wapflow.audit.spec import CustomSqlCheck, ExpressionCheck, NotNullCheck
from wapflow.errors import ConfigError, UsageError
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import run_wap
from wapflow.service.query import run_query
from wapflow.sql.identifiers import TableName

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
    # The lab's tables are what hostile checks aim at: loaded without checks of their own.
    lh = Lakehouse(make_config(tmp, {"shop.orders": {"checks": []}, "shop.victim": {"checks": []}}), spark=spark)
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
    lh = Lakehouse(make_config(tmp_path, {"shop.victim": {"checks": []}}), spark=lab.spark)
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
