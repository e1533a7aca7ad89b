"""wap.toml validation: precise errors naming the file, the section and the key. No Spark needed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from wapflow.config import STARTER, load_config, parse_config
from wapflow.errors import ConfigError, InvalidIdentifier
from wapflow.sql.identifiers import TableName, validate_branch


def write(tmp: Path, text: str) -> Path:
    p = tmp / "wap.toml"
    p.write_text(text)
    return p


def test_defaults_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WAP_CONFIG", raising=False)
    cfg = load_config()
    assert cfg.source is None
    assert cfg.warehouse_location() == str(tmp_path / "lakehouse")
    assert cfg.lakehouse.catalog == "sqlite"
    assert cfg.table("nyc.trips").checks == []
    assert cfg.run_store_url() == f"sqlite:///{tmp_path / 'lakehouse' / 'wapflow_runs.db'}"


def test_the_readme_example_parses(tmp_path):
    p = write(
        tmp_path,
        """
[lakehouse]
warehouse = "./lakehouse"

[tables."nyc.trips"]
format = "parquet"
on_failure = "keep"
checks = [
  { check = "not_null", column = "passenger_count" },
  { check = "between", column = "fare_amount", min = 0, max = 1000, severity = "warn" },
  { check = "accepted_values", column = "payment_type", values = [1, 2, 3, 4, 5, 6] },
  { check = "unique", columns = ["trip_id"] },
  { check = "row_count", min = 1 },
  { check = "expression", sql = "dropoff_at >= pickup_at" },
]
""",
    )
    cfg = load_config(p)
    checks = cfg.table("nyc.trips").checks
    assert [c.check for c in checks] == ["not_null", "between", "accepted_values", "unique", "row_count", "expression"]
    assert checks[1].severity == "warn"
    assert checks[3].columns() == ["trip_id"]


def test_relative_warehouse_resolves_against_the_config_folder(tmp_path, monkeypatch):
    sub = tmp_path / "proj"
    sub.mkdir()
    p = write(sub, '[lakehouse]\nwarehouse = "data/lake"\n')
    monkeypatch.chdir(tmp_path)
    assert load_config(p).warehouse_location() == str(sub / "data" / "lake")


def test_starter_file_is_valid(tmp_path):
    cfg = load_config(write(tmp_path, STARTER))
    assert len(cfg.table("nyc.trips").checks) == 6


def test_unknown_key_is_named_with_a_suggestion(tmp_path):
    p = write(tmp_path, '[lakehouse]\nwarehous = "./x"\n')
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert str(p) in msg
    assert "[lakehouse]: unknown key 'warehous'" in msg
    assert "did you mean 'warehouse'" in msg
    assert e.value.exit_code == 2


def test_unknown_key_in_a_check(tmp_path):
    p = write(tmp_path, '[tables."a.b"]\nchecks = [{ check = "not_null", colum = "x" }]\n')
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "unknown key 'colum'" in str(e.value) and "did you mean 'column'" in str(e.value)
    assert '[tables."a.b"] checks[0]' in str(e.value)


def test_wrong_type_names_the_key(tmp_path):
    p = write(tmp_path, '[lakehouse]\nmaster = 3\n[tables."a.b"]\non_failure = "explode"\n')
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "[lakehouse].master" in msg and "(got 3)" in msg
    assert '[tables."a.b"].on_failure' in msg and "'keep'" in msg


def test_unknown_check_type_suggests(tmp_path):
    p = write(tmp_path, '[tables."a.b"]\nchecks = [{ check = "not_nul", column = "x" }]\n')
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "unknown check type 'not_nul'" in str(e.value)
    assert "did you mean 'not_null'" in str(e.value)


def test_check_without_required_parameter(tmp_path):
    p = write(tmp_path, '[tables."a.b"]\nchecks = [{ check = "between", column = "x" }]\n')
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "at least one of 'min' or 'max'" in str(e.value)


def test_invalid_toml_is_reported_with_the_file(tmp_path):
    p = write(tmp_path, "[lakehouse\nwarehouse = 1\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "not valid TOML" in str(e.value) and str(p) in str(e.value)


def test_config_env_and_missing_explicit_path(tmp_path, monkeypatch):
    p = write(tmp_path, '[lakehouse]\nwarehouse = "/tmp/elsewhere"\n')
    monkeypatch.setenv("WAP_CONFIG", str(p))
    assert load_config().warehouse_location() == "/tmp/elsewhere"
    monkeypatch.setenv("WAP_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="WAP_CONFIG"):
        load_config()
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_catalog_name_is_validated():
    with pytest.raises(ConfigError, match="catalog_name"):
        parse_config({"lakehouse": {"catalog_name": "bad;name"}})


@pytest.mark.parametrize("bad", ["a.b;c", "a.`b`", "a.'b'", 'a."b"', "a. b", "a", "", "a..b", "1a.b"])
def test_table_names_are_validated(bad):
    with pytest.raises(InvalidIdentifier):
        TableName.parse(bad)


def test_table_name_quoting():
    t = TableName.parse("nyc.trips")
    assert t.sql("lake") == "`lake`.`nyc`.`trips`"
    assert t.branch_sql("lake", "wap_1-a") == "`lake`.`nyc`.`trips`.`branch_wap_1-a`"


@pytest.mark.parametrize("bad", ["a;b", "a.b", "a`b", "a'b", "main", "", "a b"])
def test_branch_names_are_validated(bad):
    with pytest.raises(InvalidIdentifier):
        validate_branch(bad)


def test_starter_is_commented_toml():
    data = tomllib.loads(STARTER)
    assert data["lakehouse"]["warehouse"] == "./lakehouse"
    assert STARTER.count("#") > 10


def test_checks_from_python_are_validated_like_toml():
    from pydantic import ValidationError

    from wapflow import checks as C

    assert C.unique("a", "b").columns() == ["a", "b"]
    assert C.between("fare", 0, 10, severity="warn").display_name() == "between(fare, 0, 10)"
    assert C.not_null("x", filter="y > 1", mostly=0.9).display_name() == "not_null(x) where y > 1"
    with pytest.raises(ValidationError):
        C.row_count(min=5, max=1)
    with pytest.raises(ValidationError):
        C.freshness("t", "soon")
