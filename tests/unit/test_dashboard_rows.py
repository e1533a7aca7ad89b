"""The dashboard's charts and names as people read them (AppTest, no Spark): runs placed in time by when they
started, never by their ids; check names recorded by an older wapflow (`row_count(1, None)`) shown with only
the parameters given; a run's timing bars in the order the pipeline runs its steps.

The run store holds records as earlier wapflow versions wrote them (old check names cannot be produced by
today's checks), and ids whose alphabetical order is not their time order."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from support.apptest import app_test
from wapflow.config import load_config
from wapflow.runs.store import RunRecord, RunStore

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
# (run id, days after T0): ids sorted alphabetically are not the runs in time.
RUNS = [("zz_first", 0), ("aa_second", 1), ("mm_third", 2)]


def _checks(failing: int) -> list[dict[str, Any]]:
    return [
        {"name": "row_count(1, None)", "check": "row_count", "status": "passed", "severity": "error",
         "observed": 50, "failing_rows": 0, "threshold": ">= 1", "columns": []},
        {"name": "between(fare, None, 100)", "check": "between", "status": "passed" if not failing else "warned",
         "severity": "warn", "observed": failing, "failing_rows": failing, "threshold": "<= 100",
         "columns": ["fare"]},
    ]  # fmt: skip


@pytest.fixture
def lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    import streamlit as st

    config = tmp_path / "wap.toml"
    config.write_text(f'[lakehouse]\nwarehouse = "{tmp_path / "lakehouse"}"\n')
    (tmp_path / "lakehouse").mkdir()
    store = RunStore(load_config(config).run_store_url())
    for i, (run_id, days) in enumerate(RUNS):
        started = T0 + timedelta(days=days)
        rec = RunRecord(run_id, "nyc.trips", "published", rows_written=50 + i, checks=_checks(i), started_at=started)
        rec.finished_at = started + timedelta(seconds=6)
        # As a run records them: each part when it ends (cleanup inside publish), not in step order.
        rec.timings = {"prepare": 0.2, "audit": 2.0, "write": 3.0, "cleanup": 0.1, "publish": 0.5}
        store.save(rec)
    store.close()
    monkeypatch.setenv("WAP_CONFIG", str(config))
    st.cache_data.clear()
    st.cache_resource.clear()
    yield config
    st.cache_data.clear()
    st.cache_resource.clear()


def _app() -> Any:
    return app_test()


def _charts(at: Any) -> list[tuple[dict[str, Any], pa.Table]]:
    """Each chart on the page: its Vega-Lite spec and the rows it plots."""
    out = []
    nodes, elements = [at.main], []
    while nodes:  # the page body is a fragment: its elements sit in nested blocks
        node = nodes.pop(0)
        kids = getattr(node, "children", None)
        if isinstance(kids, dict):
            nodes[:0] = list(kids.values())
        else:
            elements.append(node)
    for el in elements:
        proto = getattr(el, "proto", None)
        if proto is None or not hasattr(proto, "spec") or not getattr(proto, "datasets", None):
            continue
        rows = pa.ipc.open_stream(io.BytesIO(proto.datasets[0].data.data)).read_all()
        out.append((json.loads(proto.spec), rows))
    return out


def _x(spec: dict[str, Any]) -> dict[str, Any]:
    enc = spec["layer"][0]["encoding"] if "layer" in spec else spec["encoding"]
    x: dict[str, Any] = enc["x"]
    return x


def test_table_charts_put_runs_in_time_and_names_show_only_given_parameters(lake: Path) -> None:
    at = _app().run()
    at.radio(key="page").set_value("Table").run()
    assert not at.exception and not at.error
    charts = _charts(at)
    assert len(charts) == 3  # checks by outcome, failing rows per check, rows written per run
    in_time = [T0 + timedelta(days=d) for _, d in RUNS]
    for spec, _ in charts:
        assert (_x(spec)["field"], _x(spec)["type"]) == ("started_at", "temporal")

    def plotted(rows: pa.Table, value: str) -> list[dict[str, Any]]:
        """The chart's rows that have `value`, times back from the milliseconds the chart takes."""
        return [
            {**r, "started_at": datetime.fromtimestamp(r["started_at"] / 1000, UTC)}
            for r in rows.to_pylist()
            if r.get(value) is not None
        ]

    written = next(plotted(rows, "rows_written") for _, rows in charts if "rows_written" in rows.column_names)
    assert [(r["started_at"], r["rows_written"]) for r in written] == list(zip(in_time, [50, 51, 52], strict=True))
    failing = next(plotted(rows, "failing_rows") for _, rows in charts if "failing_rows" in rows.column_names)
    series = {
        name: [(r["started_at"], r["failing_rows"]) for r in failing if r["check"] == name]
        for name in {r["check"] for r in failing}
    }
    assert set(series) == {"row_count(min=1)", "between(fare, max=100)"}
    assert series["between(fare, max=100)"] == list(zip(in_time, [0, 1, 2], strict=True))
    checks = next(d.value for d in at.dataframe if "check_status" in d.value.columns)
    assert set(checks["check"]) == {"row_count(min=1)", "between(fare, max=100)"}
    assert list(dict.fromkeys(checks["run_id"])) == [r for r, _ in RUNS]


def test_run_page_timings_in_step_order_and_names_without_none(lake: Path) -> None:
    at = _app().run()
    at.radio(key="page").set_value("Run").run()
    at.text_input(key="run_id").input("aa_second").run()
    assert not at.exception and not at.error
    checks = next(d.value for d in at.dataframe if "threshold" in d.value.columns)
    assert list(checks["name"]) == ["row_count(min=1)", "between(fare, max=100)"]
    (spec, rows) = next((s, r) for s, r in _charts(at) if "step" in r.column_names)
    assert rows.column("step").to_pylist() == ["prepare", "write", "audit", "publish", "cleanup"]
    assert rows.column("seconds").to_pylist() == [0.2, 3.0, 2.0, 0.5, 0.1]
    assert _x(spec).get("sort") is None  # bars in the rows' order, not sorted by name
    assert "None" not in " ".join(m.value for m in at.markdown)
