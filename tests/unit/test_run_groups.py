"""A multi-table run (`wap run-tables`, wapflow.transaction, `wap run-models`) in `wap runs` and `wap report`: one
line for the whole run with its tables below it, the group's status and the table that stopped it, a failed
model named, each table's run naming its group (issue 46 item 4). The run store holds the records these runs
write (one per table, sharing wap_runs.group_id), written by wapflow's own RunStore; no JVM starts."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from support.cli_harness import WAP, env
from support.run_groups import BLOCKED, FAILED, FK, GONE, HELD, MODEL_ERROR, SINGLE, make_store
from support.typer_cli import runner
from wapflow.cli import app
from wapflow.config import load_config
from wapflow.errors import NotFound
from wapflow.runs.store import RunRecord, RunStore

T0 = datetime(2026, 11, 28, 20, 0, tzinfo=UTC)


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    return make_store(tmp_path)


def wap(*args: str) -> Any:
    return runner.invoke(app, list(args))


def wap_piped(*args: str, columns: str) -> str:
    """`wap ARGS` as its own process, stdout a pipe of COLUMNS columns; its stdout after exit 0."""
    p = subprocess.run([WAP, *args], capture_output=True, text=True, timeout=120, env=env(COLUMNS=columns),
                       stdin=subprocess.DEVNULL)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_runs_json_lists_a_group_once_with_its_tables_and_limit_counts_it_once(cfg: Path) -> None:
    r = wap("runs", "--config", str(cfg), "--json", "--limit", "3")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    # The three newest entries: two groups of two tables, then the named transaction; the single run is fourth.
    assert [g["group_id"] for g in doc["groups"]] == [GONE, HELD, FAILED]
    assert [x["run_id"] for x in doc["runs"]] == [f"{GONE}-1", f"{GONE}-2", f"{HELD}-1", f"{HELD}-2", f"{FAILED}-1",
                                                  f"{FAILED}-2"]  # fmt: skip
    assert all(x["group_id"] == x["run_id"].rsplit("-", 1)[0] for x in doc["runs"])
    failed = doc["groups"][2]
    assert failed["name"] == "nightly" and failed["source"] == "dataframes" and failed["status"] == "failed"
    assert failed["tables"] == ["silver.trips", "gold.daily"] and failed["blocked_by"] == ["gold.daily"]
    assert failed["reason"] == MODEL_ERROR and failed["seconds"] == 7.0
    held = doc["groups"][1]
    assert held["status"] == "awaiting_review" and held["review"] == "awaiting" and held["branch"] == f"wap_{HELD}"
    # A table of an interrupted group resumes with its group, never as a one-table `wap run`.
    gone = doc["groups"][0]
    assert gone["status"] == "interrupted" and gone["seconds"] is None
    assert (
        gone["resume"]
        == f"wap run-tables shop.orders=shop.orders.parquet shop.lines=shop.lines.parquet --run-id {GONE}"
    )
    assert [x["resume"] for x in doc["runs"][:2]] == [None, None]

    everything = json.loads(wap("runs", "--config", str(cfg), "--json").stdout)
    assert [x["run_id"] for x in everything["runs"]][-3:] == [f"{BLOCKED}-1", f"{BLOCKED}-2", SINGLE]
    blocked = everything["groups"][-1]
    assert (blocked["status"], blocked["blocked_by"], blocked["rows"]) == ("blocked", ["shop.lines"], 5)
    assert blocked["reason"] == f"blocked by shop.lines: {FK}" and blocked["source"] == "files"
    assert blocked["seconds"] == 8.5 and blocked["name"] is None


@pytest.mark.parametrize("columns", ["120", "80"])
def test_runs_prints_the_group_line_then_its_tables_ids_whole(cfg: Path, columns: str) -> None:
    text = wap_piped("runs", "--config", str(cfg), columns=columns)
    lines = text.splitlines()

    records = columns == "80"  # too narrow for the ids side by side: each run a record, its fields one a line
    notes = [i for i, line in enumerate(lines) if line.startswith("not shown") or " was interrupted " in line]
    listing = lines[: notes[0]]
    assert len(listing) > 10, text
    assert max(len(line.rstrip()) for line in listing) <= int(columns), text  # the commands below print whole

    def line_of(word: str) -> int:
        return next(i for i, line in enumerate(lines) if f" {word} " in f" {line} ")

    def row_of(word: str) -> str:
        """The run's line, or its whole record (down to the blank line after it)."""
        i = line_of(word)
        end = next((k for k in range(i, len(lines)) if not lines[k].strip()), len(lines)) if records else i + 1
        return " ".join(lines[i:end])

    # The group's own line, then each table indented under it, in the order the run named them.
    assert line_of(BLOCKED) < line_of(f"├ {BLOCKED}-1") < line_of(f"└ {BLOCKED}-2") < line_of(SINGLE)
    assert "shop.lines" in row_of(f"└ {BLOCKED}-2") and "blocked" in row_of(BLOCKED)
    assert "2 tables" in row_of(BLOCKED) and "nightly: 2 tables" in row_of(FAILED)
    assert f"run {GONE} was interrupted" in text and "wap run-tables shop.orders=shop.orders.parquet" in text
    assert "wap run shop.orders" not in text


def test_runs_of_one_table_lists_its_own_runs_with_their_group(cfg: Path) -> None:
    doc = json.loads(wap("runs", "--table", "shop.lines", "--config", str(cfg), "--json").stdout)
    assert [x["run_id"] for x in doc["runs"]] == [f"{GONE}-2", f"{HELD}-2", f"{BLOCKED}-2"]
    assert [g["group_id"] for g in doc["groups"]] == [GONE, HELD, BLOCKED]
    text = wap_piped("runs", "--table", "shop.lines", "--config", str(cfg), columns="120")
    row = next(line for line in text.splitlines() if f"{BLOCKED}-2" in line)
    assert f" {BLOCKED} " in row and "├" not in text and "2 tables" not in text


def test_report_of_a_group_shows_each_table_and_the_one_that_blocked_it(cfg: Path) -> None:
    r = wap("report", BLOCKED, "--config", str(cfg), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["group_id"], doc["status"], doc["blocked_by"]) == (BLOCKED, "blocked", ["shop.lines"])
    assert doc["tables"] == ["shop.orders", "shop.lines"] and doc["branch_kept"] and doc["rows_written"] == 5
    assert [m["run_id"] for m in doc["members"]] == [f"{BLOCKED}-1", f"{BLOCKED}-2"]
    assert [m["snapshot_id"] for m in doc["members"]] == [21, 22]
    assert [c["status"] for c in doc["members"][1]["checks"]] == ["passed", "failed"]
    assert doc["members"][0]["timings"] == {"prepare": 0.2, "write": 3.1, "audit": 1.5}
    assert doc["seconds"] == 8.5 and doc["error"] is None

    text = wap_piped("report", BLOCKED, "--config", str(cfg), columns="120")
    assert text.startswith(f"BLOCKED multi-table run {BLOCKED}: 2 tables from files")
    assert f"blocked by shop.lines: {FK}" in text and f"wap diff {BLOCKED}" in text
    lines = text.splitlines()
    lines_row = next(line for line in lines if f"{BLOCKED}-2" in line and "shop.lines" in line)
    assert "1 failed" in lines_row and "yes" in lines_row and "22" in lines_row
    orders_row = next(line for line in lines if f"{BLOCKED}-1" in line and "shop.orders" in line)
    assert "yes" not in orders_row
    assert "timings (seconds)" in text and "(whole run)" in text


def test_report_of_a_failed_model_group_names_the_model_and_its_line(cfg: Path) -> None:
    doc = json.loads(wap("report", FAILED, "--config", str(cfg), "--json").stdout)
    assert doc["status"] == "failed" and doc["blocked_by"] == ["gold.daily"] and doc["name"] == "nightly"
    assert doc["error"]["message"] == MODEL_ERROR and doc["error"]["hint"]
    text = wap_piped("report", FAILED, "--config", str(cfg), columns="80")
    assert "FAILED nightly multi-table run" in text
    assert "error (write): model gold.daily: its sql does not run" in " ".join(text.split())
    assert "(line 2 pos 7)" in text


def test_report_of_a_table_of_a_group_names_its_group(cfg: Path) -> None:
    doc = json.loads(wap("report", f"{HELD}-2", "--config", str(cfg), "--json").stdout)
    assert doc["run_id"] == f"{HELD}-2" and doc["group_id"] == HELD
    text = wap_piped("report", f"{HELD}-2", "--config", str(cfg), columns="120")
    assert f"part of multi-table run {HELD}" in text and f"wap report {HELD})" in text
    # A table of a group is approved with its group (a member's own id is refused by `wap approve`).
    assert f"wap approve {HELD} --reason" in text and f"wap approve {HELD}-2" not in text
    single = json.loads(wap("report", SINGLE, "--config", str(cfg), "--json").stdout)
    assert single["group_id"] is None and "members" not in single


def test_report_of_an_unknown_id_suggests_a_group(cfg: Path) -> None:
    r = wap("report", BLOCKED[:-1] + "x", "--config", str(cfg))
    assert r.exit_code == NotFound.exit_code
    assert f"did you mean '{BLOCKED}'" in " ".join(r.stderr.split())


def test_no_group_rows_for_a_store_of_one_table_runs(tmp_path: Path) -> None:
    """A store without multi-table runs lists as before: one line per run, no group columns."""
    config = tmp_path / "wap.toml"
    config.write_text(f'[lakehouse]\nwarehouse = "{tmp_path / "lakehouse"}"\n')
    store = RunStore(load_config(config).run_store_url())
    store.save(RunRecord(SINGLE, "nyc.trips", "published", started_at=T0))
    store.close()
    doc = json.loads(wap("runs", "--config", str(config), "--json").stdout)
    assert doc["groups"] == [] and [x["run_id"] for x in doc["runs"]] == [SINGLE]
