"""The dashboard's tables hold no Python repr (issue 50 item 6): an anomaly check's observed band reads
`value 759.3, band [212.5, 1150], ...`, a failing row's NULL `null`, a missing value `—`; never `None` or a
dict. The real app (Streamlit's AppTest) on a real run store, no JVM."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from support.apptest import app_test
from wapflow.config import load_config
from wapflow.runs.store import RunRecord, RunStore

T0 = datetime(2026, 11, 28, 14, 34, 35, tzinfo=UTC)
BAND = {"value": 759.308, "band": [212.5, 1150.2], "median": 480.0, "mad": 116.0, "history": 12}
CHECKS = [
    {"name": "anomaly(row_count)", "check": "anomaly", "status": "failed", "severity": "error", "observed": BAND,
     "failing_rows": 0, "threshold": "[212.5, 1150] (median 480 ± 3 x 116 over the last 12 published runs)",
     "columns": [], "source": "metadata"},
    {"name": "not_null(passenger_count)", "check": "not_null", "status": "failed", "severity": "error",
     "observed": 2, "failing_rows": None, "threshold": "no NULLs", "columns": ["passenger_count"], "source": "write",
     "samples": [{"trip_id": 7, "passenger_count": None}, {"trip_id": 9, "passenger_count": None}]},
    {"name": "freshness(pickup_at, 24h)", "check": "freshness", "status": "failed", "severity": "error",
     "observed": None, "failing_rows": 0, "threshold": "", "columns": ["pickup_at"], "source": "write"},
]  # fmt: skip
REPR = re.compile(r"[{}]|\bNone\b|\bnan\b|'\w+':")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    import streamlit as st

    config = tmp_path / "wap.toml"
    config.write_text(f'[lakehouse]\nwarehouse = "{tmp_path / "lakehouse"}"\n')
    (tmp_path / "lakehouse").mkdir()
    runs = RunStore(load_config(config).run_store_url())
    blocked = RunRecord("20261128t143435_4f3a2b", "nyc.trips", "blocked", rows_written=759, checks=CHECKS)
    blocked.started_at, blocked.branch, blocked.branch_kept = T0, "wap_20261128t143435_4f3a2b", True
    runs.save(blocked)
    published = RunRecord("20261127t143435_0a0b0c", "nyc.trips", "published", rows_written=480, checks=CHECKS[:1])
    published.started_at = T0 - timedelta(days=1)
    runs.save(published)
    runs.close()
    monkeypatch.setenv("WAP_CONFIG", str(config))
    st.cache_data.clear()
    st.cache_resource.clear()
    yield blocked.run_id
    st.cache_data.clear()
    st.cache_resource.clear()


def cells(at: Any) -> list[str]:
    """Every cell of every table on the page, as the page shows it."""
    out = []
    for d in at.dataframe:
        frame = d.value
        assert not frame.isna().any().any(), frame  # a missing value is `—`, not an empty None
        out += [str(v) for col in frame.columns for v in frame[col]]
    return out


def page(name: str, run_id: str | None = None) -> Any:

    at = app_test().run()
    at.radio(key="page").set_value(name).run()
    if run_id is not None:
        at.text_input(key="run_id").input(run_id).run()
    assert not at.exception and not at.error, at.exception
    return at


def test_the_run_page_shows_observed_values_and_nulls_in_words(store: str) -> None:
    shown = cells(page("Run", store))
    bad = [c for c in shown if REPR.search(c)]
    assert not bad, bad
    assert "value 759.3, band [212.5, 1150], 2.4 MADs above the median 480, 12 runs" in shown
    assert shown.count("null") >= 2 and "—" in shown  # the failing rows' NULLs; freshness without a value


@pytest.mark.parametrize("name", ["Overview", "Table"])
def test_overview_and_table_pages_show_no_none(store: str, name: str) -> None:
    shown = cells(page(name))
    assert shown and not [c for c in shown if REPR.search(c)], shown


def test_grids_show_counts_grouped_ids_as_they_are_and_ratios_as_the_cli_does(store: str) -> None:
    """Every numeric column of the Table page: counts with thousands separated in the browser (localized), an
    `..._id` column plain; floats at the CLI's 4 significant digits (wapflow.display), still numbers that sort."""
    import json as _json

    at = page("Table")
    configs = {}
    for d in at.dataframe:
        configs.update(_json.loads(d.proto.columns or "{}"))
        for col in d.value.columns:
            floats = [v for v in d.value[col] if isinstance(v, float)]
            assert all(v == round(v, 4) or abs(v) >= 1000 for v in floats), (col, floats)
    formats = {c: (cfg.get("type_config") or {}).get("format") for c, cfg in configs.items()}
    assert formats["rows_written"] == "localized", formats
    assert all(f == "plain" for c, f in formats.items() if c.endswith("_id") and f is not None), formats
