"""[maintenance] in wap.toml and the maintenance plan (wapflow.maintain.plan), without a JVM: what may be
expired and what must stay, which kept branches are old enough to drop, what compaction would rewrite."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from wapflow.config import parse_config, parse_duration
from wapflow.errors import ConfigError
from wapflow.lakehouse.model import RUN_ID_PROP, Ref, Snapshot
from wapflow.maintain.plan import DELETE_RATIO, DataFile, plan_compaction, plan_expiry, stale_branches
from wapflow.runs.store import RunRecord

NOW = datetime(2026, 11, 25, 12, 0, 0)


# --- config ------------------------------------------------------------------------------------


def test_defaults_and_a_table_override_only_changes_the_keys_it_sets():
    cfg = parse_config(
        {
            "maintenance": {"target_file_size": "64MB", "expire_older_than": "2d", "every": "30m"},
            "tables": {"nyc.trips": {"maintenance": {"keep_last": 3, "orphan_older_than": "never"}}},
        }
    )
    m = cfg.maintenance_for("nyc.trips")
    assert (m.target_file_size, m.expire_older_than, m.every, m.keep_last) == (64_000_000, "2d", "30m", 3)
    assert m.orphan_older_than is None and m.seconds("orphan_older_than") is None
    other = cfg.maintenance_for("other.table")
    assert (other.keep_last, other.orphan_older_than, other.keep_blocked_for) == (10, "3d", "14d")
    assert other.seconds("expire_older_than") == 2 * 86400


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("30m", 1800), ("1h30m", 5400), ("7d", 604800), ("2w", 1209600), ("15", 15)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ({"maintenance": {"expire_older_than": "7 days"}}, "[maintenance].expire_older_than: Value error, '7 days'"),
        ({"maintenance": {"orphan_older_than": "1h"}}, "too young"),
        ({"tables": {"a.b": {"maintenance": {"orphan_older_than": "12h"}}}}, '[tables."a.b"].maintenance'),
        ({"maintenance": {"keep_lst": 3}}, "unknown key 'keep_lst' (did you mean 'keep_last'?)"),
        ({"maintenance": {"target_file_size": "big"}}, "is not a size"),
        ({"maintenance": {"keep_last": 0}}, "keep_last"),
        ({"maintenance": {"revert_window": "never"}}, "revert_window"),
        ({"maintenance": {"every": "0s"}}, "positive duration"),
    ],
)
def test_bad_maintenance_settings_are_config_errors_naming_the_key(section, named):
    with pytest.raises(ConfigError) as e:
        parse_config(section)
    assert named in str(e.value)


# --- expiry ------------------------------------------------------------------------------------


def _snap(sid: int, parent: int | None, hours_ago: float, **summary: str) -> Snapshot:
    return Snapshot(sid, parent, NOW - timedelta(hours=hours_ago), "append", dict(summary))


def _main_history(n: int, hours_apart: float = 24.0) -> dict[int, Snapshot]:
    """Snapshots 1..n on main, 1 the oldest, n committed an hour ago."""
    return {i: _snap(i, i - 1 if i > 1 else None, 1 + (n - i) * hours_apart) for i in range(1, n + 1)}


def _plan(snaps, refs, *, older=timedelta(days=7), keep_last=2, window=timedelta(days=3)):
    return plan_expiry(snaps, refs, now=NOW, expire_older_than=older, keep_last=keep_last, revert_window=window)


def test_main_keeps_keep_last_and_everything_within_the_larger_window_as_one_piece():
    snaps = _main_history(20)  # one a day
    refs = {"main": Ref("main", "BRANCH", 20)}
    plan = _plan(snaps, refs, older=timedelta(days=2), window=timedelta(days=5))
    # Those of the last 5 days stay (the revert window, 5 days, is longer than expire_older_than); older go.
    assert sorted(plan.keep) == list(range(16, 21))
    assert plan.expire == list(range(1, 16))
    assert plan.keep[20] == "head of branch main"
    assert plan.keep[16] == "within revert_window"
    assert plan.keep[19] == "keep_last"


def test_on_v3_the_revert_window_keeps_no_history_but_a_run_still_recorded_running_keeps_its_snapshot():
    snaps = _main_history(20)  # one a day
    snaps[7] = _snap(7, 6, 1 + 13 * 24, **{RUN_ID_PROP: "killed-after-commit"})
    refs = {"main": Ref("main", "BRANCH", 20)}
    v2 = plan_expiry(
        snaps, refs, now=NOW, expire_older_than=timedelta(days=2), keep_last=2, revert_window=timedelta(days=5)
    )
    v3 = plan_expiry(
        snaps,
        refs,
        now=NOW,
        expire_older_than=timedelta(days=2),
        keep_last=2,
        revert_window=timedelta(days=5),
        history_for_revert=False,
        unsettled={"killed-after-commit"},
    )
    assert sorted(v2.keep) == list(range(16, 21)) and v2.keep[16] == "within revert_window"
    # v3: only expire_older_than (2 days) and keep_last hold main's history; revert goes by row lineage.
    assert sorted(v3.keep) == [7, 19, 20]
    assert v3.keep[7] == "run killed-after-commit is still recorded running"
    assert "within revert_window" not in v3.keep.values()


def test_on_v3_the_latest_merge_within_the_revert_window_keeps_its_parent_for_a_rollback():
    snaps = _main_history(20)
    snaps[20] = Snapshot(20, 19, NOW - timedelta(hours=1), "replace", {})  # a compaction after the merge
    snaps[19] = Snapshot(19, 18, NOW - timedelta(hours=25), "overwrite", {})  # the merge, a day ago
    refs = {"main": Ref("main", "BRANCH", 20)}

    def plan(window: timedelta) -> set[int]:
        kept = plan_expiry(
            snaps,
            refs,
            now=NOW,
            expire_older_than=timedelta(0),
            keep_last=1,
            revert_window=window,
            history_for_revert=False,
        )
        return set(kept.keep)

    assert plan(timedelta(days=5)) == {18, 19, 20}  # rolled back to 18 by `wap revert`
    assert plan(timedelta(hours=2)) == {20}  # the merge is older than the window: nothing kept for it


def test_keep_last_wins_over_age():
    snaps = _main_history(6, hours_apart=24 * 30)
    plan = _plan(snaps, {"main": Ref("main", "BRANCH", 6)}, keep_last=3)
    assert plan.expire == [1, 2, 3]


def test_a_kept_branch_keeps_its_snapshots_down_to_its_base_on_main():
    snaps = _main_history(12)
    # A blocked run branched from 3 (nine days ago) and wrote 100, 101 on its branch.
    snaps[100] = _snap(100, 3, 24 * 9 - 1)
    snaps[101] = _snap(101, 100, 24 * 9 - 2)
    refs = {"main": Ref("main", "BRANCH", 12), "wap_blocked": Ref("wap_blocked", "BRANCH", 101)}
    plan = _plan(snaps, refs)
    assert {100, 101, 3} <= set(plan.keep)
    assert plan.keep[3] == "on branch wap_blocked"
    assert 3 not in plan.expire and 2 in plan.expire and 4 in plan.expire


def test_the_origin_of_a_cherry_pick_stays_while_its_copy_on_main_stays():
    snaps = _main_history(10)
    snaps[50] = _snap(50, 4, 24 * 8, **{"wapflow.run-id": "r1"})  # on the run's dropped branch
    snaps[10] = _snap(10, 9, 1, **{"source-snapshot-id": "50"})  # main's head: a cherry-pick of 50
    plan = _plan(snaps, {"main": Ref("main", "BRANCH", 10)})
    assert plan.keep[50] == "run lineage of snapshot 10"
    assert 50 not in plan.expire


def test_unreferenced_snapshots_go_once_old_and_tags_keep_their_head():
    snaps = _main_history(5)
    snaps[70] = _snap(70, 1, 24 * 10)  # a dropped branch's snapshot, old
    snaps[71] = _snap(71, 1, 2)  # a dropped branch's snapshot, young
    refs = {"main": Ref("main", "BRANCH", 5), "v1": Ref("v1", "TAG", 2)}
    plan = _plan(snaps, refs, older=timedelta(days=1), window=timedelta(0), keep_last=1)
    assert 70 in plan.expire and 71 not in plan.expire
    assert plan.keep[2] == "head of tag v1"


# --- kept branches -----------------------------------------------------------------------------


def _rec(run_id: str, status: str, days_ago: float, *, kept: bool = True, table: str = "nyc.trips") -> RunRecord:
    when = datetime.now(UTC) - timedelta(days=days_ago)
    return RunRecord(run_id, table, status, branch=f"wap_{run_id}", branch_kept=kept, started_at=when, finished_at=when)


def test_only_kept_branches_of_blocked_or_failed_runs_older_than_the_limit_are_stale():
    runs = {
        "wap_old": [_rec("old", "blocked", 20)],
        "wap_young": [_rec("young", "blocked", 2)],
        "wap_failed": [_rec("failed", "failed", 30)],
        "wap_running": [_rec("running", "running", 30)],
        "wap_other_table": [_rec("other_table", "blocked", 30, table="x.y")],
        "mine": [],  # a branch no run recorded: someone's own
    }
    stale = stale_branches("nyc.trips", runs, runs, now=datetime.now(UTC), keep_blocked_for=timedelta(days=14))
    assert [b for b, _ in stale] == ["wap_old", "wap_failed"]
    q = stale_branches("nyc.trips__quarantine", runs, runs, now=datetime.now(UTC), keep_blocked_for=timedelta(days=14))
    assert [b for b, _ in q] == ["wap_old", "wap_failed"]  # the quarantine table's branch of the same run


# --- compaction --------------------------------------------------------------------------------


def test_compaction_plan_per_partition_with_min_input_files():
    mb = 2**20
    files = [DataFile(1 * mb, "a")] * 6 + [DataFile(1 * mb, "b")] * 2 + [DataFile(100 * mb, "a")]
    plan = plan_compaction(files, target=128 * mb, min_input_files=5)
    assert plan == {"files": 6, "bytes": 6 * mb, "files_after": 1}
    assert plan_compaction(files, target=128 * mb, min_input_files=2)["files"] == 8


def test_a_file_mostly_deleted_by_its_deletion_vector_is_compacted_whatever_its_size():
    """Merge-on-read merges leave large files with deletion vectors: one whose deletes reach DELETE_RATIO of its
    rows is rewritten alone (Iceberg's own threshold); one with a few deleted rows is left."""
    mb = 2**20
    few = DataFile(120 * mb, "a", rows=1000, deleted=10)
    many = DataFile(120 * mb, "b", rows=1000, deleted=int(1000 * DELETE_RATIO))
    assert plan_compaction([few], target=128 * mb, min_input_files=5)["files"] == 0
    assert plan_compaction([few, many], target=128 * mb, min_input_files=5) == {
        "files": 1,
        "bytes": 120 * mb,
        "files_after": 1,
    }


# --- the maintenance log -----------------------------------------------------------------------


def test_the_log_records_actions_and_wap_maintain_log_lists_them_without_spark(tmp_path):
    from support.typer_cli import as_json, wap, write_config
    from wapflow.config import load_config
    from wapflow.runs.maintenance import MaintenanceLog
    from wapflow.runs.store import RunStore

    cfg = write_config(tmp_path, "log")
    store = RunStore(load_config(cfg).run_store_url())
    log = MaintenanceLog(store.engine)
    done = log.start("m1", 1, "nyc.trips", "compact")
    log.finish(done, "done", {"rewritten_data_files": 12, "rewritten_bytes": 4096})
    failed = log.start("m1", 2, "nyc.trips", "expire_snapshots")
    log.finish(failed, "failed", {}, {"kind": "transient", "message": "catalog busy"})
    log.start("m2", 1, "other.t", "compact")
    log.start("m2", 1, "other.t", "compact")  # a replayed pass (same id) takes its row over; still running
    store.close()

    r = wap("maintain", "--log", "--config", str(cfg), "--json")
    assert r.exit_code == 0, r.output
    actions = as_json(r)["actions"]
    assert [(a["table"], a["action"], a["status"]) for a in actions] == [
        ("other.t", "compact", "running"),
        ("nyc.trips", "expire_snapshots", "failed"),
        ("nyc.trips", "compact", "done"),
    ]
    assert actions[2]["figures"]["rewritten_data_files"] == 12
    assert actions[1]["error"]["message"] == "catalog busy"
    r = wap("maintain", "nyc.trips", "--log", "--config", str(cfg))
    assert r.exit_code == 0 and "expire_snapshots" in r.output and "other.t" not in r.output
