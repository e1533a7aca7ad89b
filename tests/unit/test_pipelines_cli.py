"""`wap pipelines run | dry-run` refusals that come before Spark starts: no spec, a spec that is not one, a
catalog that is not the lakehouse's, refresh options that do not go together. One error, exit 2, no trace."""

from __future__ import annotations

from pathlib import Path

from support.typer_cli import as_json, wap, write_config
from wapflow.errors import EXIT_USAGE


def _cfg(tmp_path: Path) -> Path:
    return write_config(tmp_path, "pl")


def test_no_spec_here_or_above_names_what_to_do(tmp_path: Path, monkeypatch) -> None:
    cfg = _cfg(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    res = wap("pipelines", "run", "--config", str(cfg))
    assert res.exit_code == EXIT_USAGE, res.output
    assert "no spark-pipeline.yml in" in res.output and "--spec" in res.output
    assert "Traceback" not in res.output


def test_a_spec_that_is_not_one_says_which_field(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    spec = tmp_path / "p" / "spark-pipeline.yml"
    spec.parent.mkdir()
    spec.write_text("name: shop\nstorage: storage\nschedule: daily\n")
    res = wap("pipelines", "dry-run", "--spec", str(spec), "--config", str(cfg), "--json")
    assert res.exit_code == EXIT_USAGE
    doc = as_json(res)
    assert "schedule" in doc["error"]["message"] and str(spec) in doc["error"]["message"]
    spec.write_text("name: [unclosed\n")
    res = wap("pipelines", "run", "--spec", str(spec.parent), "--config", str(cfg))  # the folder is enough
    assert res.exit_code == EXIT_USAGE and "is not a pipeline spec" in res.output


def test_another_catalog_in_the_spec_is_refused(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    spec = tmp_path / "p" / "spark-pipeline.yml"
    spec.parent.mkdir()
    spec.write_text("name: shop\nstorage: storage\ncatalog: other\ndatabase: sales\n")
    res = wap("pipelines", "run", "--spec", str(spec), "--config", str(cfg))
    assert res.exit_code == EXIT_USAGE
    assert "names catalog 'other'" in res.output and "catalog is 'pl'" in res.output


def test_full_refresh_all_does_not_go_with_named_datasets(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    res = wap("pipelines", "run", "--full-refresh-all", "--refresh", "a,b", "--config", str(cfg))
    assert res.exit_code == EXIT_USAGE and "--full-refresh-all" in res.output


def test_the_help_lists_both_commands() -> None:
    out = wap("pipelines", "--help").output
    assert "run" in out and "dry-run" in out
