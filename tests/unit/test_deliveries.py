"""Deliveries (control_totals `wait`): which landed files `wap ingest` and `wap watch` hold until their manifest
and every file it names are there, and how whole deliveries are batched. No JVM; manifests in a dict."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from wapflow.audit.batch_checks.control import ControlTotalsCheck
from wapflow.outer.deliveries import Deliveries
from wapflow.storage.files import FileIdentity

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _file(uri: str, minutes_ago: float = 1) -> tuple[str, FileIdentity]:
    return uri, FileIdentity(uri, 10, f"v-{uri}", NOW - timedelta(minutes=minutes_ago))


def _deliveries(manifests: dict[str, object], **params: object) -> Deliveries:
    check = ControlTotalsCheck(check="control_totals", wait="30m", **params)
    found = Deliveries.of([check], lambda uri: json.dumps(manifests[uri]).encode() if uri in manifests else None)
    assert found is not None
    return found


def test_a_file_is_held_until_its_manifest_and_the_files_it_names_are_there_or_the_wait_is_over() -> None:
    fresh = [_file("/l/d1/a.csv"), _file("/l/d1/b.csv"), _file("/l/d2/c.csv"), _file("/l/d3/x.csv", minutes_ago=45)]
    landed = {uri for uri, _ in fresh}
    d = _deliveries({"/l/d2/_manifest.json": {"rows": 3, "files": {"c.csv": {}, "late.csv": {}}}})
    take, held = d.hold(fresh, landed, now=NOW)
    # d1 has no manifest, d2's names late.csv, which has not landed; d3's file landed 45 minutes ago: taken.
    assert [uri for uri, _ in take] == ["/l/d3/x.csv"]
    assert held.files == 3 and held.until == NOW - timedelta(minutes=1) + timedelta(minutes=30)
    assert held.why == ["no manifest at /l/d1/_manifest.json yet",
                        "/l/d2/_manifest.json names 1 file(s) not landed yet: late.csv"]  # fmt: skip

    complete = _deliveries({"/l/d1/_manifest.json": {"files": [{"name": "a.csv"}, {"name": "b.csv"}]}})
    take, held = complete.hold(fresh[:2], landed, now=NOW)
    assert len(take) == 2 and held.files == 0
    # A manifest that cannot be read holds nothing: the check reports it on the run.
    broken = Deliveries.of([ControlTotalsCheck(check="control_totals", wait="30m")], lambda uri: b"not json")
    assert broken is not None and len(broken.hold(fresh[:2], landed, now=NOW)[0]) == 2


def test_the_manifest_pattern_places_each_files_delivery() -> None:
    d = _deliveries({"/l/d1/a.manifest.json": {"rows": 1}}, manifest="{stem}.manifest.json")
    take, held = d.hold([_file("/l/d1/a.csv"), _file("/l/d1/b.csv")], {"/l/d1/a.csv", "/l/d1/b.csv"}, now=NOW)
    assert [uri for uri, _ in take] == ["/l/d1/a.csv"] and held.why == ["no manifest at /l/d1/b.manifest.json yet"]


def test_whole_deliveries_make_a_batch_and_a_big_one_goes_alone() -> None:
    d = _deliveries({})
    pending = ["/l/d1/a", "/l/d1/b", "/l/d1/c", "/l/d2/d", "/l/d3/e", "/l/d3/f"]

    def fits(n: int):  # a batch of at most n files
        return lambda trial, row: len(trial) < n

    assert d.batch(pending, lambda r: r, fits(3)) == ["/l/d1/a", "/l/d1/b", "/l/d1/c"]  # d1 fills it
    assert d.batch(pending[3:], lambda r: r, fits(3)) == ["/l/d2/d", "/l/d3/e", "/l/d3/f"]
    assert d.batch(pending[3:], lambda r: r, fits(2)) == ["/l/d2/d"]  # d3 does not fit beside d2: next time
    assert d.batch(pending[4:], lambda r: r, fits(2)) == ["/l/d3/e", "/l/d3/f"]
    assert d.batch(pending, lambda r: r, fits(2)) == pending[:3]  # never split: d1 goes whole, alone


def test_only_a_check_that_waits_makes_deliveries() -> None:
    assert Deliveries.of([ControlTotalsCheck(check="control_totals")], lambda uri: None) is None
    assert Deliveries.of([], lambda uri: None) is None


def test_a_wait_that_is_not_a_duration_is_a_config_error_naming_it() -> None:
    import pytest

    from wapflow.config import parse_config
    from wapflow.errors import ConfigError

    for bad, said in (("soon", "is not a duration"), ("0s", "is not a positive duration")):
        with pytest.raises(ConfigError, match=said) as e:
            parse_config({"tables": {"shop.orders": {"checks": [{"check": "control_totals", "wait": bad}]}}})
        assert "wait" in str(e.value)
