"""The one observed count of rows failing any blocking row check (audit.checks.CLEAR_PREFIX): what it proves."""

from __future__ import annotations

from wapflow.audit.checks import CLEAR_PREFIX, cleared


def test_a_zero_count_is_each_of_its_checks_exact_zero() -> None:
    observed = {"_rows": 20, f"{CLEAR_PREFIX}c0_c2_c11": 0, "c1_f": 3, "c1_n": 20}
    assert cleared(observed) == {"c0_f": 0, "c2_f": 0, "c11_f": 0}


def test_a_count_above_zero_proves_nothing_of_any_check() -> None:
    assert cleared({"_rows": 20, f"{CLEAR_PREFIX}c0_c1": 2}) == {}


def test_no_rows_at_all_fail_no_check() -> None:
    # A sum over a batch of no rows is NULL, not 0.
    assert cleared({"_rows": 0, f"{CLEAR_PREFIX}c4": None}) == {"c4_f": 0}
