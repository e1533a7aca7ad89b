"""Issue 3's audit: every check type, filters and `mostly`, metadata-first answers, reports with
samples and reproduction SQL, schema contracts and quarantine. Real Spark and Iceberg throughout."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from support.data import write_parquet
from wapflow.audit.checks import AuditPlan, evaluate
from wapflow.audit.checktype import AuditContext
from wapflow.cli import app
from wapflow.config import TableConfig
from wapflow.pipeline import WapRun, run_wap
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
T = TableName.parse("shop.orders")


def orders(n: int = 10, *, start: int = 1, customer: str | None = None, ts: datetime | None = None) -> pa.Table:
    ts = ts or datetime.now() - timedelta(minutes=5)
    return pa.table(
        {
            "order_id": pa.array(range(start, start + n), pa.int64()),
            "customer": [customer or f"c{i % 3}" for i in range(n)],
            "email": [f"user{i}@example.com" for i in range(n)],
            "amount": pa.array([10.0 + i for i in range(n)]),
            "ordered_at": [ts - timedelta(seconds=i) for i in range(n)],
        }
    )


def by_name(res) -> dict[str, dict]:
    return {c["name"]: c for c in res.checks}


def test_row_level_checks_with_filter_mostly_and_unicode(lakehouse_factory, landing):
    checks = [
        {"check": "regex", "column": "email", "pattern": r"^[^@\s]+@[^@\s]+\.[a-z]+$"},
        {"check": "regex", "column": "customer", "pattern": r"^\p{L}+\d*$", "name": "letters_then_digits"},
        {"check": "max_length", "column": "customer", "max": 6},
        {"check": "not_null", "column": "email", "mostly": 0.75},
        {"check": "between", "column": "amount", "min": 0, "max": 100, "filter": "customer = 'c0'"},
        {"check": "between", "column": "amount", "min": 10, "max": 12, "min_inclusive": False, "severity": "warn"},
        {"check": "null_rate", "column": "email", "max": 0.1},
    ]
    lh = lakehouse_factory({"shop.orders": {"checks": checks}})
    t = orders(8)
    emails = t.column("email").to_pylist()
    emails[1] = "not-an-email"
    emails[2] = None
    customers = t.column("customer").to_pylist()
    customers[3] = "Ünïcödé9"  # letters in any script pass \p{L}; too long for max_length 6
    customers[4] = "c 1"
    amounts = t.column("amount").to_pylist()
    amounts[6] = 500.0  # customer c0 (6 % 3 == 0): filtered-in
    amounts[7] = 700.0  # customer c1: filtered out of the filtered between
    t = t.set_column(2, "email", pa.array(emails)).set_column(1, "customer", pa.array(customers))
    t = t.set_column(3, "amount", pa.array(amounts))
    res = run_wap(lh, "shop.orders", [str(write_parquet(landing / "o.parquet", t))])
    got = by_name(res)
    assert got[r"regex(email, ^[^@\s]+@[^@\s]+\.[a-z]+$)"]["failing_rows"] == 1  # NULL is not_null's business
    assert got["letters_then_digits"]["failing_rows"] == 1  # only "c 1"
    assert got["max_length(customer, 6)"]["failing_rows"] == 1  # Ünïcödé9 has 8 characters
    nn = got["not_null(email)"]
    assert (nn["status"], nn["failing_rows"]) == ("passed", 1)  # 1 of 8 fails, mostly 0.75 allows 2
    fb = got["between(amount, 0, 100) where customer = 'c0'"]
    assert (fb["status"], fb["failing_rows"]) == ("failed", 1)
    excl = got["between(amount, (10, 12])"]
    assert excl["status"] == "warned" and excl["failing_rows"] == 6  # 10.0 (exclusive min), 13, 14, 15, 500, 700
    nr = got["null_rate(email) <= 0.1"]
    assert nr["status"] == "failed" and nr["observed"] == 0.125
    assert res.status == "blocked"


def test_mostly_threshold_boundary(lakehouse_factory, landing):
    lh = lakehouse_factory({"shop.orders": {"checks": [{"check": "not_null", "column": "email", "mostly": 0.9}]}})
    t = orders(10)
    emails = t.column("email").to_pylist()
    emails[0] = None  # exactly 10% fail: allowed
    ok = run_wap(
        lh, "shop.orders", [str(write_parquet(landing / "a.parquet", t.set_column(2, "email", pa.array(emails))))]
    )
    assert ok.status == "published"
    emails[1] = None  # 20%: not
    bad = run_wap(
        lh,
        "shop.orders",
        [str(write_parquet(landing / "b.parquet", orders(10, start=100).set_column(2, "email", pa.array(emails))))],
    )
    assert bad.status == "blocked"


def test_batch_checks_unique_in_table_foreign_key_freshness_custom_sql(lakehouse_factory, landing):
    checks = [
        {"check": "unique_in_table", "columns": ["order_id"]},
        {"check": "foreign_key", "column": "customer", "table": "shop.customers", "references": "name"},
        {"check": "freshness", "column": "ordered_at", "max_age": "1h"},
        {
            "check": "custom_sql",
            "sql": "SELECT customer, sum(amount) AS total FROM batch GROUP BY customer HAVING sum(amount) > 60",
        },
    ]
    # shop.customers is the reference table the foreign_key check reads: loaded as it is.
    lh = lakehouse_factory({"shop.orders": {"checks": checks}, "shop.customers": {"checks": []}})
    cust = pa.table({"name": ["c0", "c1", "c2"]})
    assert run_wap(lh, "shop.customers", [str(write_parquet(landing / "cust.parquet", cust))]).status == "published"
    first = run_wap(lh, "shop.orders", [str(write_parquet(landing / "o1.parquet", orders(6)))])
    assert first.status == "published", first.message
    assert {c["status"] for c in first.checks} == {"passed"}
    # Second batch: ids 5..10 overlap main's 1..6 on 5 and 6; one unknown customer; stale; big totals.
    t = orders(6, start=5, ts=datetime.now() - timedelta(hours=3))
    cs = t.column("customer").to_pylist()
    cs[0] = "c9"
    t = t.set_column(1, "customer", pa.array(cs)).set_column(3, "amount", pa.array([50.0] * 6))
    res = run_wap(lh, "shop.orders", [str(write_parquet(landing / "o2.parquet", t))])
    got = by_name(res)
    assert got["unique_in_table(order_id)"]["failing_rows"] == 2
    assert {s["order_id"] for s in got["unique_in_table(order_id)"]["samples"]} == {5, 6}
    assert got["foreign_key(customer -> shop.customers.name)"]["failing_rows"] == 1
    assert got["foreign_key(customer -> shop.customers.name)"]["samples"][0]["customer"] == "c9"
    assert got["freshness(ordered_at, 1h)"]["status"] == "failed"
    cs_res = got["custom_sql"]
    assert cs_res["status"] == "failed" and cs_res["failing_rows"] == 2  # c1 and c2 total 100; c0 and c9 50
    assert {c["source"] for c in res.checks if c["check"] in ("unique_in_table", "foreign_key")} == {"join"}
    assert res.status == "blocked"
    assert lh.tables.row_count(T) == 6


# A short history warns by default; this table asks it to pass, as before issue 47.
PASS_SHORT = {"on_short_history": "pass"}


def test_volume_check_uses_published_history(lakehouse_factory, landing):
    lh = lakehouse_factory(
        {"shop.orders": {"checks": [{"check": "volume", "runs": 5, "tolerance": 0.5, "min_history": 3, **PASS_SHORT}]}}
    )
    start = 1
    for i in range(3):
        r = run_wap(lh, "shop.orders", [str(write_parquet(landing / f"v{i}.parquet", orders(10, start=start)))])
        start += 10
        assert r.status == "published", r.message  # not enough history yet: passes
        assert r.checks[0]["threshold"].startswith(f"{i} of 3 runs of history: passes")
    ok = run_wap(lh, "shop.orders", [str(write_parquet(landing / "ok.parquet", orders(13, start=start)))])
    assert ok.status == "published" and ok.checks[0]["threshold"].startswith("[5, 15]")
    spike = run_wap(lh, "shop.orders", [str(write_parquet(landing / "spike.parquet", orders(40, start=500)))])
    assert spike.status == "blocked" and spike.checks[0]["observed"]["value"] == 40


@pytest.mark.parametrize(
    "check,words",
    [
        ({"check": "regex", "column": "amount", "pattern": "x"}, ["not a string"]),
        ({"check": "not_null", "column": "emial"}, ["'emial'", "did you mean 'email'"]),
        ({"check": "not_null", "column": "email", "filter": "amuont > 3"}, ["filter", "amuont"]),
        ({"check": "not_null", "column": "email", "filter": "amount + 1"}, ["not a boolean"]),
        ({"check": "foreign_key", "column": "customer", "table": "shop.nowhere"}, ["shop.nowhere does not exist"]),
        ({"check": "freshness", "column": "amount", "max_age": "1h"}, ["not a timestamp"]),
        ({"check": "custom_sql", "sql": "SELECT * FROM batch WHERE nope > 1"}, ["query is not valid", "nope"]),
        ({"check": "between", "column": "amount", "min": "low"}, ["is a string"]),
        ({"check": "regex", "column": "email", "pattern": "(unclosed"}, ["Spark rejects the pattern"]),
    ],
)
def test_declaration_errors_are_found_before_any_write(lakehouse_factory, landing, check, words):
    lh = lakehouse_factory({"shop.orders": {"checks": [check]}})
    f = write_parquet(landing / "o.parquet", orders(3))
    res = run_wap(lh, "shop.orders", [str(f)])
    assert res.status == "failed" and res.exit_code == 2, res.message
    for w in words:
        assert w in res.message
    assert not lh.tables.exists(T)
    assert f.exists()


def test_bad_parameters_are_config_errors_naming_the_check(tmp_path):
    from wapflow.config import load_config
    from wapflow.errors import ConfigError

    for body, words in [
        ('{ check = "freshness", column = "a", max_age = "soon" }', ["'soon' is not a duration"]),
        ('{ check = "row_count", min = 5, max = 1 }', ["greater than max"]),
        ('{ check = "not_null", column = "a", mostly = 1.5 }', ["mostly"]),
        ('{ check = "foreign_key", column = "a" }', ["missing required key 'table'"]),
    ]:
        (tmp_path / "wap.toml").write_text(f'[tables."a.b"]\nchecks = [{body}]\n')
        with pytest.raises(ConfigError) as e:
            load_config(tmp_path / "wap.toml")
        for w in words:
            assert w in str(e.value), (w, str(e.value))
        assert '[tables."a.b"] checks[0]' in str(e.value)


def test_metadata_answers_first_and_reads_no_data_when_it_can(lakehouse_factory, landing, spark, tmp_path):
    checks = [
        {"check": "row_count", "min": 1},
        {"check": "not_null", "column": "email"},
        {"check": "between", "column": "amount", "min": 0, "max": 1000},
        {"check": "null_rate", "column": "customer", "max": 0.5},
    ]
    # Rewritten by Spark: Iceberg counts the NaNs of the files it writes (a landed file's footer does not).
    lh = lakehouse_factory({"shop.orders": {"checks": checks, "adopt_parquet": False}})
    res = run_wap(lh, "shop.orders", [str(write_parquet(landing / "o.parquet", orders(20)))])
    assert res.status == "published"
    assert {c["source"] for c in res.checks} == {"metadata"}

    # A resumed audit whose checks metadata answers never touches the rows: prove it with rows that cannot be read.
    gone = tmp_path / "gone.parquet"
    write_parquet(gone, orders(1))
    unreadable = spark.read.parquet(str(gone))
    gone.unlink()
    snaps = [s.snapshot_id for s in lh.tables.snapshots(T).values() if s.run_id == res.run_id]
    cfg = TableConfig.model_validate({"checks": checks})
    plan = AuditPlan(cfg.checks, unreadable.columns, table="shop.orders")
    ctx = AuditContext(file_metrics=lambda: lh.tables.added_file_metrics(T, "main", snaps))
    report = evaluate(plan, unreadable, ctx=ctx, samples=False)
    assert report.rows == 20
    assert [(c.status, c.source) for c in report.checks] == [("passed", "metadata")] * 4

    # Bounds outside the range do not count rows: that check falls back to the scan.
    plan2 = AuditPlan(
        TableConfig.model_validate({"checks": [{"check": "between", "column": "amount", "max": 15}]}).checks,
        unreadable.columns,
        table="shop.orders",
    )
    added = lh.tables.read_increment(T, lh.tables.snapshots(T)[snaps[0]].parent_id, snaps[0])
    r2 = evaluate(
        plan2,
        added,
        ctx=AuditContext(file_metrics=lambda: lh.tables.added_file_metrics(T, "main", snaps)),
        samples=False,
    )
    assert (r2.checks[0].source, r2.checks[0].failing_rows) == ("scan", 14)


def test_an_append_leaves_counted_checks_to_iceberg_and_scans_when_the_table_keeps_no_counts(
    lakehouse_factory, landing, spark
):
    """An append observes only what Iceberg's counts cannot answer (each observed aggregate costs the write CPU).
    A table whose files keep no counts (metrics turned off by a table property) gets those checks by a scan."""
    checks = [
        {"check": "not_null", "column": "email"},
        {"check": "null_rate", "column": "customer", "max": 0.5},
        {"check": "anomaly", "metric": "null_fraction", "column": "email", "min_history": 1},
        {"check": "anomaly", "metric": "mean", "column": "amount", "min_history": 1},
    ]
    lh = lakehouse_factory({"shop.orders": {"checks": checks}})
    plan = AuditPlan(TableConfig.model_validate({"checks": checks}).checks, orders(1).column_names, table=str(T))
    observed = {re.sub(r".* AS `?(\w+)`?'>$", r"\1", str(c)) for c in plan.observable(counted=True)}
    assert observed == {"_rows", "c3_s"}, observed  # the row count, and the mean's sum (its count: Iceberg's)
    assert len(plan.observable()) == 1 + 2 + 2 + 2 + 2

    first = run_wap(lh, "shop.orders", [str(write_parquet(landing / "a.parquet", orders(20)))])
    assert first.status == "published"
    assert [c["source"] for c in first.checks] == ["metadata", "metadata", "metadata", "write"]
    assert by_name(first)["anomaly(mean(amount))"]["observed"]["value"] == pytest.approx(19.5)  # 10.0 + 0..19

    spark.sql(f"ALTER TABLE {lh.tables.ident(T)} SET TBLPROPERTIES ('write.metadata.metrics.default' = 'none')")
    t = orders(10, start=100)
    emails = t.column("email").to_pylist()
    emails[3] = None
    second = run_wap(
        lh, "shop.orders", [str(write_parquet(landing / "b.parquet", t.set_column(2, "email", pa.array(emails))))]
    )
    assert second.status == "blocked"
    got = {c["check"] + ":" + c["name"]: (c["source"], c["status"], c["failing_rows"]) for c in second.checks}
    assert got["not_null:not_null(email)"] == ("scan", "failed", 1), got
    assert got["null_rate:null_rate(customer) <= 0.5"] == ("scan", "passed", 0), got
    assert [c["source"] for c in second.checks if c["check"] == "anomaly"] == ["scan", "scan"]
    mean = next(c for c in second.checks if c["name"] == "anomaly(mean(amount))")
    assert mean["observed"]["value"] == pytest.approx(14.5)  # 10.0 + 0..9: the sum over the count, both scanned


def _observations(monkeypatch: pytest.MonkeyPatch, spark: Any) -> list[int]:
    """How many aggregates each observation the runs attach has, in order (an empty list: none observed)."""
    DataFrame = type(spark.range(1))  # the session's own class (classic or Connect), whose observe the write calls
    observed: list[int] = []
    real = DataFrame.observe

    def spy(self: Any, observation: Any, *exprs: Any) -> Any:
        observed.append(len(exprs))
        return real(self, observation, *exprs)

    monkeypatch.setattr(DataFrame, "observe", spy)
    return observed


def test_an_append_whose_checks_iceberg_counts_answer_observes_nothing(lakehouse_factory, landing, monkeypatch, spark):
    """Only the row count left to observe: the commit's summary has it, so the write adds no observation (a node
    every row passes through, outside Spark's generated code) and the audit reads metadata alone."""
    checks = [
        {"check": "row_count", "min": 1},
        {"check": "not_null", "column": "email"},
        {"check": "null_rate", "column": "customer", "max": 0.5},
    ]
    plan = AuditPlan(TableConfig.model_validate({"checks": checks}).checks, orders(1).column_names, table=str(T))
    assert plan.counts_only(bounds=None)
    blocking = [*checks, {"check": "expression", "sql": "order_id > 0"}]
    assert not AuditPlan(
        TableConfig.model_validate({"checks": blocking}).checks, orders(1).column_names, table=str(T)
    ).counts_only(bounds=None)
    observed = _observations(monkeypatch, spark)
    lh = lakehouse_factory({"shop.orders": {"checks": checks, "adopt_parquet": False}})
    res = run_wap(lh, "shop.orders", [str(write_parquet(landing / "a.parquet", orders(20)))])
    assert res.status == "published" and res.rows_written == 20
    assert [c["source"] for c in res.checks] == ["metadata"] * 3
    assert observed == []
    # A blocking row check is still observed by the write (one count of the rows failing it).
    lh2 = lakehouse_factory({"shop.orders": {"checks": blocking, "adopt_parquet": False}})
    res2 = run_wap(lh2, "shop.orders", [str(write_parquet(landing / "b.parquet", orders(20)))])
    assert res2.status == "published" and res2.checks[-1]["source"] == "write"
    assert observed == [2]  # the row count and the blocking check's count


def test_blocking_row_checks_are_observed_in_one_count_and_counted_one_by_one_when_it_is_not_zero(
    lakehouse_factory, landing
):
    """An append observes its blocking row checks (error, no tolerance) in one count of the rows failing any of
    them: zero gives each its exact zero; more sends them to one scan that counts each, exactly as before."""
    checks = [
        {"check": "between", "column": "amount", "min": 0, "max": 100},
        {"check": "accepted_values", "column": "customer", "values": ["c0", "c1", "c2"]},
        {"check": "expression", "sql": "order_id > 0"},
        {"check": "accepted_values", "column": "customer", "values": ["c0", "c1"], "severity": "warn"},
        {"check": "not_null", "column": "email"},
    ]
    plan = AuditPlan(TableConfig.model_validate({"checks": checks}).checks, orders(1).column_names, table=str(T))
    observed = {re.sub(r".* AS `?(\w+)`?'>$", r"\1", str(c)) for c in plan.observable(counted=True)}
    # One count for the three blocking checks; the warning its own two; not_null is Iceberg's null count.
    assert observed == {"_rows", "_clear_c0_c1_c2", "c3_f", "c3_n"}, observed
    lh = lakehouse_factory({"shop.orders": {"checks": checks}})

    first = run_wap(lh, "shop.orders", [str(write_parquet(landing / "a.parquet", orders(20)))])
    assert first.status == "published"
    assert [(c["status"], c["source"], c["failing_rows"]) for c in first.checks] == [
        # The amounts' bounds are inside the range, but an adopted file's footer gives no NaN count: observed.
        ("passed", "write", 0),
        ("passed", "write", 0),
        ("passed", "write", 0),
        ("warned", "write", 6),  # customer c2: orders 3, 6, ..., 18 of 20
        ("passed", "metadata", 0),
    ]

    t = orders(10, start=100)
    customers, amounts = t.column("customer").to_pylist(), t.column("amount").to_pylist()
    customers[0] = customers[4] = "zz"
    amounts[7] = 500.0
    t = t.set_column(t.schema.get_field_index("customer"), "customer", pa.array(customers))
    t = t.set_column(t.schema.get_field_index("amount"), "amount", pa.array(amounts))
    second = run_wap(lh, "shop.orders", [str(write_parquet(landing / "b.parquet", t))])
    assert second.status == "blocked"
    assert [(c["status"], c["source"], c["failing_rows"]) for c in second.checks] == [
        ("failed", "scan", 1),
        ("failed", "scan", 2),
        ("passed", "scan", 0),
        ("warned", "write", 5),  # zz twice, and c2 at orders 102, 105, 108
        ("passed", "metadata", 0),
    ]


def test_report_samples_and_sql_reproduce_the_failure(lakehouse_factory, landing, spark):
    lh = lakehouse_factory(
        {
            "shop.orders": {
                "key": ["order_id"],
                "checks": [
                    {"check": "between", "column": "amount", "max": 12},
                    {"check": "unique", "columns": ["customer"]},
                ],
            }
        }
    )
    res = run_wap(lh, "shop.orders", [str(write_parquet(landing / "o.parquet", orders(40)))])
    assert res.status == "blocked"
    btw = res.checks[0]
    assert btw["failing_rows"] == 37
    assert len(btw["samples"]) == 20
    assert set(btw["samples"][0]) == {"order_id", "amount"}
    assert spark.sql(btw["sql"]).count() == 37  # the SQL runs as printed against the kept branch
    dup = res.checks[1]
    assert dup["failing_rows"] == 37 and {s["customer"] for s in dup["samples"]} == {"c0", "c1", "c2"}
    assert spark.sql(dup["sql"]).count() == 3

    runner = CliRunner()
    cfg = lh.config
    toml = landing.parent / "wap.toml"
    toml.write_text(
        f'[lakehouse]\nwarehouse = "{cfg.warehouse_location()}"\ncatalog_name = "{cfg.lakehouse.catalog_name}"\n'
    )
    r = runner.invoke(app, ["report", res.run_id, "--config", str(toml), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "blocked" and doc["checks"][0]["samples"] == btw["samples"]
    r = runner.invoke(app, ["report", res.run_id, "--config", str(toml)])
    assert "reproduce:" in r.stdout and "37 failing row(s)" in r.stdout
    r = runner.invoke(app, ["report", "nope", "--config", str(toml)])
    assert r.exit_code == 2 and "no run nope" in r.stderr


# --- schema contract ----------------------------------------------------------------------------


def _schema_names(lh, t=T) -> list[str]:
    return lh.tables.schema(t).fieldNames()


def _kinds(t: pa.Table, kinds: list[int]) -> pa.Table:
    return t.append_column("kind", pa.array(kinds, pa.int32()))


def _observed_names(plan: AuditPlan, types: dict[str, str]) -> set[str]:
    return {re.sub(r".* AS `?(\w+)`?'>$", r"\1", str(c)) for c in plan.observable(counted=True, bounds=types)}


def test_blocking_checks_their_bounds_settle_are_not_observed_and_a_batch_outside_them_is_scanned(
    lakehouse_factory, landing, monkeypatch, spark
):
    """A blocking `between` on numbers and an `accepted_values` of every integer of a range pass from the added
    files' bounds, so an append observes neither (each observed condition costs the write CPU on every row). A
    value outside them, or a NaN, fails them, counted exactly by the scan; a set with a gap is observed."""
    checks = [
        {"check": "between", "column": "amount", "min": 0, "max": 100},
        {"check": "accepted_values", "column": "kind", "values": [0, 1, 2]},
        {"check": "accepted_values", "column": "kind", "values": [0, 1, 2, 5]},
        {"check": "between", "column": "amount", "min": 0, "max": 100, "severity": "warn"},
    ]
    columns = [*orders(1).column_names, "kind"]
    plan = AuditPlan(TableConfig.model_validate({"checks": checks}).checks, columns, table=str(T))
    types = {"order_id": "bigint", "customer": "string", "email": "string", "amount": "double", "kind": "int"}
    assert _observed_names(plan, types) == {"_rows", "_clear_c2", "c3_f", "c3_n"}
    # On a column of other values the bounds settle nothing: a float 2.5 lies between 0 and 2, a text "10" too.
    assert _observed_names(plan, {**types, "kind": "double", "amount": "string"}) == {
        "_rows",
        "_clear_c0_c1_c2",
        "c3_f",
        "c3_n",
    }
    observed = _observations(monkeypatch, spark)
    lh = lakehouse_factory({"shop.orders": {"checks": checks, "adopt_parquet": False}})
    first = run_wap(
        lh, "shop.orders", [str(write_parquet(landing / "a.parquet", _kinds(orders(20), [i % 3 for i in range(20)])))]
    )
    assert first.status == "published" and first.rows_written == 20
    assert [(c["status"], c["source"], c["failing_rows"]) for c in first.checks] == [
        ("passed", "metadata", 0),  # amounts 10..29, kinds 0..2: inside the bounds
        ("passed", "metadata", 0),
        ("passed", "write", 0),  # 3 and 4 are not accepted: bounds 0..2 inside 0..5 prove nothing
        ("passed", "metadata", 0),  # a warning is observed as well (its count is reported when it fails)
    ]
    assert observed == [4]  # the row count, the gap's one count, the warning's two

    before = lh.tables.head(T)
    t = orders(10, start=100)
    amounts = t.column("amount").to_pylist()
    amounts[3] = float("nan")  # Spark orders NaN above every number: it fails a max
    kinds = [1] * 10
    kinds[5] = 7
    t = _kinds(t.set_column(t.schema.get_field_index("amount"), "amount", pa.array(amounts)), kinds)
    second = run_wap(lh, "shop.orders", [str(write_parquet(landing / "b.parquet", t))])
    assert second.status == "blocked" and lh.tables.head(T) == before
    assert [(c["status"], c["source"], c["failing_rows"]) for c in second.checks] == [
        ("failed", "scan", 1),  # the NaN: the files' NaN count is 1, so their bounds settle nothing
        ("failed", "scan", 1),  # the 7
        ("failed", "scan", 1),
        ("warned", "write", 1),
    ]


def test_a_nan_in_an_adopted_file_fails_between_though_its_footer_bounds_leave_it_out(lakehouse_factory, landing):
    """An adopted file's metrics come from its parquet footer, whose bounds leave NaNs out: between is settled
    from bounds only where the NaN count is known to be 0, so the NaN is counted by the scan and blocks."""
    checks = [{"check": "between", "column": "amount", "min": 0, "max": 100}]
    lh = lakehouse_factory({"shop.orders": {"checks": checks}})
    first = run_wap(lh, "shop.orders", [str(write_parquet(landing / "a.parquet", orders(20)))])
    assert first.status == "published"
    before = lh.tables.head(T)
    t = orders(10, start=100)
    amounts = t.column("amount").to_pylist()
    amounts[2] = float("nan")
    t = t.set_column(t.schema.get_field_index("amount"), "amount", pa.array(amounts))
    second = run_wap(lh, "shop.orders", [str(write_parquet(landing / "b.parquet", t))])
    assert (second.status, second.exit_code) == ("blocked", 1), second.message
    assert [(c["status"], c["failing_rows"]) for c in second.checks] == [("failed", 1)]
    assert lh.tables.head(T) == before


@pytest.fixture
def orders_lakehouse(lakehouse_factory, landing):
    def make(policy: str, checks=None):
        lh = lakehouse_factory({"shop.orders": {"schema": policy, "checks": []}})  # the schema contract alone
        assert (
            run_wap(lh, "shop.orders", [str(write_parquet(landing / "first.parquet", orders(5)))]).status == "published"
        )
        # Checks on the new column apply from the second batch on.
        lh.config.tables["shop.orders"] = TableConfig.model_validate({"schema": policy, "checks": checks or []})
        return lh

    return make


def test_strict_blocks_new_column_and_keeps_main(orders_lakehouse, landing):
    lh = orders_lakehouse("strict")
    head, names = lh.tables.head(T), _schema_names(lh)
    wide = orders(3, start=50).append_column("coupon", pa.array(["x", None, "y"]))
    res = run_wap(lh, "shop.orders", [str(write_parquet(landing / "wide.parquet", wide))])
    # An audit outcome: blocked by a failed `schema` check that carries the diff; nothing written.
    assert (res.status, res.exit_code) == ("blocked", 1) and "+ extra column 'coupon' (string)" in res.message
    assert 'schema = "add_columns"' in res.message
    (schema,) = [c for c in res.checks if c["status"] == "failed"]
    assert schema["check"] == "schema" and "+ extra column 'coupon' (string)" in schema["observed"]
    assert lh.tables.head(T) == head and _schema_names(lh) == names
    assert lh.iceberg.list(T) == []


def test_ignore_extra_drops_and_reports(orders_lakehouse, landing):
    lh = orders_lakehouse("ignore_extra")
    wide = orders(3, start=50).append_column("coupon", pa.array(["x", None, "y"]))
    res = run_wap(lh, "shop.orders", [str(write_parquet(landing / "wide.parquet", wide))])
    assert res.status == "published"
    assert res.schema_changes == ["extra column coupon ignored"]
    assert _schema_names(lh) == ["order_id", "customer", "email", "amount", "ordered_at"]
    assert lh.tables.row_count(T) == 8


def test_add_columns_blocked_run_leaves_main_schema_unchanged(orders_lakehouse, landing):
    lh = orders_lakehouse("add_columns", checks=[{"check": "not_null", "column": "coupon"}])
    head, names = lh.tables.head(T), _schema_names(lh)
    wide = orders(3, start=50).append_column("coupon", pa.array(["x", None, "y"]))
    res = run_wap(lh, "shop.orders", [str(write_parquet(landing / "wide.parquet", wide))])
    assert res.status == "blocked"
    assert lh.tables.head(T) == head and _schema_names(lh) == names
    assert res.staging_table == f"shop.orders__wap_{res.run_id}"
    assert lh.tables.row_count(TableName.parse(res.staging_table)) == 3


def test_add_columns_published_adds_column_at_publish(orders_lakehouse, landing):
    lh = orders_lakehouse(
        "add_columns", checks=[{"check": "accepted_values", "column": "coupon", "values": ["x", "y"]}]
    )
    wide = orders(3, start=50).append_column("coupon", pa.array(["x", None, "y"]))
    res = run_wap(lh, "shop.orders", [str(write_parquet(landing / "wide.parquet", wide))])
    assert res.status == "published", res.message
    assert "new column coupon (string) added at publish" in res.schema_changes
    assert _schema_names(lh)[-1] == "coupon"
    rows = {r["order_id"]: r["coupon"] for r in lh.tables.read(T).select("order_id", "coupon").collect()}
    assert rows[50] == "x" and rows[52] == "y" and rows[1] is None and len(rows) == 8
    assert not lh.tables.exists(TableName.parse(f"shop.orders__wap_{res.run_id}"))


def test_widening_is_reported(orders_lakehouse, landing):
    lh = orders_lakehouse("strict")
    t = orders(2, start=70)
    t = t.set_column(0, "order_id", pa.array([70, 71], pa.int32()))
    res = run_wap(lh, "shop.orders", [str(write_parquet(landing / "narrow.parquet", t))])
    assert res.status == "published" and res.schema_changes == ["widened order_id: int -> bigint"]


# --- quarantine ---------------------------------------------------------------------------------

Q = TableName.parse("shop.orders__quarantine")
QCHECKS = [
    {"check": "not_null", "column": "email"},
    {"check": "between", "column": "amount", "max": 100},
    {"check": "row_count", "min": 1},
]


def _dirty(n: int = 10, start: int = 1) -> pa.Table:
    t = orders(n, start=start)
    emails = t.column("email").to_pylist()
    amounts = t.column("amount").to_pylist()
    emails[0] = None
    amounts[1] = 999.0
    emails[2], amounts[2] = None, 500.0
    return t.set_column(2, "email", pa.array(emails)).set_column(3, "amount", pa.array(amounts))


def test_quarantine_publishes_good_rows_and_diverts_bad_ones_exactly(lakehouse_factory, landing):
    lh = lakehouse_factory({"shop.orders": {"on_row_failure": "quarantine", "checks": QCHECKS}})
    res = run_wap(lh, "shop.orders", [str(write_parquet(landing / "d.parquet", _dirty()))])
    assert res.status == "published", res.message
    assert res.quarantined_rows == 3
    assert {c["name"]: c["status"] for c in res.checks} == {
        "not_null(email)": "quarantined",
        "between(amount, max=100)": "quarantined",
        "row_count(min=1)": "passed",
    }
    good = {r["order_id"] for r in lh.tables.read(T).collect()}
    bad = {r["order_id"]: sorted(r["_wap_failed_checks"]) for r in lh.tables.read(Q).collect()}
    assert good | set(bad) == set(range(1, 11)) and not good & set(bad)
    assert bad == {
        1: ["not_null(email)"],
        2: ["between(amount, max=100)"],
        3: ["between(amount, max=100)", "not_null(email)"],
    }
    q = lh.tables.read(Q).first()
    assert q["_wap_run_id"] == res.run_id and q["_wap_quarantined_at"] is not None
    assert lh.iceberg.list(T) == [] and lh.iceberg.list(Q) == []


def test_quarantine_rate_limit_blocks_and_leaves_both_tables(lakehouse_factory, landing):
    lh = lakehouse_factory(
        {"shop.orders": {"on_row_failure": "quarantine", "max_quarantine_rate": 0.2, "checks": QCHECKS}}
    )
    first = run_wap(lh, "shop.orders", [str(write_parquet(landing / "ok.parquet", _dirty(20, start=100)))])
    assert first.status == "published" and first.quarantined_rows == 3  # 15% <= 20%
    heads = (lh.tables.head(T), lh.tables.head(Q))
    res = run_wap(lh, "shop.orders", [str(write_parquet(landing / "d.parquet", _dirty(10)))])  # 30%
    assert res.status == "blocked"
    rate = next(c for c in res.checks if c["check"] == "max_quarantine_rate")
    assert rate["status"] == "failed" and rate["observed"] == 0.3
    assert (lh.tables.head(T), lh.tables.head(Q)) == heads
    assert lh.tables.row_count(T) == 17 and lh.tables.row_count(Q) == 3


def test_quarantine_batch_check_still_blocks(lakehouse_factory, landing):
    checks = [*QCHECKS, {"check": "unique", "columns": ["customer"]}]
    lh = lakehouse_factory({"shop.orders": {"on_row_failure": "quarantine", "checks": checks}})
    res = run_wap(lh, "shop.orders", [str(write_parquet(landing / "d.parquet", _dirty()))])
    assert res.status == "blocked"
    assert lh.tables.row_count(T) == 0
    assert lh.tables.row_count(Q) == 0


def test_resumed_quarantine_run_audits_both_branches(lakehouse_factory, landing):
    lh = lakehouse_factory(
        {
            "shop.orders": {
                "on_row_failure": "quarantine",
                "checks": [*QCHECKS, {"check": "unique", "columns": ["order_id"]}],
            }
        }
    )
    f = write_parquet(landing / "d.parquet", _dirty())
    crashed = WapRun(lh, "shop.orders", [str(f)])
    crashed.prepare()
    crashed.write()
    res = run_wap(lh, "shop.orders", [str(f)], run_id=crashed.run_id)
    assert res.status == "published" and res.quarantined_rows == 3
    assert lh.tables.row_count(T) == 7 and lh.tables.row_count(Q) == 3


def test_a_not_null_sample_of_a_table_without_a_key_carries_its_first_columns(lakehouse_factory, landing):
    lh = lakehouse_factory({"shop.orders": {"checks": [{"check": "not_null", "column": "amount"}]}})
    table = pa.table(
        {
            "order_id": pa.array([1, 2, 3], pa.int64()),
            "customer": ["c1", "c2", "c3"],
            "day": ["mon", "tue", "wed"],
            "amount": pa.array([1.0, None, 3.0], pa.float64()),
        }
    )
    res = run_wap(lh, "shop.orders", [str(write_parquet(landing / "nulls.parquet", table))])
    assert res.status == "blocked"
    (sample,) = res.checks[0]["samples"]
    assert sample == {"order_id": 2, "customer": "c2", "day": "tue", "amount": None}  # found by its first columns
