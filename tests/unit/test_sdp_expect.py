"""Checks written next to a pipeline's dataset (wapflow.expect), and the datasets a SQL file declares: read
without Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import wapflow
from wapflow.errors import UsageError
from wapflow.sdp import project
from wapflow.sdp.expectations import checks_of


def test_expect_marks_the_function_in_the_order_written_and_takes_any_built_check() -> None:
    @wapflow.expect("positive", "amount > 0")
    @wapflow.expect(wapflow.checks.unique("id"), severity="warn")
    def orders() -> None: ...

    marks = checks_of(orders)
    assert [m["check"] for m in marks] == ["expression", "unique"]
    assert marks[0] == {"check": "expression", "name": "positive", "sql": "amount > 0", "severity": "error"}
    assert marks[1]["columns"] == ["id"] and marks[1]["severity"] == "warn"
    from pydantic import TypeAdapter

    from wapflow.config import Check

    assert TypeAdapter(Check).validate_python(marks[1]).display_name() == "unique(id)"  # what the run validates


def test_expect_above_the_dataset_decorator_or_without_a_condition_says_what_to_do() -> None:
    with pytest.raises(UsageError, match=r"below @dp\.materialized_view"):
        wapflow.expect("positive", "amount > 0")(None)  # what @dp.materialized_view returns
    with pytest.raises(UsageError, match="needs a condition"):
        wapflow.expect("positive")
    with pytest.raises(UsageError, match="a name and a condition"):
        wapflow.expect(42)


def test_the_datasets_of_a_sql_file_are_noted_with_their_line() -> None:
    proj = project.Project(Path("spark-pipeline.yml"), "p", "file:///s", None, "sales", {}, spec=None)
    seen: list[Any] = []

    class Inner:
        def register_sql(self, sql: str, path: Path) -> None:
            seen.append(path)

    reg = project.recording(Inner(), proj)
    sql = (
        "CREATE TEMPORARY VIEW v AS SELECT 1;\n"
        "CREATE MATERIALIZED VIEW daily AS SELECT * FROM v;\n"
        "create or refresh streaming table `raw`.`events` AS SELECT * FROM STREAM(src);\n"
    )
    reg.register_sql(sql, Path("t/a.sql"))
    assert {n: (d.kind, d.where) for n, d in proj.datasets.items()} == {
        "daily": ("materialized_view", "t/a.sql:2"),
        "raw.events": ("streaming_table", "t/a.sql:3"),
    }
    assert seen == [Path("t/a.sql")]  # registered with Spark as it is
