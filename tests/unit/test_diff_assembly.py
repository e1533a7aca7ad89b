"""`wap diff` without Spark: main's file metrics summed as Iceberg's `files` table gives them, side by side with
a run's recorded metrics (new and missing columns), the run's change from its record, which run a name means,
and a published run or an unknown name answered from the run store alone (the JVM is forbidden here). Real
runs: tests/spark/test_diff.py."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wapflow.audit.metrics import FileMetrics, summed_file_metrics
from wapflow.cli import app
from wapflow.config import parse_config
from wapflow.errors import NotFound, UsageError
from wapflow.runs.metrics import MetricHistory
from wapflow.runs.store import RunRecord, RunStore
from wapflow.service.diff import diff, side_by_side, target
from wapflow.service.runs import run_rows

runner = CliRunner()


def _file(rc: int, **cols: tuple[int | None, int | None, object, object]) -> tuple[int, dict[str, dict[str, object]]]:
    """One data file: its record count and per column (value count, null count, lower, upper)."""
    return rc, {
        c: {"value_count": v, "null_value_count": n, "nan_value_count": None, "lower_bound": lo, "upper_bound": hi}
        for c, (v, n, lo, hi) in cols.items()
    }


def test_file_metrics_are_summed_over_files() -> None:
    fm = summed_file_metrics(
        [
            _file(
                10,
                Fare=(10, 2, 1.5, 9.0),
                day=(10, 0, date(2026, 1, 2), date(2026, 1, 5)),
                extra=(None, None, None, None),
            ),
            _file(30, Fare=(30, 3, 0.5, 7.0), day=(30, None, date(2026, 1, 1), date(2026, 1, 3)), extra=(30, 0, 4, 4)),
        ]
    )
    assert fm.rows == 40
    assert fm.null_counts["fare"] == 5 and (fm.lower["fare"], fm.upper["fare"]) == (0.5, 9.0)
    assert fm.null_counts["day"] is None  # one file does not track it: unknown, not a wrong sum
    assert (fm.lower["day"], fm.upper["day"]) == (date(2026, 1, 1), date(2026, 1, 5))
    assert fm.columns == {"fare", "day", "extra"}  # extra: some file holds values of it
    assert fm.lower["extra"] is None  # the first file had no bound for it
    assert summed_file_metrics([]) == FileMetrics(rows=0)


def test_side_by_side_main_vs_batch_with_new_and_missing_columns() -> None:
    main = summed_file_metrics(
        [_file(200, fare=(200, 0, 2.0, 80.0), day=(200, 0, date(2026, 1, 1), date(2026, 1, 9)), old=(200, 50, 1, 3))]
    )
    batch = {
        ("row_count", ""): 100.0,
        ("schema", ""): json.dumps({"day": "date", "Fare": "double", "tip": "double"}),
        ("null_fraction", "fare"): 0.3,
        ("min", "fare"): 1.0,
        ("max", "fare"): 900.0,
        ("mean", "fare"): 42.5,
        ("null_fraction", "tip"): 1.0,
    }
    cols = {c["column"]: c for c in side_by_side(main, batch)}
    assert list(cols) == ["day", "fare", "tip", "old"]  # the batch's schema order, then main's other columns
    assert cols["fare"] == {
        "column": "fare",
        "on": "both",
        "main": {"null_fraction": 0.0, "min": 2.0, "max": 80.0, "mean": None},
        "batch": {"null_fraction": 0.3, "min": 1.0, "max": 900.0, "mean": 42.5},
    }
    assert cols["day"]["main"] == {"null_fraction": 0.0, "min": "2026-01-01", "max": "2026-01-09", "mean": None}
    assert cols["tip"]["on"] == "new" and cols["tip"]["main"] is None
    assert cols["old"]["on"] == "missing" and cols["old"]["batch"] is None
    assert cols["old"]["main"]["null_fraction"] == 0.25
    # An empty main: every batch column is new.
    assert {c["on"] for c in side_by_side(FileMetrics(rows=0), batch)} == {"new"}


def test_a_batchs_dates_times_and_strings_are_recorded_as_text_and_shown_beside_mains(tmp_path: Path) -> None:
    """The batch's min / max of columns that are not numbers: recorded by the audit as text (the history's
    `text`, never an anomaly series' value), read back and shown as main's are; binary bounds are not shown."""
    from wapflow.audit.anomaly import file_bound_texts, file_metric_values

    added = summed_file_metrics(
        [
            _file(
                3,
                day=(3, 0, date(2026, 2, 1), date(2026, 2, 3)),
                at=(3, 0, datetime(2026, 2, 1, 6, 30), datetime(2026, 2, 3, 23, 0)),
                city=(3, 1, "Albany", "Yonkers"),
                blob=(3, 0, bytearray(b"\x00"), bytearray(b"\xff")),
                fare=(3, 0, 1.5, 9.0),
            )
        ]
    )
    texts = file_bound_texts(added)
    assert texts == {
        ("min", "day"): "2026-02-01",
        ("max", "day"): "2026-02-03",
        ("min", "at"): "2026-02-01 06:30:00",
        ("max", "at"): "2026-02-03 23:00:00",
        ("min", "city"): "Albany",
        ("max", "city"): "Yonkers",
    }
    history = MetricHistory(RunStore(f"sqlite:///{tmp_path / 'runs.db'}").engine)
    history.record("r1", "t.x", datetime(2026, 2, 4, tzinfo=UTC), {**file_metric_values(added), **texts})
    batch = history.of_run("r1", "t.x")
    assert history.published("t.x", "min", "day", 30) == []  # a run of no status counts as published: none
    assert history.published("t.x", "min", "fare", 30) == [1.5]
    main = summed_file_metrics(
        [_file(5, day=(5, 0, date(2026, 1, 1), date(2026, 1, 31)), city=(5, 0, "Albany", "Troy"))]
    )
    cols = {c["column"]: c for c in side_by_side(main, batch)}
    assert (cols["day"]["main"]["min"], cols["day"]["main"]["max"]) == ("2026-01-01", "2026-01-31")
    assert (cols["day"]["batch"]["min"], cols["day"]["batch"]["max"]) == ("2026-02-01", "2026-02-03")
    assert (cols["city"]["batch"]["min"], cols["city"]["batch"]["max"]) == ("Albany", "Yonkers")
    assert cols["city"]["batch"]["null_fraction"] == pytest.approx(1 / 3)
    assert (cols["at"]["batch"]["min"], cols["at"]["batch"]["max"]) == ("2026-02-01 06:30:00", "2026-02-03 23:00:00")
    assert (cols["fare"]["batch"]["min"], cols["fare"]["batch"]["max"]) == (1.5, 9.0)
    assert "blob" not in {c for (_, c) in texts} and cols["blob"]["batch"]["min"] is None


def test_run_rows_from_the_change_line_the_change_metrics_or_the_rows_written() -> None:
    merge = RunRecord(
        run_id="m",
        table_name="crm.c",
        status="blocked",
        rows_written=4,
        checks=[{"check": "changes", "observed": {"rows_inserted": 1, "rows_updated": 3, "rows_deleted": 2}}],
    )
    assert run_rows(merge, {}, 10) == {"added": 1, "updated": 3, "deleted": 2, "replaced": 0, "main_rows": 10}
    metrics = {("rows_inserted", ""): 5.0, ("rows_updated", ""): 0.0, ("rows_deleted", ""): 7.0}
    older = RunRecord(run_id="o", table_name="crm.c", status="blocked", rows_written=5)
    assert run_rows(older, metrics, 0)["deleted"] == 7
    append = RunRecord(run_id="a", table_name="nyc.trips", status="blocked", rows_written=100)
    assert run_rows(append, {("row_count", ""): 100.0}, 200) == {
        "added": 100,
        "updated": 0,
        "deleted": 0,
        "replaced": 0,
        "main_rows": 200,
    }


def _store(tmp_path: Path) -> RunStore:
    store = RunStore(f"sqlite:///{tmp_path / 'state' / 'wapflow_runs.db'}")
    at = datetime(2026, 11, 1, tzinfo=UTC)
    store.save(RunRecord(run_id="run_pub_1", table_name="nyc.trips", status="published", snapshot_id=77, started_at=at))
    store.save(RunRecord(run_id="run_old_2", table_name="nyc.trips", status="discarded", branch="wap_b", started_at=at))
    store.save(
        RunRecord(
            run_id="run_blk_3",
            table_name="nyc.trips",
            status="blocked",
            branch="wap_b",
            branch_kept=True,
            started_at=at,
        )
    )
    MetricHistory(store.engine).record("run_blk_3", "nyc.trips", at, {("row_count", ""): 3.0})
    return store


def test_a_name_is_a_run_or_the_run_that_kept_a_branch(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert target(store, "run_pub_1").run_id == "run_pub_1"
    assert target(store, "wap_b").run_id == "run_blk_3"  # the run that kept it, not the discarded one
    with pytest.raises(NotFound, match=r"no run or kept branch run_blk_4 .*did you mean.*run_blk_3"):
        target(store, "run_blk_4")


def test_published_unknown_and_gone_runs_need_no_spark(tmp_path: Path) -> None:
    from wapflow.lakehouse.lakehouse import Lakehouse

    _store(tmp_path)
    cfg = parse_config(
        {
            "lakehouse": {
                "warehouse": str(tmp_path / "lakehouse"),
                "run_store": f"sqlite:///{tmp_path / 'state' / 'wapflow_runs.db'}",
            }
        }
    )
    lh = Lakehouse(cfg)
    doc = diff(lh, "run_pub_1")
    assert doc["published"] is True and doc["snapshot_id"] == 77 and doc["rows"] is None
    assert "run_pub_1 is already on main of nyc.trips (snapshot 77)" in doc["message"]
    with pytest.raises(UsageError, match="run_old_2 is discarded and its branch is not kept"):
        diff(lh, "run_old_2")

    toml = tmp_path / "wap.toml"
    toml.write_text(
        f'[lakehouse]\nwarehouse = "{tmp_path / "lakehouse"}"\n'
        f'run_store = "sqlite:///{tmp_path / "state" / "wapflow_runs.db"}"\n'
    )
    res = runner.invoke(app, ["diff", "run_pub_1", "--json", "--config", str(toml)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["published"] is True
    res = runner.invoke(app, ["diff", "run_pub_9", "--config", str(toml)])
    assert res.exit_code == 2
    assert "no run or kept branch run_pub_9" in res.stderr and "run_pub_1" in res.stderr


def test_wap_report_says_what_publishing_a_pending_run_would_change(tmp_path: Path) -> None:
    from wapflow.service.runs import run_report

    store = _store(tmp_path)
    merge = RunRecord(
        run_id="run_mrg_4",
        table_name="crm.c",
        status="awaiting_review",
        branch="wap_m",
        checks=[{"check": "changes", "observed": {"rows_inserted": 2, "rows_updated": 5, "rows_deleted": 1}}],
    )
    store.save(merge)
    assert run_report(store, "run_mrg_4")["would_change"] == (
        "publishing it would add 2 row(s), update 5, delete 1 (main vs the batch per column: wap diff run_mrg_4)"
    )
    store.save(
        RunRecord(run_id="run_blk_5", table_name="nyc.trips", status="blocked", branch_kept=True, rows_written=30)
    )
    toml = tmp_path / "wap.toml"
    toml.write_text(f'[lakehouse]\nrun_store = "sqlite:///{tmp_path / "state" / "wapflow_runs.db"}"\n')
    res = runner.invoke(app, ["report", "run_blk_5", "--config", str(toml)])
    assert res.exit_code == 0, res.output
    assert "publishing it would add 30 row(s) (main vs the batch per column: wap diff run_blk_5)" in res.stdout
    # Published, or its branch gone: nothing it would change.
    assert run_report(store, "run_pub_1")["would_change"] is None
    assert run_report(store, "run_old_2")["would_change"] is None
