"""wap.toml's `format_version` (the Iceberg format version wapflow creates a table with) and the refusals of
`wap maintain --upgrade-format` that need no JVM. On Spark: tests/spark/test_format_v3.py."""

from __future__ import annotations

import pytest

from support.cli_harness import wap, write_config
from wapflow.config import WapConfig
from wapflow.lakehouse.model import DEFAULT_FORMAT_VERSION


def _cfg(text: str) -> WapConfig:
    import tomllib

    return WapConfig.model_validate(tomllib.loads(text))


def test_default_is_2_and_a_table_or_the_lakehouse_says_otherwise() -> None:
    assert WapConfig().format_version_for("a.b") == DEFAULT_FORMAT_VERSION == 2
    cfg = _cfg('[lakehouse]\nformat_version = 3\n[tables."a.old"]\nformat_version = 2\n[tables."a.new"]\nchecks = []')
    assert cfg.format_version_for("a.other") == 3
    assert cfg.format_version_for("a.old") == 2
    assert cfg.format_version_for("a.old__quarantine") == 2  # a quarantine table is created as its table
    assert cfg.format_version_for("a.new") == 3


@pytest.mark.parametrize("where", ["lakehouse", 'tables."a.b"'])
def test_an_unknown_version_is_a_config_error(tmp_path, where: str) -> None:
    with pytest.raises(Exception, match="format_version"):
        _cfg(f"[{where}]\nformat_version = 4\n")
    cfg = write_config(tmp_path, lakehouse="format_version = 1" if where == "lakehouse" else "")
    if where == "lakehouse":
        r = wap("maintain", "--config", str(cfg))
        assert r.code == 2 and "format_version" in r.stderr, r.stderr


def test_upgrade_needs_a_table_and_a_version_wapflow_runs_on(tmp_path) -> None:
    cfg = str(write_config(tmp_path))
    r = wap("maintain", "--upgrade-format", "3", "--config", cfg)
    assert r.code == 2 and "--upgrade-format needs the table" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = wap("maintain", "a.b", "--upgrade-format", "4", "--config", cfg)
    assert r.code == 2 and "format versions 2, 3 only" in r.stderr, r.stderr
