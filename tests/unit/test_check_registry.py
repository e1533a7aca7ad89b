"""The check registry: every type documents itself, its example is valid wap.toml, the reference lists it."""

from __future__ import annotations

import tomllib
from typing import get_type_hints

import pytest

from wapflow import checks as C
from wapflow.audit.checktype import CheckType
from wapflow.audit.registry import EVIDENCE, check_reference, check_reference_markdown
from wapflow.audit.spec import CHECK_MODELS
from wapflow.config import parse_config

TYPES = sorted(CHECK_MODELS)


@pytest.mark.parametrize("name", TYPES)
def test_every_type_describes_itself(name: str) -> None:
    cls = CHECK_MODELS[name]
    assert cls.type_name() == name
    assert cls.description.strip() and "\n" not in cls.description
    assert cls.example.strip()
    assert cls.computed and set(cls.computed) <= set(EVIDENCE)


@pytest.mark.parametrize("name", TYPES)
def test_the_example_is_valid_wap_toml_declaring_that_type(name: str) -> None:
    cls = CHECK_MODELS[name]
    cfg = parse_config(tomllib.loads(cls.example))
    [table] = cfg.tables.values()
    [chk] = table.checks
    assert type(chk) is cls and chk.check == name


@pytest.mark.parametrize("name", TYPES)
def test_every_type_can_be_evaluated(name: str) -> None:
    """A type the write cannot observe brings its own measurement; one with metadata evidence reads it."""
    cls = CHECK_MODELS[name]
    if "write" not in cls.computed:
        assert cls.measure is not CheckType.measure
    elif "metadata" in cls.computed:
        assert cls.from_metadata is not CheckType.from_metadata
    assert cls.compile is not CheckType.compile


@pytest.mark.parametrize("name", TYPES)
def test_every_type_has_a_python_constructor(name: str) -> None:
    assert get_type_hints(getattr(C, name))["return"] is CHECK_MODELS[name]


def test_reference_parameters_come_from_the_models() -> None:
    refs = {r.name: r for r in check_reference()}
    assert list(refs) == list(CHECK_MODELS)
    unique = {p.name: p for p in refs["unique"].parameters}
    assert unique["columns"].required and unique["columns"].type == "list[str]" and not unique["columns"].common
    assert unique["severity"].common and unique["severity"].default == "error"
    volume = {p.name: p for p in refs["volume"].parameters}
    assert (volume["runs"].default, volume["runs"].required, volume["runs"].type) == (10, False, "int")
    assert "mostly" in {p.name for p in refs["not_null"].parameters}
    assert "mostly" not in {p.name for p in refs["row_count"].parameters}
    assert refs["not_null"].row_level and not refs["unique"].row_level


def test_the_markdown_reference_lists_every_type_and_parameter() -> None:
    md = check_reference_markdown()
    for ref in check_reference():
        section = md.split(f"## `{ref.name}`\n")[1].split("\n## ")[0]
        assert f"[`{ref.name}`](#{ref.name})" in md
        assert ref.description in section and ref.example.rstrip("\n") in section
        assert ("Row-level" if ref.row_level else "Batch-level") in section
        for p in ref.parameters:
            assert f"| `{p.name}` |" in section, (ref.name, p.name)
        for e in ref.computed:
            assert EVIDENCE[e] in section


def test_names_leave_out_unset_bounds() -> None:
    assert C.row_count(1).display_name() == "row_count(min=1)"
    assert C.row_count(max=9).display_name() == "row_count(max=9)"
    assert C.row_count(1, 5).display_name() == "row_count(1, 5)"
    assert C.between("fare", max=10).display_name() == "between(fare, max=10)"
    assert C.between("fare", 0, min_inclusive=False).display_name() == "between(fare, min=0, min_inclusive=false)"
    assert C.between("fare", 0, 10, max_inclusive=False).display_name() == "between(fare, [0, 10))"
    assert [C.row_count(*b).compile({}).threshold for b in ((1,), (None, 9), (1, 5))] == [">= 1", "<= 9", "[1, 5]"]


def test_checks_name_the_tables_whose_main_they_read() -> None:
    """What the publish step re-checks under its lock when main moved since the audit."""
    from wapflow.sql.identifiers import TableName

    this = TableName.parse("nyc.trips")
    zones = TableName.parse("nyc.zones")

    def in_sql(sql: str) -> set[TableName]:
        return {zones} if "zones" in sql else set()

    assert C.unique_in_table("id").main_tables(this, in_sql) == {this}
    assert C.volume().main_tables(this, in_sql) == {this}
    assert C.foreign_key("zone_id", "nyc.zones").main_tables(this, in_sql) == {zones}
    assert C.custom_sql("SELECT * FROM batch b JOIN lake.nyc.zones z ON b.z = z.id").main_tables(this, in_sql) == {
        zones
    }
    assert C.custom_sql("SELECT * FROM batch WHERE x < 0").main_tables(this, in_sql) == set()
    assert C.not_null("x").main_tables(this, in_sql) == C.unique("x").main_tables(this, in_sql) == set()
