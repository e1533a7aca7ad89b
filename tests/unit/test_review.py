"""Review without Spark: the `review` key of a table, the exit code of a run left awaiting review (one table,
errors.exit_code_table), the run store's conditional decision (exactly one of racing deciders wins), the
migration that adds the review columns to a store of revision 0002, and the refusals of approve / reject that
need only the run store. The runs themselves: tests/spark/test_review.py, tests/process/test_review_race.py."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from support.stores import store_at
from wapflow.cli import app
from wapflow.config import TableConfig, parse_config
from wapflow.errors import (
    EXIT_BLOCKED,
    EXIT_CONFLICT,
    EXIT_PUBLISHED,
    EXIT_REVIEW,
    EXIT_USAGE,
    AlreadyDecided,
    ConfigError,
    NotFound,
    UsageError,
    exit_code_table,
)
from wapflow.outer.ingest import IngestResult, files_exit_code
from wapflow.pipeline.result import RunResult, exit_code_for
from wapflow.runs import schema
from wapflow.runs.ledger import FILE_STATES, SETTLED, LedgerRow
from wapflow.runs.store import RunRecord, RunStore
from wapflow.service.review import awaiting, reviewer
from wapflow.service.runs import list_runs, run_report

runner = CliRunner()


def test_review_defaults_to_never_and_takes_three_values() -> None:
    assert TableConfig().review == "never"
    for value in ("never", "on_warn", "always"):
        cfg = parse_config({"tables": {"nyc.trips": {"review": value}}})
        assert cfg.tables["nyc.trips"].review == value
    with pytest.raises(ConfigError, match="review") as e:
        parse_config({"tables": {"nyc.trips": {"review": "sometimes"}}})
    assert e.value.exit_code == 2 and "on_warn" in str(e.value)


@pytest.mark.parametrize(
    ("review", "warned", "held"),
    [
        ("never", False, False),
        ("never", True, False),
        ("on_warn", False, False),
        ("on_warn", True, True),
        ("always", False, True),
        ("always", True, True),
    ],
)
def test_which_runs_a_table_holds_for_review(review: str, warned: bool, held: bool) -> None:
    assert TableConfig.model_validate({"review": review}).holds_for_review(warned) is held


def test_a_run_left_awaiting_review_exits_6_everywhere() -> None:
    assert (EXIT_REVIEW, "review") in [(c, n) for c, n, _ in exit_code_table()]
    assert exit_code_for("awaiting_review", []) == EXIT_REVIEW
    res = RunResult(run_id="r", table="nyc.trips", status="awaiting_review", branch="wap_r")
    assert res.exit_code == EXIT_REVIEW and res.to_dict()["exit_code"] == EXIT_REVIEW
    # A pass over files: a held file makes it 6, unless one was blocked (1) or failed (3).
    assert files_exit_code({"published", "awaiting_review"}) == EXIT_REVIEW
    assert files_exit_code({"blocked", "awaiting_review"}) == EXIT_BLOCKED
    assert files_exit_code({"published", "rejected"}) == EXIT_PUBLISHED
    assert {"awaiting_review", "rejected"} <= set(FILE_STATES) and {"awaiting_review", "rejected"} <= SETTLED
    assert AlreadyDecided("x").exit_code == EXIT_CONFLICT and AlreadyDecided("x").kind == "conflict"
    out = " ".join(runner.invoke(app, ["--help"], terminal_width=300).output.split())
    assert "6 review" in out
    held = IngestResult("s", "nyc.trips", files=[LedgerRow("k", "s", "/land/a.parquet", 1, "v", "awaiting_review")])
    assert (held.status, held.exit_code) == ("awaiting_review", EXIT_REVIEW)


def _held(store: RunStore, run_id: str = "20261125t120000_aaaaaa") -> RunRecord:
    rec = RunRecord(run_id=run_id, table_name="nyc.trips", status="awaiting_review", branch=f"wap_{run_id}")
    rec.branch_kept = True
    store.save(rec)
    return rec


def test_of_racing_decisions_exactly_one_changes_the_run(tmp_path: Path) -> None:
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    rec = _held(store)
    start = threading.Barrier(8)
    won: list[str] = []

    def decide(i: int) -> None:
        other = RunStore(store.url)  # each its own engine, as each process has
        start.wait()
        if other.transition(
            rec.run_id, "awaiting_review", status="running", review="approved", review_by=f"u{i}", review_reason="ok"
        ):
            won.append(f"u{i}")
        other.close()

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    after = store.get(rec.run_id)
    assert after is not None and (after.status, after.review, after.review_by) == ("running", "approved", won[0])
    with pytest.raises(ValueError, match="no run store column"):
        store.transition(rec.run_id, "running", not_a_column=1)


def test_approve_and_reject_refuse_what_is_not_awaiting_review(tmp_path: Path) -> None:
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    held = _held(store)
    assert awaiting(store, held.run_id, "approve").run_id == held.run_id
    store.save(RunRecord(run_id="20261125t110000_bbbbbb", table_name="nyc.trips", status="published"))
    with pytest.raises(UsageError, match="is published, not awaiting review"):
        awaiting(store, "20261125t110000_bbbbbb", "approve")
    with pytest.raises(NotFound, match=r"no run 20261125t120000_aaaaab.*did you mean"):
        awaiting(store, "20261125t120000_aaaaab", "reject")
    assert store.transition(
        held.run_id,
        "awaiting_review",
        status="rejected",
        review="rejected",
        review_by="dana",
        review_reason="wrong day",
        reviewed_at=datetime(2026, 11, 25, 12, tzinfo=UTC),
    )
    with pytest.raises(AlreadyDecided, match=r"already rejected by dana at 2026-11-25 12:00:00.*wrong day"):
        awaiting(store, held.run_id, "approve")
    rows = {r["run_id"]: r["review"] for r in list_runs(store)}
    assert rows == {held.run_id: "rejected by dana: wrong day", "20261125t110000_bbbbbb": None}
    report = run_report(store, held.run_id)["review"]
    assert report is not None and (report["decision"], report["by"]) == ("rejected", "dana")
    with pytest.raises(UsageError, match="names nobody"):
        reviewer("  ")
    assert reviewer(" erin ") == "erin" and reviewer(None)


def test_a_store_at_revision_0002_gains_the_review_columns_with_its_runs(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store_at(db, "0002")
    con = sqlite3.connect(db)
    con.execute(
        "INSERT INTO wap_runs (run_id, table_name, status, files, checks, timings, started_at) "
        "VALUES ('20261124t120000_aaaaaa', 'nyc.trips', 'published', '[]', '[]', '{}', '2026-11-24 12:00:00')"
    )
    con.commit()
    assert "review" not in {r[1] for r in con.execute("PRAGMA table_info(wap_runs)")}
    con.close()

    store = RunStore(f"sqlite:///{db}")  # what every wap process does on open: upgrade to head
    assert schema.version(store.engine).up_to_date
    rec = store.get("20261124t120000_aaaaaa")
    assert rec is not None and rec.status == "published" and rec.review is None and rec.review_by is None
    con = sqlite3.connect(db)
    columns = {r[1] for r in con.execute("PRAGMA table_info(wap_runs)")}
    con.close()
    assert {"review", "review_by", "review_reason", "reviewed_at"} <= columns


def test_the_dashboard_run_page_offers_approve_and_reject_for_a_held_run(tmp_path: Path) -> None:
    from wapflow.runs.ledger import Ledger
    from wapflow.service.dashboard import Sources, run_detail

    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    held = _held(store)
    src = Sources(parse_config({}), store, Ledger(store.engine), None, "no catalog here")
    doc = run_detail(src, held.run_id)
    assert doc["commands"]["approve"] == f"wap approve {held.run_id} --reason ..."
    assert doc["commands"]["reject"] == f"wap reject {held.run_id} --reason ..."
    assert "discard" not in doc["commands"]  # dropping its branch behind the review's back is not offered
    assert doc["review"] == {"decision": None, "by": None, "reason": None, "at": None}


def test_held_files_follow_a_run_that_ended_outside_wap_approve(tmp_path: Path) -> None:
    """An approval killed after it was given completes by the run's resume command (`wap run ... --run-id`), which
    does not touch the ledger: the next ingest pass settles the held files as their run ended. Real run store
    and ledger (SQLite), no Spark."""
    from wapflow.config import parse_config
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.outer.ingest import Ingest
    from wapflow.runs.store import RunRecord
    from wapflow.storage.files import FileIdentity

    cfg = parse_config(
        {
            "lakehouse": {"warehouse": str(tmp_path / "lakehouse")},
            "sources": {"trips": {"table": "nyc.trips", "location": str(tmp_path / "landing")}},
        }
    )
    lh = Lakehouse(cfg)
    ing = Ingest(lh, lh.config.resolve_source("trips"))
    files = [FileIdentity(uri=str(tmp_path / "landing" / f"{n}.parquet"), size=10, version="1") for n in "ab"]
    keys = [ing.key(f) for f in files]
    lh.ledger.add("trips", list(zip(keys, files, strict=True)))
    for key, run_id in zip(keys, ("ing_held_a", "ing_held_b"), strict=True):
        assert lh.ledger.claim([key], run_id) == [key]
        lh.ledger.settle([key], "awaiting_review", run_id=run_id, reason="held")
    lh.store.save(RunRecord(run_id="ing_held_a", table_name="nyc.trips", status="published", snapshot_id=42))
    lh.store.save(RunRecord(run_id="ing_held_b", table_name="nyc.trips", status="awaiting_review"))

    ing.resume_orphans()

    states = {r.run_id: (r.state, r.snapshot_id) for r in lh.ledger.rows(keys=keys)}
    assert states == {"ing_held_a": ("published", 42), "ing_held_b": ("awaiting_review", None)}


def test_review_timeout_is_a_duration_and_on_review_timeout_two_values() -> None:
    t = TableConfig(review="always", review_timeout="48h", on_review_timeout="reject")
    assert t.review_timeout_seconds() == 48 * 3600 and t.on_review_timeout == "reject"
    assert TableConfig().review_timeout is None and TableConfig().on_review_timeout == "alert"
    for bad in ("soon", "0s"):
        with pytest.raises(ValueError, match="review_timeout"):
            TableConfig(review_timeout=bad)
    with pytest.raises(ValueError, match="on_review_timeout"):
        TableConfig(on_review_timeout="delete")


def test_a_held_run_is_overdue_from_when_it_was_held() -> None:
    from datetime import timedelta

    from wapflow.service.review import age_words, overdue

    held = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    rec = RunRecord("r1", "nyc.trips", "awaiting_review", started_at=held - timedelta(hours=5), finished_at=held)
    table = TableConfig(review="always", review_timeout="2h")
    assert overdue(rec, table, held + timedelta(minutes=119)) is None  # counted from the hold, not the start
    assert overdue(rec, table, held + timedelta(hours=3)) == 3 * 3600
    assert overdue(rec, TableConfig(review="always"), held + timedelta(days=30)) is None  # no timeout: waits
    rec.status = "published"
    assert overdue(rec, table, held + timedelta(hours=3)) is None
    assert [age_words(s) for s in (600, 3 * 3600, 2 * 86400 + 3600, 86400)] == ["10m", "3h", "2d 1h", "1d"]


def test_notable_column_changes_of_a_diff() -> None:
    from wapflow.service.diff import notable_change, summary

    def side(nulls: float, lo: float, hi: float) -> dict[str, object]:
        return {"null_fraction": nulls, "min": lo, "max": hi, "mean": None}

    cols = [
        {"column": "fare", "on": "both", "main": side(0.0, 1, 30), "batch": side(0.0, 2, 28)},
        {"column": "ids", "on": "both", "main": side(0.0, 1, 100), "batch": side(0.0, 101, 150)},  # grows: normal
        {"column": "pax", "on": "both", "main": side(0.0, 1, 6), "batch": side(0.3, 1, 6)},
        {"column": "tip", "on": "both", "main": side(0.0, 0, 10), "batch": side(0.0, 0, 250)},
        {"column": "note", "on": "new", "main": None, "batch": side(0.0, 0, 0)},
    ]
    assert [notable_change(c) for c in cols] == [  # type: ignore[arg-type]
        None,
        None,
        "pax: null fraction 0 → 0.3",
        "tip: max 10 → 250",
        "note: new column",
    ]
    rows = {"added": 5, "updated": 0, "deleted": 0, "replaced": 0, "main_rows": 10}
    doc = {"run_id": "r1", "rows": rows, "columns": cols, "message": ""}
    s = summary(doc)  # type: ignore[arg-type]
    assert s["notable"] == ["pax: null fraction 0 → 0.3", "tip: max 10 → 250", "note: new column"]
    assert s["text"] == "add 5 row(s); pax: null fraction 0 → 0.3; tip: max 10 → 250; note: new column"
    first = summary({**doc, "columns": [cols[4]]})  # type: ignore[arg-type,typeddict-item]
    assert first["notable"] == [] and first["text"] == "add 5 row(s)"  # a first batch: every column is new

    # Dates and times (text) are placed on a line as numbers are; other strings never are notable by bounds.
    def span(lo: str, hi: str) -> dict[str, object]:
        return {"null_fraction": 0.0, "min": lo, "max": hi, "mean": None}

    dated = [
        {
            "column": "day",
            "on": "both",
            "main": span("2026-01-01", "2026-01-31"),
            "batch": span("2026-02-01", "2026-02-02"),
        },
        {
            "column": "at",
            "on": "both",
            "main": span("2026-01-01 00:00:00", "2026-01-31 00:00:00"),
            "batch": span("2036-02-01 00:00:00", "2036-02-01 10:00:00"),
        },
        {"column": "city", "on": "both", "main": span("Albany", "Troy"), "batch": span("Zzyzx", "Zzyzx")},
    ]
    assert [notable_change(c) for c in dated] == [  # type: ignore[arg-type]
        None,  # the next days: a batch's worth past main's max
        "at: max 2026-01-31 00:00:00 → 2036-02-01 10:00:00",
        None,
    ]


def test_who_may_decide_on_the_dashboard() -> None:
    from wapflow.service.review_queue import token_matches, writes_allowed

    assert writes_allowed("127.0.0.1", {}) == (True, None, None)
    assert writes_allowed("localhost", {}) == (True, None, None)
    allowed, login, why = writes_allowed("0.0.0.0", {})
    assert (allowed, login) == (False, None) and why is not None and "neither WAP_DASHBOARD_TOKEN nor" in why
    assert writes_allowed(None, {})[0] is False  # Streamlit's default binds every interface
    assert writes_allowed("0.0.0.0", {"WAP_DASHBOARD_TOKEN": "t0k"}) == (True, "token", None)
    assert token_matches("t0k", {"WAP_DASHBOARD_TOKEN": "t0k"})
    assert not token_matches("t0K", {"WAP_DASHBOARD_TOKEN": "t0k"}) and not token_matches("", {})


def test_wap_dashboard_refuses_the_network_without_a_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WAP_DASHBOARD_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["dashboard", "--host", "0.0.0.0", "--port", "1"])
    assert r.exit_code == EXIT_USAGE, r.output
    assert "approves and rejects" in r.output and "Traceback" not in r.output
    assert "[dashboard.oidc] in wap.toml" in r.output and "WAP_DASHBOARD_TOKEN (a secret" in r.output  # both ways
