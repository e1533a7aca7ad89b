"""A merge's sample keys as `wap diff` and `wap report` show them, from a run's record alone (no Spark): the
`changes` line's samples grouped per kind, single keys as values, composite keys as objects (JSON) and tuples
(text), text values quoted so a key never reads as words or markup. Real runs: tests/spark/test_diff_keys.py."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from wapflow.cli import app
from wapflow.runs.store import RunRecord, RunStore
from wapflow.service.runs import change_keys, key_text, keys_lines, run_report

runner = CliRunner()


def _changes(samples: list[dict[str, object]]) -> list[dict[str, object]]:
    observed = {"rows_inserted": 1, "rows_updated": 1, "rows_deleted": 1}
    line = {"name": "changes", "check": "changes", "severity": "warn", "status": "passed", "failing_rows": 0}
    return [{**line, "observed": observed, "source": "metadata", "samples": samples}]


def test_single_key_samples_are_grouped_per_kind_in_their_recorded_order() -> None:
    rec = RunRecord(
        run_id="r1",
        table_name="crm.c",
        status="awaiting_review",
        checks=_changes(
            [
                {"change": "inserted", "key": {"id": 9}},
                {"change": "inserted", "key": {"id": 11}},
                {"change": "updated", "key": {"id": 3}},
                {"change": "deleted", "key": {"id": 1}},
            ]
        ),
    )
    doc = change_keys(rec)
    assert doc == {"key": ["id"], "inserted": [9, 11], "updated": [3], "deleted": [1]}
    assert keys_lines(doc) == ["inserted id: 9, 11", "updated id: 3", "deleted id: 1"]


def test_composite_keys_are_objects_in_json_and_tuples_in_text() -> None:
    samples = [
        {"change": "updated", "key": {"region": "eu", "id": 2}},
        {"change": "deleted", "key": {"region": 'a "b"\n[bold]', "id": 7}},
    ]
    doc = change_keys(RunRecord(run_id="r2", table_name="crm.c", status="blocked", checks=_changes(samples)))
    assert doc is not None
    assert doc["updated"] == [{"region": "eu", "id": 2}] and doc["inserted"] == []
    assert keys_lines(doc) == ['updated (region, id): ("eu", 2)', 'deleted (region, id): ("a \\"b\\"\\n[bold]", 7)']


def test_key_values_are_literals() -> None:
    assert key_text(5) == "5"
    assert key_text("5") == '"5"'  # text is quoted: told apart from a number
    assert key_text(None) == "null"
    assert key_text("2026-11-26") == '"2026-11-26"'
    assert key_text({"a": "x", "b": 1.5}) == '("x", 1.5)'


def test_no_samples_means_no_keys() -> None:
    append = RunRecord(run_id="r3", table_name="t.a", status="awaiting_review", rows_written=3)
    assert change_keys(append) is None and keys_lines(None) == []
    older = RunRecord(run_id="r4", table_name="t.a", status="blocked", checks=_changes([]))
    assert change_keys(older) is None


def test_wap_report_shows_the_sample_keys(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = RunStore(url)
    samples = [{"change": "deleted", "key": {"id": 4}}, {"change": "deleted", "key": {"id": 8}}]
    store.save(RunRecord(run_id="r5", table_name="crm.c", status="awaiting_review", checks=_changes(samples)))
    assert run_report(store, "r5")["change_keys"] == {"key": ["id"], "inserted": [], "updated": [], "deleted": [4, 8]}
    toml = tmp_path / "wap.toml"
    toml.write_text(f'[lakehouse]\nrun_store = "{url}"\n')
    res = runner.invoke(app, ["report", "r5", "--config", str(toml)])
    assert res.exit_code == 0, res.output
    assert "sample keys deleted id: 4, 8" in res.stdout


def test_a_held_merges_alert_names_its_sample_keys() -> None:
    """The awaiting_review alert carries the keys: a line each in Slack's "What publishing changes", a list in
    the webhook's diff (escaped for Slack: a key is data, not markup)."""
    from wapflow.alerts.event import held_for_review
    from wapflow.alerts.payload import slack_payload, webhook_payload
    from wapflow.service.diff import summarize

    samples = [{"change": "updated", "key": {"id": 3}}, {"change": "deleted", "key": {"id": "<b>*x*</b>"}}]
    rec = RunRecord(run_id="r4", table_name="crm.c", status="awaiting_review", checks=_changes(samples))
    rows = {"added": 0, "updated": 1, "deleted": 1, "replaced": 0, "main_rows": 5}
    summary = summarize("r4", rows, [], keys=change_keys(rec))  # type: ignore[arg-type]
    assert summary["keys"] == ["updated id: 3", 'deleted id: "<b>*x*</b>"']
    ev = held_for_review(rec, summary)
    assert webhook_payload(ev)["diff"]["keys"] == summary["keys"]
    texts = [b.get("text", {}).get("text", "") for b in slack_payload(ev)["blocks"]]
    changes = next(t for t in texts if t.startswith("*What publishing changes*"))
    assert "• sample keys updated id: 3" in changes
    assert "<b>" not in changes and "&lt;b&gt;" in changes, changes
