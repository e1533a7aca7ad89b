"""The dashboard's Run page shows a multi-table run (issue 46 item 4): in the recent runs one row naming its tables
and their status; picked by its group id, the whole run, each table, the table that stopped it with its checks,
the failed model's error, timings and the commands that take the group's id; a table of it names its group.
The real app (Streamlit's AppTest) on a run store written by wapflow's RunStore, no JVM."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.apptest import app_test
from support.run_groups import BLOCKED, FAILED, FK, HELD, MODEL_ERROR, SINGLE, make_store


@pytest.fixture
def lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    import streamlit as st

    cfg = make_store(tmp_path)
    monkeypatch.setenv("WAP_CONFIG", str(cfg))
    st.cache_data.clear()
    st.cache_resource.clear()
    yield cfg
    st.cache_data.clear()
    st.cache_resource.clear()


def run_page(run_id: str | None = None) -> Any:

    at = app_test().run()
    at.radio(key="page").set_value("Run").run()
    if run_id is not None:
        at.text_input(key="run_id").input(run_id).run()
    assert not at.exception, at.exception
    return at


def frames(at: Any) -> list[Any]:
    return [d.value for d in at.dataframe]


def texts(at: Any) -> str:
    parts = [e.value for kind in ("header", "markdown", "caption", "code", "warning", "error", "info") for e in
             getattr(at, kind)]  # fmt: skip
    parts += [f"{m.label} {m.value}" for m in at.metric]
    return "\n".join(str(p) for p in parts)


def test_recent_runs_show_a_group_as_one_row_with_its_tables(lake: Path) -> None:
    at = run_page()
    recent = frames(at)[-1]
    ids = list(recent["run_id"])
    assert BLOCKED in ids and FAILED in ids and SINGLE in ids
    assert not any(i.startswith(f"{BLOCKED}-") for i in ids)  # its tables are on its row, not rows of their own
    row = recent[recent["run_id"] == BLOCKED].iloc[0]
    assert row["tables"] == "shop.orders (blocked), shop.lines (blocked)" and row["status"] == "blocked"
    assert row["reason"] == f"blocked by shop.lines: {FK}"
    # The picker offers the group by its id.
    assert BLOCKED in at.sidebar.selectbox(key="run_id_pick").options


def test_a_group_shows_each_table_and_the_one_that_stopped_it(lake: Path) -> None:
    at = run_page(BLOCKED)
    shown = texts(at)
    assert f"multi-table run {BLOCKED}" in shown and "Status  \n**blocked**" in shown and "Tables 2" in shown
    tables = frames(at)[0]
    assert list(tables["table"]) == ["shop.orders", "shop.lines"]
    assert list(tables["run_id"]) == [f"{BLOCKED}-1", f"{BLOCKED}-2"]
    assert list(tables["stopped_it"]) == [False, True] and list(tables["failed_checks"]) == ["", FK]
    assert "**shop.lines** stopped it" in shown
    checks = frames(at)[1]
    assert list(checks["name"]) == ["not_null(amount)", FK] and list(checks["status"]) == ["passed", "failed"]
    assert f"wap diff {BLOCKED}" in shown and f"wap discard wap_{BLOCKED}" in shown
    timings = next(f for f in frames(at) if "step" in f.columns)
    assert list(timings["table"]) == ["shop.orders"] * 3 and list(timings["step"]) == ["prepare", "write", "audit"]


def test_a_failed_model_group_names_the_model(lake: Path) -> None:
    at = run_page(FAILED)
    assert [e.value for e in at.error] == [f"write: {MODEL_ERROR}"]
    assert "multi-table run nightly" in texts(at)


def test_a_table_of_a_group_names_it_and_is_decided_with_it(lake: Path) -> None:
    at = run_page(f"{HELD}-2")
    shown = texts(at)
    assert f"part of multi-table run {HELD}" in shown
    assert f"wap approve {HELD} --reason ..." in shown and f"wap approve {HELD}-2" not in shown
