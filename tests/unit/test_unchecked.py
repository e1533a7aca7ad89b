"""Tables without checks, a misspelt table section, and the small error fixes of the first hour: what wap.toml
and the error layer decide before any JVM starts. The runs themselves: tests/spark/test_wap_run.py, test_cli.py."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from wapflow.config import NO_CHECKS_DECLARED, NO_CHECKS_FLAG, parse_config
from wapflow.errors import EXIT_USAGE, ConfigError, InputError, MissingInput, did_you_mean, exit_code_table
from wapflow.runs.store import RunRecord
from wapflow.service.runs import REASON_CHARS, run_row

CFG = parse_config(
    {
        "tables": {
            "shop.ordrs": {"checks": [{"check": "not_null", "column": "customer_id"}]},
            "raw.declared": {"checks": []},
            "raw.policies": {"schema": "ignore_extra"},
        }
    }
)
CFG.source = Path("/x/wap.toml")


def refused(name: str, **kw) -> ConfigError:
    kw.setdefault("checks", 0)
    with pytest.raises(ConfigError) as e:
        CFG.audit_consent(name, **kw)
    assert e.value.exit_code == EXIT_USAGE
    return e.value


def test_a_misspelt_section_is_refused_whatever_the_caller_says():
    for kw in ({}, {"no_checks": True}, {"checks": 2}):
        e = refused("shop.orders", **kw)
        assert 'no [tables."shop.orders"] section in /x/wap.toml (did you mean [tables."shop.ordrs"]?)' in e.message
        assert "fix the section's name" in (e.hint or "")


def test_only_a_close_table_name_or_namespace_is_a_typo():
    cfg = parse_config({"tables": {"nessie_t12.trips": {"checks": []}, "shopp.items": {"checks": []}}})
    # Two tables of one long namespace are close as whole names (0.81), not as table names: no typo.
    assert cfg.audit_consent("nessie_t12.other", checks=1) is None
    with pytest.raises(ConfigError, match=r'did you mean \[tables\."shopp\.items"\]\?'):
        cfg.audit_consent("shop.items", checks=1)  # the namespace misspelt


def test_a_table_with_no_checks_publishes_only_on_the_users_word():
    assert CFG.audit_consent("shop.ordrs", checks=1) is None
    assert CFG.audit_consent("other.table", checks=1) is None  # the caller's own checks (--not-null) count
    assert CFG.audit_consent("raw.declared", checks=0) == NO_CHECKS_DECLARED == "checks = [] in wap.toml"
    assert CFG.audit_consent("raw.policies", checks=0, no_checks=True) == NO_CHECKS_FLAG == "--no-checks"
    assert CFG.audit_consent("other.table", checks=0, no_checks=True) == "--no-checks"

    e = refused("other.table")
    assert e.message.startswith('other.table has no checks (/x/wap.toml has no [tables."other.table"] section)')
    assert 'add checks to [tables."other.table"]' in (e.hint or "")
    assert 'declare checks = [] in [tables."other.table"], or pass --no-checks' in (e.hint or "")
    # A section that sets policies but declares no checks is no consent: `checks = []` must be written.
    e = refused("raw.policies")
    assert 'its section [tables."raw.policies"] declares none' in e.message
    # A command that takes no flag (wap watch) offers wap.toml alone.
    e = refused("other.table", flag=None)
    assert "--no-checks" not in (e.hint or "") and "checks = []" in (e.hint or "")


def test_a_section_given_through_the_python_api_counts_as_declared():
    from wapflow.config import TableConfig

    cfg = parse_config({})
    cfg.tables["raw.api"] = TableConfig.model_validate({"checks": []})
    cfg.tables["raw.bare"] = TableConfig.model_validate({})
    assert cfg.audit_consent("raw.api", checks=0) == NO_CHECKS_DECLARED
    with pytest.raises(ConfigError):
        cfg.audit_consent("raw.bare", checks=0)


def test_did_you_mean_names_options_as_the_caller_shows_them():
    assert did_you_mean("shop.orders", ["shop.ordrs"], shown=lambda t: f"[{t}]") == " (did you mean [shop.ordrs]?)"
    assert did_you_mean("shop.orders", ["shop.customers"]) != ""
    assert did_you_mean("shop.orders", ["shop.customers"], cutoff=0.8) == ""  # another table, not a typo


def test_a_missing_source_is_a_usage_error_of_the_input_kind():
    e = MissingInput("source file x.parquet does not exist")
    assert isinstance(e, InputError) and e.kind == "input"  # the ledger treats it as the file's problem
    assert e.exit_code == EXIT_USAGE == 2
    meaning = {code: text for code, _, text in exit_code_table()}
    assert "a missing file" in meaning[2] and "a missing," not in meaning[3]


def _failed(message: str) -> RunRecord:
    return RunRecord(
        run_id="r1",
        table_name="nyc.trips",
        status="failed",
        error={"kind": "config", "message": message, "exit_code": 2},
        started_at=datetime(2026, 11, 28, tzinfo=UTC),
    )


def test_the_runs_list_gives_a_failed_runs_reason_in_one_short_line():
    row = run_row(_failed("source file nope.parquet does not exist (did you mean o.parquet?)"))
    assert row["reason"] == "source file nope.parquet does not exist (did you mean o.parquet?)"
    long = run_row(_failed("x" * 300 + "\nsecond line"))["reason"]
    assert long is not None and len(long) == REASON_CHARS and long.endswith("…") and "\n" not in long
    ok = RunRecord(run_id="r2", table_name="nyc.trips", status="published")
    assert run_row(ok)["reason"] is None


def test_errors_name_sparks_log_only_in_the_process_that_started_spark(tmp_path, capsys, monkeypatch):
    from wapflow.cli.output import print_error
    from wapflow.lakehouse import session

    log = tmp_path / "wap.log"
    log.write_text("spark")
    monkeypatch.setattr(session, "_log_file", log)
    monkeypatch.setattr(session, "_log_pid", None)  # never started here
    print_error("boom")
    assert "Spark's log" not in capsys.readouterr().err
    monkeypatch.setattr(session, "_log_pid", os.getpid())
    print_error("boom")
    assert f"Spark's log: {log}" in capsys.readouterr().err.replace("\n", "")
    # A process forked from it (a command the engine runs) did not start Spark.
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, str(session.log_file()).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 4096).decode() == "None"
