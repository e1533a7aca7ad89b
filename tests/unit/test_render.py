"""Check results as people read them (wapflow.service.render), for EVERY registered check type: each type's own
verdict (its wap.toml example, real verdict code, no Spark) over passing, failing and empty values with a long
and a short history, rendered as the CLI's audit table, `wap report` and the dashboard's Run page show it. No
Python repr may reach a person: no `{`/`}`, no `None`, no quoted dict keys; a band reads `[212.5, 1150]`."""

from __future__ import annotations

import re
import tomllib
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from rich.console import Console

from wapflow.audit.checktype import AuditContext, Compiled
from wapflow.audit.report import CheckResult
from wapflow.audit.spec import CHECK_MODELS, CheckType
from wapflow.cli.output import checks_table
from wapflow.service import render
from wapflow.service.dashboard import shown_check
from wapflow.writing.modes import Changes

NOW = datetime(2026, 11, 28, 14, 34, 35, tzinfo=UTC)  # a Saturday
# What the audit gathers for check c0 (counts, a max, a metric, a sum and count, a schema): a batch that passes
# its checks, one that fails them, and one with nothing (an empty batch, a mean of no rows).
# The newest timestamp (c0_max) is judged by freshness against the clock, not NOW: an hour and 30 days ago.
CLOCK = datetime.now(UTC)
# control_totals: what the manifests declared (rows, sums) and what the files said against them.
MANIFEST = {"missing": [], "sums_skipped": False, "manifests": ["/landing/day1/_manifest.json"]}
PASSING = {
    "c0_f": 0,
    "c0_n": 480,
    "c0_max": CLOCK - timedelta(hours=1),
    "c0_v": 480.25,
    "c0_s": 480250.0,
    "c0_c": 1000,
    "c0_ct": {**MANIFEST, "problems": [], "rows": 480, "sums": [("amount", Decimal("12.50"), Decimal("12.50"))]},
}
FAILING = {
    "c0_ct": {
        **MANIFEST,
        "problems": ["1 file(s) named in /landing/day1/_manifest.json not in this batch: b.csv"],
        "rows": 1200,
        "sums": [("amount", 7.6e5, Decimal("912000.5"))],
    },
    "c0_f": 370,
    "c0_n": 1000,
    "c0_max": CLOCK - timedelta(days=30),
    "c0_v": 759.308,
    "c0_s": 7.6e5,
    "c0_c": 1000,
}
SCHEMA = {"c0_v": {"trip_id": "bigint", "fare_amount": "decimal(10,2)", "tip": "double"}}
VALUE_SETS = {"passing": PASSING, "failing": FAILING, "empty": {}, "schema": SCHEMA}
HISTORY = [212.5, 480.0, 455.1, 501.7, 470.0, 390.2, 610.4, 488.8, 430.0, 515.5, 460.0, 1150.0, 475.3, 499.9]


def long_history() -> AuditContext:
    """Fourteen published runs, one a day back from NOW: enough for every history check's band."""
    runs = [(NOW - timedelta(days=i + 1), int(v)) for i, v in enumerate(HISTORY)]
    return AuditContext(
        history=lambda: runs,
        metric_history=lambda metric, column, n, weekday: (
            [float(v) for at, v in runs if weekday is None or at.weekday() == weekday][:n]
            + ([] if weekday is None else [480.0, 455.0, 501.0, 470.0])
        ),
        last_schema=lambda: {"trip_id": "bigint", "fare_amount": "double", "vendor": "string"},
        changes=Changes(rows_inserted=5, rows_updated=30, rows_deleted=2, main_rows=100).to_dict(),
        run_at=NOW,
    )


def short_history() -> AuditContext:
    """Two published runs: short of every history check's min_history (passes or warns, and says so)."""
    runs = [(NOW - timedelta(days=7), 480), (NOW - timedelta(days=14), 455)]
    return AuditContext(
        history=lambda: runs, metric_history=lambda *a: [480.0, 455.0], last_schema=lambda: None, run_at=NOW
    )


def declared(model: type[CheckType]) -> list[CheckType]:
    """The type's wap.toml example, and (for a history check) the same without seasonality."""
    doc = tomllib.loads(model.example)
    (table,) = doc["tables"].values()
    chk = model.model_validate(table["checks"][0])
    out = [chk]
    if getattr(chk, "seasonality", None) == "weekly":
        out.append(chk.model_copy(update={"seasonality": "none"}))
    if "severity" in model.model_fields and chk.severity == "error":
        out.append(chk.model_copy(update={"severity": "warn"}))
    return out


def results_of(model: type[CheckType]) -> list[CheckResult]:
    """What the audit records for the type: its verdict over every value set and history it can judge."""
    results = []
    for chk in declared(model):
        for label, values in VALUE_SETS.items():
            for ctx in (long_history(), short_history()):
                c = Compiled(0, chk, None, None, None, "", {col: col for col in chk.columns()})  # type: ignore[arg-type]
                try:
                    v = chk.verdict(c, dict(values), int(values.get("c0_n", 0)), ctx)
                except (TypeError, ValueError, AttributeError, KeyError):
                    continue  # a value set of another type's shape (a schema where a count belongs)
                status = "passed" if v.ok else ("warned" if v.warn_only or chk.severity == "warn" else "failed")
                for failing_rows in (v.failing_rows, None):  # None: a record written before failing rows were kept
                    results.append(
                        CheckResult(
                            name=chk.display_name(),
                            check=chk.check,
                            severity=chk.severity,
                            status=status,
                            observed=v.observed,
                            failing_rows=failing_rows,  # type: ignore[arg-type]
                            threshold=c.threshold,
                            columns=chk.columns(),
                            samples=[{"trip_id": 7, **dict.fromkeys(chk.columns())}] if label == "failing" else [],
                        )
                    )
    return results


def extra_lines() -> list[CheckResult]:
    """Lines the run adds beside the declared checks: what it changes, the schema and quarantine rate."""
    changes = Changes(rows_inserted=5, rows_updated=3, main_rows=100).to_dict()
    return [
        CheckResult("changes", "changes", "warn", "passed", changes, 0, 'mode = "merge": inserted 5, updated 3'),
        CheckResult("schema", "schema", "error", "failed", "column tip is new", 0, 'schema = "strict"'),
        CheckResult("max_quarantine_rate", "max_quarantine_rate", "error", "failed", 0.1234567, 12, "<= 0.05"),
    ]


def cli_text(checks: list[dict[str, Any]]) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115 - the console's
    console.print(checks_table(checks))
    return console.export_text()


REPR = re.compile(r"[{}]|\bNone\b|'\w+':|\"\w+\":")
BAND = re.compile(r"band \[(-?[\d.]+), (-?[\d.]+)\]")


def assert_for_people(text: str, where: str) -> None:
    assert not REPR.search(text), f"{where}: {text!r}"
    for lo, hi in BAND.findall(text):
        for n in (lo, hi):
            assert len(n.replace("-", "").replace(".", "").lstrip("0")) <= 4, f"{where}: {n} in {text!r}"


@pytest.mark.parametrize("name", list(CHECK_MODELS))
def test_every_check_types_report_reads_as_words(name: str) -> None:
    results = results_of(CHECK_MODELS[name])
    assert {r.status for r in results} >= {"passed"}, f"{name}: no verdict judged (a value set of its shape?)"
    assert {r.status for r in results} & {"failed", "warned"}, f"{name}: no failing verdict"
    checks = [r.to_dict() for r in results]
    for c in checks:
        cells = render.check_cells(c)
        assert_for_people(cells["observed"], f"{name} observed")
        assert_for_people(cells["failing_rows"], f"{name} failing rows")
        assert_for_people(cells["threshold"], f"{name} threshold")
        page = shown_check(c)  # the dashboard's Run and Branch pages
        assert_for_people(page["observed"], f"{name} on the dashboard")
        assert all(v is not None for row in page["samples"] for v in row.values())
        if isinstance(c["observed"], dict) and "band" in c["observed"]:
            assert BAND.search(cells["observed"]), cells["observed"]
    table = cli_text(checks)
    assert_for_people(table.replace(checks[0]["name"], ""), f"{name} in the CLI's audit table")


def test_the_runs_own_lines_and_bands_read_as_words() -> None:
    checks = [r.to_dict() for r in extra_lines()]
    shown = [render.check_cells(c)["observed"] for c in checks]
    assert shown == ["inserted 5, updated 3; main had 100 rows", "column tip is new", "0.1235"]
    band = {"value": 759.308, "band": [212.4999, 1150.2], "median": 480.0, "mad": 116.0, "history": 12}
    assert render.observed(band) == "value 759.3, band [212.5, 1150], 2.4 MADs above the median 480, 12 runs"
    short = {"value": None, "history": 2, "min_history": 7, "seasonality": "same weekday: 2 Saturdays"}
    assert render.observed(short) == "no value, 2 of 7 runs of history (same weekday: 2 Saturdays)"
    assert render.observed(None) == "—" and render.text([]) == "" and render.number(1234567.0) == "1234567"


def test_a_run_that_failed_before_it_had_a_branch_names_no_branch(monkeypatch) -> None:
    """`FAILED shop.orders  run …` for a run refused in prepare (a missing table section): no `branch None`."""
    from wapflow.cli import output
    from wapflow.pipeline.result import RunResult

    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115 - as cli_text's
    monkeypatch.setattr(output, "out", console)
    output.render_run(RunResult(run_id="r1", table="shop.orders", status="failed", branch=None, message="refused"))
    text = console.export_text()
    assert "FAILED shop.orders  run r1" in text
    assert_for_people(text, "a run without a branch")
    # A missing file fails prepare after the branch's name was chosen: the branch never existed, so not named.
    output.render_run(RunResult(run_id="r2", table="shop.orders", status="failed", branch="wap_r2", message="x"))
    output.render_run(RunResult(run_id="r3", table="shop.orders", status="blocked", branch="wap_r3", message="y"))
    text = console.export_text()
    assert "run r2  branch" not in text and "FAILED shop.orders  run r2" in text
    assert "BLOCKED shop.orders  run r3  branch wap_r3" in text


def test_data_prints_exactly_as_stored() -> None:
    """A query's result and a failing row are data: never rounded like a report's figures (333.05 stays 333.05)."""
    from datetime import datetime
    from decimal import Decimal

    from wapflow.cli.output import grid

    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115 - as cli_text's
    row = [333.05, Decimal("12.3456"), 1234567, None, True, datetime(2026, 11, 28, 14, 38, 5), "x"]
    console.print(grid(["sum", "dec", "n", "nothing", "flag", "at", "s"], [row]))
    text = console.export_text()
    for shown in ("333.05", "12.3456", "1234567", "null", "true", "2026-11-28 14:38:05", " x "):
        assert shown in text, (shown, text)
