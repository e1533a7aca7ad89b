"""The file ledger on its own (SQLite, no Spark): keys, claims that exactly one process wins, orphaned claims."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from wapflow.runs.ledger import Ledger, file_key, files_table
from wapflow.runs.store import RunStore
from wapflow.storage.files import FileIdentity


def _ledger(tmp_path: Path) -> Ledger:
    return Ledger(RunStore(f"sqlite:///{tmp_path / 'runs.db'}").engine)


def _files(n: int) -> list[FileIdentity]:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    return [FileIdentity(f"/landing/f{i:03d}.parquet", 100 + i, f"v{i}", t0 + timedelta(minutes=i)) for i in range(n)]


def test_a_changed_file_is_a_new_identity_unless_changes_are_ignored():
    a = FileIdentity("/landing/a.parquet", 10, "mtime-1-10")
    rewritten = FileIdentity("/landing/a.parquet", 10, "mtime-2-10")
    assert file_key("trips", a) != file_key("trips", rewritten)
    assert file_key("trips", a, track_changes=False) == file_key("trips", rewritten, track_changes=False)
    assert file_key("trips", a) != file_key("zones", a)  # two sources ingest the same file once each


def test_add_is_idempotent_and_rows_come_oldest_first(tmp_path):
    ledger = _ledger(tmp_path)
    files = _files(5)
    pairs = [(file_key("s", f), f) for f in reversed(files)]
    assert ledger.add("s", pairs) == 5
    assert ledger.add("s", pairs) == 0
    rows = ledger.rows("s")
    assert [r.uri for r in rows] == [f.uri for f in files]
    assert {r.state for r in rows} == {"pending"} and ledger.states("s") == {k: "pending" for k, _ in pairs}
    assert rows[0].identity == files[0] and rows[0].modified == files[0].modified


def test_claim_settle_release_and_retry(tmp_path):
    ledger = _ledger(tmp_path)
    keys = [file_key("s", f) for f in _files(4)]
    ledger.add("s", list(zip(keys, _files(4), strict=True)))
    assert ledger.claim(keys[:2], "run1") == keys[:2]
    assert ledger.claim(keys[:3], "run2") == [keys[2]]  # the first two are run1's
    ledger.release([keys[2]])
    ledger.settle(keys[:1], "published", run_id="run1", snapshot_id=42)
    ledger.settle(keys[1:2], "failed", run_id="run1", error={"kind": "input", "message": "corrupt"})
    by = {r.key: r for r in ledger.rows("s")}
    assert (by[keys[0]].state, by[keys[0]].snapshot_id, by[keys[0]].run_id) == ("published", 42, "run1")
    assert by[keys[1]].error == {"kind": "input", "message": "corrupt"} and by[keys[1]].attempts == 1
    assert (by[keys[2]].state, by[keys[2]].attempts) == ("pending", 0)  # released: the claim did not count
    ledger.retry([keys[1]], reason="fixed")
    again = ledger.get(keys[1])
    assert again is not None and (again.state, again.attempts, again.error) == ("pending", 0, None)


def test_two_processes_claiming_the_same_files_never_both_win(tmp_path):
    ledger = _ledger(tmp_path)
    files = _files(60)
    keys = [file_key("s", f) for f in files]
    ledger.add("s", list(zip(keys, files, strict=True)))
    script = textwrap.dedent(
        f"""
        import json, sys
        from wapflow.runs.ledger import Ledger
        from wapflow.runs.store import RunStore
        keys = json.loads(sys.argv[1])
        won = Ledger(RunStore("sqlite:///{tmp_path / "runs.db"}").engine).claim(keys, sys.argv[2])
        print(json.dumps(won))
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, json.dumps(keys), f"run{i}"], stdout=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    won = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert not set(won[0]) & set(won[1]) and set(won[0]) | set(won[1]) == set(keys)
    owners = {r.run_id for r in ledger.rows("s")}
    assert owners <= {"run0", "run1"} and {r.state for r in ledger.rows("s")} == {"claimed"}


def test_a_claim_whose_process_is_gone_is_orphaned_and_taken_over(tmp_path):
    ledger = _ledger(tmp_path)
    files = _files(2)
    keys = [file_key("s", f) for f in files]
    ledger.add("s", list(zip(keys, files, strict=True)))
    ledger.claim(keys, "run1")
    assert not any(r.orphaned for r in ledger.rows("s"))  # this process holds it
    assert ledger.take_over(keys, "run1") == []
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout), "start": None})
    with ledger.engine.begin() as conn:
        conn.execute(sa.update(files_table).values(owner=gone))
    assert all(r.orphaned for r in ledger.rows("s"))
    assert ledger.take_over(keys, "other_run") == []  # only the same run resumes
    assert ledger.take_over(keys, "run1") == keys
    assert not any(r.orphaned for r in ledger.rows("s"))


def test_ledger_rows_need_no_spark(tmp_path):
    """What `wap files` and a dashboard do: read the ledger with pyspark unimportable."""
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.modules["pyspark"] = None  # any `import pyspark...` now raises ImportError
        from wapflow.config import parse_config
        from wapflow.runs.ledger import Ledger, file_key
        from wapflow.runs.store import RunStore
        from wapflow.service.files import list_files, retry
        from wapflow.storage.files import FileIdentity

        cfg = parse_config({{"sources": {{"trips": {{"table": "nyc.trips", "location": "{tmp_path}"}}}}}})
        ledger = Ledger(RunStore("sqlite:///{tmp_path / "runs.db"}").engine)
        f = FileIdentity("{tmp_path / "a.parquet"}", 10, "v1")
        ledger.add("trips", [(file_key("trips", f), f)])
        ledger.settle([file_key("trips", f)], "blocked", run_id="r1", reason="not_null(x) failed")
        before = list_files(ledger, cfg, "trips")
        after = retry(ledger, "r1")
        print(json.dumps({{"before": before, "after": after,
                           "spark": sorted(m for m in sys.modules if m.startswith("pyspark") and sys.modules[m])}}))
        """
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["spark"] == []
    assert [(r["state"], r["run_id"], r["reason"]) for r in doc["before"]] == [("blocked", "r1", "not_null(x) failed")]
    assert [(r["state"], r["attempts"], r["reason"]) for r in doc["after"]] == [("pending", 0, "wap retry r1")]


def test_the_run_store_commits_in_wal_without_an_fsync_each(tmp_path):
    """WAL with synchronous=NORMAL: a commit survives a killed process (the WAL is written before it returns),
    without FULL's fsync per commit, which cost a small run's five saves ~10 ms."""
    store = RunStore(f"sqlite:///{tmp_path / 'runs.db'}")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
