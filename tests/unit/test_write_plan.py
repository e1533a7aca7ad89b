"""The write's plan: one case per set of facts (no Spark), and its outcome kept in the run's state, which the
audit and publish read instead of asking the write mode again."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wapflow.pipeline.state import RunState, new_state
from wapflow.writing.plan import CASES, WriteFacts, WriteOutcome, WritePlan, plan_write

APPEND = WriteFacts(mode="append", change=False)
MERGE = WriteFacts(mode="merge", change=True, keys_after_write=True)
REPLACE = WriteFacts(mode="replace", change=True)
STEPS = Path(__file__).resolve().parents[2] / "src" / "wapflow" / "pipeline" / "steps"


def test_an_append_of_files_that_cannot_be_adopted_is_rewritten_by_spark_and_says_why() -> None:
    plan = plan_write(
        WriteFacts(mode="append", change=False, checks=True, fmt="parquet", not_adopted="the table is sorted")
    )
    assert plan.case == "append" and not plan.change and plan.observe
    assert plan.note == "rewriting the rows (the files are not adopted as they are: the table is sorted)"
    # CSV files are never adopted: nothing to say. adopt_parquet = false: the user asked for it.
    assert plan_write(WriteFacts(mode="append", change=False, fmt="csv", not_adopted="the files are csv")).note is None
    off = WriteFacts(mode="append", change=False, fmt="parquet", adopt_parquet=False, not_adopted="adopt_parquet")
    assert plan_write(off).note is None


def test_an_append_whose_checks_the_file_counts_answer_observes_nothing() -> None:
    assert not plan_write(WriteFacts(mode="append", change=False, checks=True, counts_only=True)).observe
    assert not plan_write(APPEND).observe  # no checks


def test_adoptable_files_are_adopted_and_fall_back_to_the_append() -> None:
    plan = plan_write(WriteFacts(mode="append", change=False, checks=True, counts_only=True, adoptable=True))
    assert plan.case == "adopt" and plan.observe  # the scan that validates the files observes the checks
    assert plan.fallback == WritePlan("append", "append", False, observe=False)


def test_a_merge_and_a_replace_are_changes_applied_again_when_main_moved() -> None:
    merge = plan_write(MERGE)
    assert (merge.case, merge.mode, merge.change, merge.keys_after_write, merge.observe) == (
        "change",
        "merge",
        True,
        True,
        False,
    )
    again = plan_write(WriteFacts(mode="replace", change=True, reapplied=2, checks=True))
    assert again.case == "change" and again.reapplied == 2 and not again.quarantine and not again.observe


def test_quarantine_splits_an_append_and_a_change_keeps_its_case() -> None:
    split = plan_write(WriteFacts(mode="append", change=False, quarantine=True, checks=True, adoptable=True))
    assert split.case == "quarantine_split" and split.quarantine and split.observe  # never adopted
    change = plan_write(WriteFacts(mode="merge", change=True, quarantine=True, checks=True))
    assert change.case == "change" and change.quarantine and not change.observe


def test_new_columns_main_cannot_hold_are_staged_before_anything_else() -> None:
    plan = plan_write(WriteFacts(mode="append", change=False, new_columns=("tip",), checks=True, adoptable=True))
    assert plan.case == "staged" and plan.observe


def test_rows_a_pipeline_engine_wrote_are_recorded_whatever_else_the_facts_say() -> None:
    plan = plan_write(WriteFacts(mode="append", change=False, engine_wrote=True, adoptable=True, quarantine=True))
    assert plan.case == "engine" and not plan.quarantine


def test_every_case_has_a_strategy() -> None:
    pytest.importorskip("pyspark")
    from wapflow.pipeline.steps.write import STRATEGIES

    assert set(STRATEGIES) == set(CASES)
    facts = [
        APPEND,
        WriteFacts(mode="append", change=False, adoptable=True),
        WriteFacts(mode="append", change=False, quarantine=True),
        MERGE,
        REPLACE,
        WriteFacts(mode="append", change=False, new_columns=("x",)),
        WriteFacts(mode="append", change=False, engine_wrote=True, new_columns=("x",), quarantine=True),
    ]
    assert {plan_write(f).case for f in facts} == set(CASES)


def test_the_outcome_survives_the_state_json_and_an_older_state_has_none() -> None:
    outcome = WriteOutcome(
        "change",
        "merge",
        True,
        keys_after_write=True,
        snapshot_id=7,
        rows_added=12,
        rows_deleted=10,
        changes={"rows_inserted": 2, "rows_updated": 3, "rows_deleted": 1, "rows_replaced": 0, "main_rows": 10},
    )
    state = new_state("crm.customers", ["a.csv"]).evolve(done=["prepare", "write"], write_outcome=outcome.to_dict())
    back = RunState.from_json(state.to_json())
    assert back == state and WriteOutcome.from_dict(back.write_outcome or {}) == outcome
    assert outcome.rows_written == 5  # a change's inserted and updated rows, not its copy-on-write copies
    staged = WriteOutcome("staged", "append", False, rows_added=4, staged=True, staged_columns=("tip",))
    assert WriteOutcome.from_dict(staged.to_dict()) == staged and staged.rows_written == 4
    # A state a wapflow stored before writes recorded their outcome: read as it was, derived when a step needs it.
    older = state.to_dict()
    del older["write_outcome"]
    assert RunState.from_dict(older).write_outcome is None


def test_the_audit_and_publish_read_the_outcome_never_the_write_mode() -> None:
    asks = re.compile(r"write_mode\(run\.table_cfg\)|\.reapplies\b|table_cfg\.mode\b")
    for step in ("audit.py", "publish.py"):
        text = (STEPS / step).read_text()
        assert not asks.findall(text), f"{step} asks the write mode: {asks.findall(text)}"
