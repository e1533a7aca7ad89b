"""What the Airflow and Dagster integrations act on, from a run's result (no JVM, no orchestrator): the Outcome's
status, exit code, retryability and report command, and the provider entry point Airflow discovers."""

from __future__ import annotations

from importlib.metadata import entry_points

from wapflow.integrations import outcome as oc
from wapflow.pipeline.result import MultiRunResult, RunResult


def _run(status: str, error: dict | None = None, **kw) -> RunResult:
    checks = [{"name": "not_null(x)", "status": "failed" if status == "blocked" else "passed"}]
    return RunResult(run_id="r1", table="raw.t", status=status, branch="wap_r1", checks=checks, error=error, **kw)


def test_blocked_is_terminal_and_names_its_check_and_report():
    out = oc.from_run(_run("blocked"), "/etc/wap.toml")
    assert (out.exit_code, out.retryable, out.blocked) == (1, False, True)
    assert out.reason() == (
        "wapflow run r1 blocked: blocked by raw.t: not_null(x) (see: wap report r1 --config /etc/wap.toml)"
    )
    assert out.summary()["failed_checks"] == {"raw.t": ["not_null(x)"]}
    assert out.snapshots == {"raw.t": None}


def test_transient_failure_is_retryable_other_failures_not():
    transient = oc.from_run(_run("failed", {"kind": "transient", "exit_code": 5, "message": "lock"}))
    assert (transient.exit_code, transient.retryable) == (5, True)
    bug = oc.from_run(_run("failed", {"kind": "bug", "exit_code": 3, "message": "boom"}))
    assert (bug.exit_code, bug.retryable) == (3, False)


def test_held_and_published():
    held = oc.from_run(_run("awaiting_review"))
    assert held.awaiting_review and held.held == ["r1"] and held.exit_code == 6
    done = oc.from_run(_run("published", snapshot_id=42))
    assert done.published and done.snapshots == {"raw.t": 42} and done.summary()["report_command"] == "wap report r1"


def test_a_group_is_one_outcome_with_every_table():
    a, b = _run("blocked"), RunResult(run_id="g-2", table="raw.u", status="blocked", branch="wap_g")
    out = oc.from_group(MultiRunResult(run_id="g", branch="wap_g", status="blocked", tables=[a, b]), kind="models")
    assert out.tables == ["raw.t", "raw.u"] and out.run_ids == {"raw.t": "r1", "raw.u": "g-2"} and out.blocked
    assert out.reason().startswith("wapflow models g blocked: blocked by raw.t: not_null(x)")


def test_airflow_finds_the_provider_without_importing_airflow():
    (ep,) = [e for e in entry_points(group="apache_airflow_provider") if e.value.startswith("wapflow.")]
    info = ep.load()()
    assert info["package-name"] == "wapflow"
    assert info["triggers"][0]["python-modules"] == ["wapflow.integrations.airflow.triggers"]
