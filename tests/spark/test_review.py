"""Data pull requests: a table's `review` holds a run that passed as awaiting_review (branch kept, main unchanged);
`wap approve` publishes it (audited again against main as it is then), `wap reject` drops it. Main is read back
with PyIceberg on the same catalog (no wapflow code), the run store and the snapshot summary as users see them.
Two processes approving one run at once: tests/process/test_review_race.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support.data import trips_file
from support.typer_cli import wap
from wapflow import api
from wapflow.config import load_config
from wapflow.errors import EXIT_CONFLICT, EXIT_REVIEW, EXIT_USAGE, AlreadyDecided, UsageError
from wapflow.lakehouse.lineage import picked_from
from wapflow.lakehouse.model import APPROVAL_REASON_PROP, APPROVED_BY_PROP
from wapflow.runs.store import RunStore
from wapflow.sql.identifiers import TableName

T = TableName.parse("nyc.trips")
# An error check that reads main (so a moved main can make a held run fail it), and a warning at 150 rows.
CHECKS = [
    {"check": "not_null", "column": "passenger_count"},
    {"check": "unique_in_table", "columns": ["trip_id"]},
    {"check": "row_count", "max": 150, "severity": "warn"},
]


def _config(tmp: Path, catalog: str, review: str) -> Path:
    checks = ",\n".join("  { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in c.items()) + " }" for c in CHECKS)
    p = tmp / "wap.toml"
    p.write_text(
        f'[lakehouse]\nwarehouse = "{tmp / "lakehouse"}"\ncatalog_name = "{catalog}"\nmaster = "local[2]"\n\n'
        f'[tables."nyc.trips"]\nreview = "{review}"\nchecks = [\n{checks}\n]\n'
    )
    return p


def _main(cfg: Path) -> Any:
    """main of nyc.trips as PyIceberg reads it from the catalog (None: no table yet)."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError

    c = load_config(str(cfg))
    wh = Path(c.warehouse_location())
    catalog = SqlCatalog(c.lakehouse.catalog_name, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}")
    try:
        return catalog.load_table(T.dotted)
    except NoSuchTableError:
        return None


def _main_ids(cfg: Path) -> list[int]:
    table = _main(cfg)
    if table is None or table.current_snapshot() is None:
        return []
    return sorted(table.scan().to_arrow().column("trip_id").to_pylist())


def _branches(cfg: Path) -> set[str]:
    table = _main(cfg)
    return set() if table is None else {name for name in table.metadata.refs if name != "main"}


def _published_summary(cfg: Path) -> dict[str, str]:
    """The run properties of main's head: its own, or those of the snapshot it was cherry-picked from."""
    table = _main(cfg)
    summary = dict(table.current_snapshot().summary.additional_properties)
    src = picked_from(summary)
    return summary if src is None else dict(table.snapshot_by_id(src).summary.additional_properties)


def _store(cfg: Path) -> RunStore:
    return RunStore(load_config(str(cfg)).run_store_url())


def _run(cfg: Path, f: Path) -> tuple[int, dict[str, Any]]:
    r = wap("run", "nyc.trips", str(f), "--config", str(cfg), "--json")
    return r.exit_code, json.loads(r.stdout)


@pytest.mark.spark
def test_always_holds_then_approve_publishes_and_reject_drops(spark, tmp_path, landing):
    cfg = _config(tmp_path, "rv_always", "always")
    code, held = _run(cfg, trips_file(landing, "a.parquet", 100))
    assert code == EXIT_REVIEW == held["exit_code"], held
    assert held["status"] == "awaiting_review" and held["branch_kept"] is True and held["snapshot_id"] is None
    assert f"wap approve {held['run_id']}" in held["message"]
    assert _main_ids(cfg) == [] and held["branch"] in _branches(cfg)  # main unchanged, the branch kept

    runs = json.loads(wap("runs", "--config", str(cfg), "--json").stdout)["runs"]
    assert [(r["run_id"], r["status"], r["review"]) for r in runs] == [(held["run_id"], "awaiting_review", "awaiting")]

    r = wap("approve", held["run_id"], "--reason", "volume checked with ops", "--by", "alice", "--config", str(cfg))
    assert r.exit_code == 0, r.output
    assert "PUBLISHED" in r.stdout and "approved by alice: volume checked with ops" in r.stdout
    assert _main_ids(cfg) == list(range(1, 101)) and _branches(cfg) == set()
    rec = _store(cfg).get(held["run_id"])
    assert rec is not None and rec.status == "published" and rec.review == "approved"
    assert (rec.review_by, rec.review_reason) == ("alice", "volume checked with ops") and rec.reviewed_at is not None
    summary = _published_summary(cfg)
    assert summary[APPROVED_BY_PROP] == "alice" and summary[APPROVAL_REASON_PROP] == "volume checked with ops"
    assert summary["wapflow.run-id"] == held["run_id"]
    report = json.loads(wap("report", held["run_id"], "--config", str(cfg), "--json").stdout)
    assert report["status"] == "published"
    assert report["review"]["decision"] == "approved" and report["review"]["by"] == "alice"

    # A second run held, then rejected: its branch goes, main keeps only the first run's rows.
    code, second = _run(cfg, trips_file(landing, "b.parquet", 100, start_id=101))
    assert code == EXIT_REVIEW and second["branch"] in _branches(cfg)
    r = wap("reject", second["run_id"], "--reason", "wrong export", "--config", str(cfg), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "rejected" and doc["dropped"] is True and doc["review_reason"] == "wrong export"
    assert _branches(cfg) == set() and _main_ids(cfg) == list(range(1, 101))
    rec = _store(cfg).get(second["run_id"])
    assert rec is not None and (rec.status, rec.review, rec.review_reason) == ("rejected", "rejected", "wrong export")
    assert rec.review_by  # the OS user running the command
    runs = json.loads(wap("runs", "--config", str(cfg), "--json").stdout)["runs"]
    shown = {r["run_id"]: (r["status"], r["review"]) for r in runs}
    assert shown[second["run_id"]] == ("rejected", f"rejected by {rec.review_by}: wrong export")
    assert shown[held["run_id"]] == ("published", "approved by alice: volume checked with ops")
    people = wap("report", second["run_id"], "--config", str(cfg))
    assert people.exit_code == 0 and "rejected by" in people.stdout and "wrong export" in people.stdout

    # The decided runs, a run never held, an unknown id, a blank reason: one clear error each, nothing published.
    cases = [
        (["approve", held["run_id"], "--reason", "again"], EXIT_CONFLICT, "already approved by alice"),
        (["reject", held["run_id"], "--reason", "late"], EXIT_CONFLICT, "already approved by alice"),
        (["approve", second["run_id"], "--reason", "after all"], EXIT_CONFLICT, "already rejected"),
        (["approve", "20990101t000000_abcdef", "--reason", "x"], EXIT_USAGE, "no run 20990101t000000_abcdef"),
        (["approve", held["run_id"], "--reason", "   "], EXIT_USAGE, "--reason is empty"),
        (["reject", second["run_id"], "--reason", ""], EXIT_USAGE, "--reason is empty"),
    ]
    for args, code, words in cases:
        r = wap(*args, "--config", str(cfg))
        text = " ".join(r.output.split())
        assert r.exit_code == code, (args, r.output)
        assert words in text and "Traceback" not in text, (args, text)
    r = wap("approve", held["run_id"], "--reason", "again", "--config", str(cfg), "--json")
    err = json.loads(r.stdout)["error"]
    assert r.exit_code == EXIT_CONFLICT and err["type"] == "AlreadyDecided" and err["kind"] == "conflict"
    assert _main_ids(cfg) == list(range(1, 101))  # nothing published twice, nothing of the rejected run


@pytest.mark.spark
def test_on_warn_holds_only_a_run_with_a_warning_and_bad_states_are_refused(spark, tmp_path, landing):
    cfg = _config(tmp_path, "rv_warn", "on_warn")
    code, direct = _run(cfg, trips_file(landing, "small.parquet", 50))
    assert code == 0 and direct["status"] == "published", direct  # no warning: published without review
    code, held = _run(cfg, trips_file(landing, "big.parquet", 200, start_id=51))
    assert code == EXIT_REVIEW and held["status"] == "awaiting_review", held
    assert "row_count(max=150)" in held["message"] and _main_ids(cfg) == list(range(1, 51))
    code, blocked = _run(cfg, trips_file(landing, "dirty.parquet", 50, start_id=1000, null_rate=0.1))
    assert code == 1 and blocked["status"] == "blocked"

    for rid, state in ((direct["run_id"], "published"), (blocked["run_id"], "blocked")):
        for verb in ("approve", "reject"):
            r = wap(verb, rid, "--reason", "x", "--config", str(cfg))
            text = " ".join(r.output.split())
            # A blocked run may be approved only when history-based checks blocked it (test_approve_blocked.py).
            said = "no approval overrides that" if (verb, state) == ("approve", "blocked") else f"is {state}, not"
            assert r.exit_code == EXIT_USAGE and said in text, r.output
    assert blocked["branch"] in _branches(cfg)  # a refused reject of a blocked run leaves its branch alone

    lh = api.connect(str(cfg))
    with pytest.raises(UsageError, match="--reason is empty"):
        api.approve(lh, held["run_id"], reason=" ")
    res = api.approve(lh, held["run_id"], reason="a big day is expected", by="bob")
    assert res.status == "published" and res.exit_code == 0 and res.published_via == "fast_forward"
    assert _main_ids(cfg) == list(range(1, 251))
    with pytest.raises(AlreadyDecided, match="already approved by bob"):
        api.reject(lh, held["run_id"], reason="too late")


@pytest.mark.spark
def test_approve_after_main_moved_publishes_both_once_or_is_refused(spark, tmp_path, landing):
    cfg = _config(tmp_path, "rv_moved", "on_warn")
    lh = api.connect(str(cfg))
    first = api.run(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 200))])
    assert first.status == "awaiting_review", first.message
    other = api.run(lh, "nyc.trips", [str(trips_file(landing, "b.parquet", 100, start_id=201))])
    assert other.status == "published"  # main moved since the held run was audited
    res = api.approve(lh, first.run_id, reason="ok", by="carol")
    assert res.status == "published" and res.published_via == "cherry_pick", res.message
    assert _main_ids(cfg) == list(range(1, 301))  # both sets of rows, each once
    summary = _published_summary(cfg)
    assert summary[APPROVED_BY_PROP] == "carol" and summary["wapflow.run-id"] == first.run_id

    # Held again, then main gets the same keys: the approval re-audits against main and is refused.
    held = api.run(lh, "nyc.trips", [str(trips_file(landing, "c.parquet", 200, start_id=1001))])
    assert held.status == "awaiting_review"
    dup = api.run(lh, "nyc.trips", [str(trips_file(landing, "d.parquet", 10, start_id=1001))])
    assert dup.status == "published"
    r = wap("approve", held.run_id, "--reason", "looks fine", "--config", str(cfg), "--json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 1 and doc["status"] == "blocked", r.output
    assert doc["message"].startswith(f"approval refused: run {held.run_id} no longer passes its error checks")
    assert "unique_in_table(trip_id)" in doc["message"]
    ids = _main_ids(cfg)
    assert len(ids) == 310 and ids[-10:] == list(range(1001, 1011))  # the refused run's rows never reached main
    rec = _store(cfg).get(held.run_id)
    assert rec is not None and rec.status == "blocked" and rec.review == "approved" and rec.branch_kept


@pytest.mark.spark
def test_ingest_holds_files_as_awaiting_review_until_decided(spark, tmp_path, landing):
    cfg = _config(tmp_path, "rv_ingest", "always")
    src = tmp_path / "land"
    src.mkdir()
    trips_file(src, "a.parquet", 20)
    trips_file(src, "b.parquet", 20, start_id=21)
    with cfg.open("a") as f:
        f.write(
            f'\n[sources.trips]\ntable = "nyc.trips"\nlocation = "{src}"\nsettle_seconds = 0\nmax_files_per_run = 1\n'
        )
    r = wap("ingest", "trips", "--config", str(cfg), "--json")
    doc = json.loads(r.stdout)
    assert r.exit_code == EXIT_REVIEW and doc["status"] == "awaiting_review", r.output
    assert doc["counts"] == {"awaiting_review": 2}  # the pass went on after the first file was held
    runs = {Path(f["uri"]).name: f["run_id"] for f in doc["files"]}
    assert _main_ids(cfg) == []

    again = wap("ingest", "trips", "--config", str(cfg), "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["runs"] == []  # held files are not picked up again

    assert wap("approve", runs["a.parquet"], "--reason", "fine", "--config", str(cfg)).exit_code == 0
    assert wap("reject", runs["b.parquet"], "--reason", "duplicate", "--config", str(cfg)).exit_code == 0
    files = json.loads(wap("files", "trips", "--config", str(cfg), "--json").stdout)["files"]
    states = {Path(f["uri"]).name: f["state"] for f in files}
    assert states == {"a.parquet": "published", "b.parquet": "rejected"}
    assert _main_ids(cfg) == list(range(1, 21))
    last = wap("ingest", "trips", "--config", str(cfg), "--json")
    assert last.exit_code == 0 and json.loads(last.stdout)["runs"] == [] and _main_ids(cfg) == list(range(1, 21))


@pytest.mark.spark
def test_an_approved_run_whose_publish_failed_is_completed_by_its_resume_command(spark, tmp_path, landing, monkeypatch):
    cfg = _config(tmp_path, "rv_resume", "always")
    code, held = _run(cfg, trips_file(landing, "a.parquet", 30))
    assert code == EXIT_REVIEW
    monkeypatch.setenv("WAP_RAISE_AT", "publish:locked")  # the approval is recorded, the publish fails
    r = wap("approve", held["run_id"], "--reason", "ok", "--by", "fay", "--config", str(cfg), "--json")
    assert r.exit_code == 3 and json.loads(r.stdout)["status"] == "failed", r.output
    monkeypatch.delenv("WAP_RAISE_AT")
    assert _main_ids(cfg) == [] and held["branch"] in _branches(cfg)
    again = wap("approve", held["run_id"], "--reason", "ok", "--config", str(cfg), "--json")
    err = json.loads(again.stdout)["error"]
    assert again.exit_code == EXIT_CONFLICT and "already approved by fay" in err["message"]
    resume = err["hint"].split("`")[1]
    assert resume.startswith(f"wap run nyc.trips {landing / 'a.parquet'} --run-id {held['run_id']}"), err["hint"]
    r = wap(*resume.split()[1:], "--config", str(cfg), "--json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["status"] == "published" and "approved by fay: ok" in doc["message"], r.output
    assert _main_ids(cfg) == list(range(1, 31)) and _published_summary(cfg)[APPROVED_BY_PROP] == "fay"


@pytest.mark.spark
def test_a_staged_batch_with_new_columns_is_held_then_approved_or_rejected(spark, tmp_path, landing):
    import pyarrow as pa

    from support.data import write_parquet
    from wapflow.demo.generate import generate_trips

    cfg = _config(tmp_path, "rv_staged", "always")
    cfg.write_text(cfg.read_text().replace('review = "always"', 'review = "always"\nschema = "add_columns"'))
    lh = api.connect(str(cfg))
    first = api.run(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 20))])
    assert first.status == "awaiting_review"
    assert api.approve(lh, first.run_id, reason="first day").status == "published"

    def wider(name: str, start: int) -> str:
        t = generate_trips(20, start_id=start)
        return str(write_parquet(landing / name, t.append_column("tip", pa.array([1.0] * 20))))

    held = api.run(lh, "nyc.trips", [wider("b.parquet", 21)])
    assert held.status == "awaiting_review" and held.staging_table is not None, held.message
    assert "staging table" in held.message and "tip" not in _main(cfg).schema().column_names
    dropped = api.reject(lh, held.run_id, reason="no tips yet", by="gus")
    assert dropped["dropped"] is True and "staging table" in dropped["message"]
    assert not lh.tables.exists(TableName.parse(held.staging_table))
    assert "tip" not in _main(cfg).schema().column_names and _main_ids(cfg) == list(range(1, 21))

    again = api.run(lh, "nyc.trips", [wider("c.parquet", 41)])
    assert again.status == "awaiting_review"
    res = api.approve(lh, again.run_id, reason="tips agreed", by="gus")
    assert res.status == "published", res.message
    assert "tip" in _main(cfg).schema().column_names and _main_ids(cfg) == [*range(1, 21), *range(41, 61)]
    assert _published_summary(cfg)[APPROVED_BY_PROP] == "gus"


@pytest.mark.spark
def test_discarding_the_branch_of_a_held_run_rejects_it(spark, tmp_path, landing):
    """`wap discard` of a held run's branch is its rejection: no run left awaiting review on a branch that is
    gone, its ledger files `rejected` (not held forever), the decision recorded."""
    cfg = _config(tmp_path, "rv_discard", "always")
    src = tmp_path / "land"
    src.mkdir()
    trips_file(src, "a.parquet", 20)
    with cfg.open("a") as f:
        f.write(f'\n[sources.trips]\ntable = "nyc.trips"\nlocation = "{src}"\nsettle_seconds = 0\n')
    doc = json.loads(wap("ingest", "trips", "--config", str(cfg), "--json").stdout)
    assert doc["status"] == "awaiting_review", doc
    run_id = doc["files"][0]["run_id"]
    rec = _store(cfg).get(run_id)
    assert rec is not None and rec.branch in _branches(cfg)

    r = wap("discard", rec.branch, "--config", str(cfg))
    assert r.exit_code == 0, r.output
    assert f"rejected: {run_id}" in " ".join(r.stdout.split())
    assert _branches(cfg) == set() and _main_ids(cfg) == []
    after = _store(cfg).get(run_id)
    assert after is not None and (after.status, after.review) == ("rejected", "rejected")
    assert after.branch_kept is False and "wap discard" in (after.review_reason or "")
    files = json.loads(wap("files", "trips", "--config", str(cfg), "--json").stdout)["files"]
    assert [f["state"] for f in files] == ["rejected"]
    r = wap("approve", run_id, "--reason", "too late", "--config", str(cfg))
    assert r.exit_code == EXIT_CONFLICT and "already rejected" in " ".join(r.output.split())
