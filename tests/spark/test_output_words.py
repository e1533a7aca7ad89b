"""What `wap run`, `wap report` and `wap maintain --dry-run` print for people holds no Python repr (issue 50
item 6): a held run has no `snapshot: None`, an anomaly check short of history reads `value 100, 0 of 3 runs
of history`, not a dict, and maintenance says why snapshots stay (`head of branch main: 1 snapshot`), not
`kept_because={...}`. Real runs on the shared session through the CLI (Typer's runner, as the other CLI
tests of this layer); --json keeps the values as they are."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from support.cli_harness import unique_catalog
from support.data import trips_file
from support.typer_cli import wap, write_config
from wapflow.errors import EXIT_REVIEW

CHECKS = [
    {"check": "not_null", "column": "passenger_count"},
    {"check": "anomaly", "metric": "row_count", "min_history": 3, "on_short_history": "warn"},
]
REPR = re.compile(r"[{}]|\bNone\b|'[\w ]+':")


def words(text: str) -> str:
    """The text without the tables' borders and line breaks (a cell wraps its words)."""
    return " ".join(re.sub(r"[│┃]", " ", text).split())


def assert_for_people(text: str) -> None:
    assert not REPR.search(text), text


@pytest.mark.spark
def test_a_held_runs_output_and_report_read_as_words(spark, tmp_path: Path, landing: Path) -> None:
    cfg = str(write_config(tmp_path, unique_catalog("words"), checks=CHECKS))
    Path(cfg).write_text(
        Path(cfg).read_text().replace('[tables."nyc.trips"]\n', '[tables."nyc.trips"]\nreview = "always"\n')
    )
    r = wap("run", "nyc.trips", str(trips_file(landing, "a.parquet", 100, null_rate=0.0)), "--config", cfg)
    assert r.exit_code == EXIT_REVIEW, r.output
    assert "AWAITING_REVIEW" in r.stdout and "rows written: 100" in r.stdout, r.stdout
    assert "snapshot" not in r.stdout.split("rows written: 100")[1].splitlines()[0]  # none on main yet
    assert "value 100, 0 of 3" in r.stdout and "min_history" not in r.stdout, r.stdout  # the short history
    assert_for_people(r.stdout)
    run_id = json.loads(wap("runs", "--config", cfg, "--json").stdout)["runs"][0]["run_id"]
    report = wap("report", run_id, "--config", cfg)
    assert report.exit_code == 0 and run_id in report.stdout and "awaiting review" in report.stdout
    assert_for_people(report.stdout)
    doc = json.loads(wap("report", run_id, "--config", cfg, "--json").stdout)
    anomaly = next(c for c in doc["checks"] if c["check"] == "anomaly")
    assert anomaly["observed"] == {"value": 100.0, "history": 0, "min_history": 3}  # --json as recorded


@pytest.mark.spark
def test_wap_maintain_dry_run_says_why_snapshots_stay_in_words(spark, tmp_path: Path, landing: Path) -> None:
    extra = '[maintenance]\nexpire_older_than = "0s"\nrevert_window = "0s"\nkeep_last = 1\nevery = "never"\n'
    cfg = str(write_config(tmp_path, unique_catalog("words_maint"), checks=CHECKS[:1], extra=extra))
    for i in range(3):
        f = trips_file(landing, f"m{i}.parquet", 10, start_id=1 + 10 * i, null_rate=0.0)
        assert wap("run", "nyc.trips", str(f), "--config", cfg).exit_code == 0
    blocked = trips_file(landing, "m_bad.parquet", 10, start_id=100, null_rate=0.5, seed=3)
    assert wap("run", "nyc.trips", str(blocked), "--config", cfg).exit_code == 1  # its branch kept
    time.sleep(0.05)
    r = wap("maintain", "nyc.trips", "--dry-run", "--config", cfg)
    assert r.exit_code == 0, r.output
    text = words(r.stdout)
    assert "expire_snapshots: expire 3; keep 2; kept because head of branch" in text, r.stdout
    assert "head of branch main: 1 snapshot" in text and re.search(r"head of branch wap_\w+: 1 snapshot", text)
    assert_for_people(r.stdout)
