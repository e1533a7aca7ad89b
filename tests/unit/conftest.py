"""Every test of the unit layer runs without a JVM: starting Spark fails loudly (tests/support/no_jvm.py)."""

from __future__ import annotations

import pytest

from support.no_jvm import forbid_jvm


@pytest.fixture(autouse=True)
def _no_jvm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Function-scoped on purpose: under `make test` one worker runs unit and Spark files one after the
    other, and the guard must end with the unit test."""
    forbid_jvm(monkeypatch)
