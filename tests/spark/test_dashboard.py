"""The dashboard: its numbers (wapflow.service.dashboard, with pyspark unimportable) and each page (AppTest).

The lakehouse comes from real WAP runs (tests/support/dashboard_lake.py): one published ingest of 200 rows, one
blocked by not_null(passenger_count) with its branch kept. Expected values are counted independently (the
dirty file's nulls with pyarrow), never taken from the code under test.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from support.apptest import app_test
from support.dashboard_lake import CLEAN_ROWS, DIRTY_ROWS, WATCHED, Lake, TrendLake, build, build_trends
from wapflow.cli import app as cli_app
from wapflow.config import load_config
from wapflow.runs.store import RunRecord, RunStore

pytestmark = pytest.mark.spark
NOT_NULL = "not_null(passenger_count)"


@pytest.fixture(scope="module")
def lake(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Lake:
    return build(spark, tmp_path_factory.mktemp("dashboard"))


@pytest.fixture
def app(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A fresh AppTest on the lake, with Streamlit's caches cleared so no case sees another's reads."""
    import streamlit as st

    monkeypatch.setenv("WAP_CONFIG", str(lake.config))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = app_test()
    yield at
    st.cache_data.clear()
    st.cache_resource.clear()


def _service(config: Path, script: str) -> dict[str, Any]:
    """Run service code in a fresh interpreter where any `import pyspark` fails; its JSON, and what loaded."""
    code = (
        textwrap.dedent(
            f"""
        import json, sys
        sys.modules["pyspark"] = None
        from wapflow.service import dashboard as svc
        src = svc.open_sources({str(config)!r})
        """
        )
        + textwrap.dedent(script)
        + textwrap.dedent(
            """
        out["spark_loaded"] = sorted(m for m in sys.modules if m.startswith("pyspark") and sys.modules[m] is not None)
        print(json.dumps(out, default=str))
        """
        )
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_service_numbers_without_spark(lake: Lake):
    doc = _service(
        lake.config,
        f"""
        out = {{
            "overview": svc.overview(src),
            "table": svc.table_detail(src, "nyc.trips"),
            "blocked": svc.run_detail(src, {lake.blocked_run!r}),
            "published": svc.run_detail(src, {lake.published_run!r}),
            "branch": svc.branch_detail(src, {lake.branch!r}),
        }}
        """,
    )
    assert doc["spark_loaded"] == []
    ov = doc["overview"]
    (table,) = ov["tables"]
    assert table["table"] == "nyc.trips" and table["rows_on_main"] == CLEAN_ROWS
    assert table["last_run_id"] == lake.blocked_run and table["last_status"] == "blocked"
    assert ov["runs_by_status"] == {"blocked": 1, "published": 1} and ov["note"] is None
    assert sum(d["runs"] for d in ov["runs_per_day"]) == 2
    assert ov["files_by_state"] == [
        {"source": "trips", "state": "blocked", "files": 1},
        {"source": "trips", "state": "published", "files": 1},
    ]
    assert [(b["branch"], b["run_id"], b["rows"]) for b in ov["kept_branches"]] == [
        (lake.branch, lake.blocked_run, DIRTY_ROWS)
    ]
    assert ov["kept_branches"][0]["failed_checks"] == NOT_NULL

    t = doc["table"]
    assert t["rows_on_main"] == CLEAN_ROWS
    assert t["history"][0]["run_id"] == lake.published_run and t["history"][0]["total_rows"] == CLEAN_ROWS
    assert sum(h["rows_added"] for h in t["history"]) == CLEAN_ROWS
    by_run = {(c["run_id"], c["check"]): c for c in t["checks"]}
    assert by_run[(lake.blocked_run, NOT_NULL)]["failing_rows"] == lake.dirty_nulls["passenger_count"]
    assert by_run[(lake.blocked_run, NOT_NULL)]["check_status"] == "failed"
    assert by_run[(lake.published_run, NOT_NULL)]["failing_rows"] == 0
    rates = {c["run_id"]: c["null_rate"] for c in t["checks"] if c["check"].startswith("null_rate")}
    assert rates[lake.blocked_run] == pytest.approx(lake.dirty_nulls["fare_amount"] / DIRTY_ROWS)
    assert rates[lake.published_run] == 0
    assert [s["added"] != [] for s in t["schema_changes"]] == [True]  # the table's first schema, nothing since

    blocked = doc["blocked"]
    failed = [c for c in blocked["checks"] if c["status"] == "failed"]
    assert [c["name"] for c in failed] == [NOT_NULL]
    assert failed[0]["failing_rows"] == lake.dirty_nulls["passenger_count"] and failed[0]["samples"]
    assert blocked["commands"]["discard"] == f"wap discard {lake.branch} --table nyc.trips"
    assert blocked["commands"]["publish after a fix"] == f"wap retry {lake.blocked_run}"
    assert f"--branch {lake.branch}" in blocked["commands"]["inspect"]
    assert [f["state"] for f in blocked["ledger_files"]] == ["blocked"]
    assert set(doc["published"]["commands"]) == {"report"}  # nothing to inspect or fix

    (bt,) = doc["branch"]["tables"]
    assert bt["rows_added"] == DIRTY_ROWS and bt["note"] is None
    assert [c["name"] for c in bt["failed_checks"]] == [NOT_NULL]
    assert {n["column"]: n["nulls"] for n in bt["null_counts"]} == lake.dirty_nulls


def test_a_catalog_pyiceberg_cannot_open_is_named_and_runs_still_show(lake: Lake, tmp_path: Path):
    """Nessie here: the catalog panels say why they are empty; run store and ledger numbers are all there."""
    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        lake.config.read_text().replace(
            "[lakehouse]\n", '[lakehouse]\ncatalog = "nessie"\nnessie_uri = "http://127.0.0.1:9/api/v2"\n', 1
        )
    )
    doc = _service(cfg, "out = {'overview': svc.overview(src), 'table': svc.table_detail(src, 'nyc.trips')}")
    ov = doc["overview"]
    # (Nessie's metadata is read directly when the server answers; this one does not, which the note says.)
    assert "not readable" in ov["note"] and 'catalog = "nessie"' in ov["note"] and "not reachable" in ov["note"]
    assert ov["runs_by_status"] == {"blocked": 1, "published": 1} and len(ov["files_by_state"]) == 2
    assert ov["tables"][0]["rows_on_main"] is None and ov["tables"][0]["last_run_id"] == lake.blocked_run
    assert doc["table"]["history"] == [] and "not readable" in doc["table"]["note"]
    assert len(doc["table"]["checks"]) == 6  # three checks of each of the two runs, from the run store


def test_the_catalog_read_directly_gives_what_pyiceberg_gives(lake: Lake):
    """Where PyIceberg cannot open the catalog (JDBC on PostgreSQL, REST, Nessie), history, rows on main and a
    branch's head come from the catalog's metadata read directly: on this lakehouse both ways give the same."""
    doc = _service(
        lake.config,
        """
        from wapflow.lakehouse.lakehouse import Lakehouse
        direct = svc.Sources(src.cfg, src.store, src.ledger, None, "note", Lakehouse(src.cfg).iceberg.direct)
        out = {}
        for name, s in (("pyiceberg", src), ("direct", direct)):
            t, o = svc.table_detail(s, "nyc.trips"), svc.overview(s)
            b = svc.branch_detail(s, svc.branch_names(s)[0])["tables"][0]
            out[name] = [t["history"], t["rows_on_main"], o["tables"], b["head_snapshot_id"]]
        """,
    )
    assert doc["direct"] == doc["pyiceberg"] and doc["direct"][1] == CLEAN_ROWS
    assert doc["spark_loaded"] == []


def _metrics(at: Any) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _words(at: Any) -> dict[str, str]:
    """The page's label-over-value words (a status, a table name): label -> the value as a person reads it."""
    found = (re.fullmatch(r"(.+?)  \n\*\*(.+)\*\*", str(m.value)) for m in at.markdown)
    return {f[1]: re.sub(r"\\(.)", r"\1", f[2]) for f in found if f}


def _drawn(at: Any) -> str:
    """What the page drew, for a failure's message: its headers, metrics and errors."""
    drawn = {**_metrics(at), **_words(at)}
    return f"headers {[h.value for h in at.header]}, metrics {drawn}, errors {[e.value for e in at.error]}"


def test_overview_page(app: Any, lake: Lake):
    from wapflow.runs.alerts import AlertLog

    store = RunStore(f"sqlite:///{lake.config.parent / 'lakehouse' / 'wapflow_runs.db'}")
    log = AlertLog(store.engine)
    row = log.claim(
        key=f"dash-{lake.blocked_run}",
        run_id=lake.blocked_run,
        event="blocked",
        sink="ops",
        table="nyc.trips",
        message="blocked by not_null(passenger_count)",
    )
    assert row is not None
    log.finish(row, status="sent", attempts=1, http_status=200, error=None)
    store.close()
    app.run()
    assert not app.exception and not app.error
    m = _metrics(app)
    assert (m["Runs"], m["Published"], m["Blocked"], m["Kept branches"]) == ("2", "1", "1", "1")
    assert m["nyc.trips rows on main"] == str(CLEAN_ROWS)
    frames = [d.value for d in app.dataframe]
    tables = next(f for f in frames if "rows_on_main" in f.columns)
    assert tables.to_dict("records")[0]["rows_on_main"] == CLEAN_ROWS
    files = next(f for f in frames if "state" in f.columns)
    assert dict(zip(files["state"], files["files"], strict=True)) == {"blocked": 1, "published": 1}
    kept = next(f for f in frames if "branch" in f.columns)
    assert list(kept["branch"]) == [lake.branch]
    alerts = next(f for f in frames if "sink" in f.columns)
    sent = alerts.to_dict("records")[0]
    assert (sent["run_id"], sent["event"], sent["sink"], sent["status"]) == (lake.blocked_run, "blocked", "ops", "sent")


def test_table_page(app: Any, lake: Lake):
    app.run()
    app.radio(key="page").set_value("Table").run()
    assert not app.exception and not app.error
    assert app.selectbox(key="table_pick").value == "nyc.trips"
    assert _metrics(app)["Rows on main"] == str(CLEAN_ROWS)
    history = next(d.value for d in app.dataframe if "snapshot_id" in d.value.columns)
    assert history["run_id"].iloc[0] == lake.published_run
    checks = next(d.value for d in app.dataframe if "check_status" in d.value.columns)
    row = checks[(checks["run_id"] == lake.blocked_run) & (checks["check"] == NOT_NULL)].iloc[0]
    assert row["failing_rows"] == lake.dirty_nulls["passenger_count"]


def test_run_page_shows_the_blocked_check_and_commands(app: Any, lake: Lake):
    app.run()
    app.radio(key="page").set_value("Run").run()
    app.text_input(key="run_id").input(lake.blocked_run).run()
    assert not app.exception and not app.error
    m = {**_metrics(app), **_words(app)}
    assert (m["Status"], m["Table"], m["Rows written"]) == ("blocked", "nyc.trips", str(DIRTY_ROWS))
    checks = next(d.value for d in app.dataframe if "threshold" in d.value.columns)
    row = checks[checks["name"] == NOT_NULL].iloc[0]
    assert row["status"] == "failed" and row["failing_rows"] == lake.dirty_nulls["passenger_count"]
    assert f"**{NOT_NULL}**: {lake.dirty_nulls['passenger_count']} failing rows" in [x.value for x in app.markdown]
    codes = [c.value for c in app.code]
    assert f"wap discard {lake.branch} --table nyc.trips" in codes and f"wap retry {lake.blocked_run}" in codes
    # The recent runs' grid: its ids and statuses as wide as their longest value (Streamlit's width cuts them).
    recent = next(d for d in app.dataframe if {"run_id", "tables", "status"} <= set(d.value.columns))
    widths = json.loads(recent.proto.columns)
    for column in ("run_id", "status"):
        longest = max(len(str(v)) for v in [column, *recent.value[column]])
        assert widths[column]["width"] >= 8 * longest, widths


def test_a_link_opens_a_page_on_a_run(app: Any, lake: Lake):
    """?page=Run&run_id=ID, as the browser test and a shared link use it."""
    app.query_params["page"] = "Run"
    app.query_params["run_id"] = lake.blocked_run
    app.run()
    assert not app.exception and not app.error
    assert app.radio(key="page").value == "Run" and app.text_input(key="run_id").value == lake.blocked_run
    assert _words(app)["Status"] == "blocked"


def test_run_page_unknown_run_says_so(app: Any):
    app.run()
    app.radio(key="page").set_value("Run").run()
    app.text_input(key="run_id").input("20991231t000000_000000").run()
    assert not app.exception
    errors = [e.value for e in app.error]
    assert errors and errors[0].startswith("no run 20991231t000000_000000 in the run store"), _drawn(app)


def test_branch_page(app: Any, lake: Lake):
    app.run()
    app.radio(key="page").set_value("Branch").run()
    assert app.selectbox(key="branch_pick").value == lake.branch  # picked from the kept ones
    app.text_input(key="branch").input(lake.branch).run()  # pasting it works the same
    assert not app.exception and not app.error
    m = {**_metrics(app), **_words(app)}
    assert "Rows added" in m, _drawn(app)
    assert (m["Rows added"], m["Failed checks"], m["Run status"]) == (str(DIRTY_ROWS), "1", "blocked")
    assert any(c.value.startswith(f"left by run {lake.blocked_run} ") for c in app.caption)
    nulls = next(d.value for d in app.dataframe if "nulls" in d.value.columns)
    assert dict(zip(nulls["column"], nulls["nulls"], strict=True)) == lake.dirty_nulls


def test_a_new_run_shows_at_the_next_refresh(app: Any, lake: Lake):
    """Reads are cached, keyed on the run store's change token: a new run is not hidden by the cache."""
    app.run()
    assert _metrics(app)["Runs"] == "2"
    app.run()  # cached this time
    store = RunStore(f"sqlite:///{lake.config.parent / 'lakehouse' / 'wapflow_runs.db'}")
    rec = RunRecord("20991231t000000_feed01", "nyc.trips", "failed", started_at=datetime.now(UTC))
    store.save(rec)
    try:
        app.run()
        m = _metrics(app)
        assert (m["Runs"], m["Published"], m["Blocked"]) == ("3", "1", "1")
    finally:
        from wapflow.runs.store import runs_table

        with store.engine.begin() as conn:
            conn.execute(runs_table.delete().where(runs_table.c.run_id == rec.run_id))
        store.close()


def test_wap_dashboard_without_streamlit_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    import wapflow.cli.dashboard as cmd

    real = cmd.importlib.util.find_spec
    monkeypatch.setattr(cmd.importlib.util, "find_spec", lambda name: None if name == "streamlit" else real(name))
    res = CliRunner().invoke(cli_app, ["dashboard"])
    assert res.exit_code == 2
    assert "pip install 'wapflow[dashboard]'" in res.output


def test_service_on_an_s3_warehouse_with_read_only_keys(spark: Any, tmp_path: Path):
    """Warehouse on S3 (the local S3 server): [s3] reaches PyIceberg's FileIO; the reader's keys are enough."""
    from support.s3_lake import lakehouse, toml_config, upload_trips
    from support.s3_server import start_s3_env
    from wapflow.pipeline import run_wap

    s3 = start_s3_env()
    try:
        landing, lake = s3.buckets()
        clean = upload_trips(s3, landing, "in/clean.parquet", 150)
        dirty = upload_trips(s3, landing, "in/dirty.parquet", 80, null_rate=0.25, start_id=5000)
        lh = lakehouse(spark, tmp_path, s3, lake=lake, catalog="dash_s3", keys=s3.admin)
        assert run_wap(lh, "nyc.trips", [clean]).status == "published"
        blocked = run_wap(lh, "nyc.trips", [dirty])
        assert blocked.status == "blocked" and blocked.branch
        body = s3.client().get_object(Bucket=landing, Key="in/dirty.parquet")["Body"].read()
        expected = pq.read_table(io.BytesIO(body)).column("passenger_count").null_count
        cfg = toml_config(tmp_path, s3, lake=lake, catalog="dash_s3", keys=s3.reader)
        doc = _service(
            cfg,
            f"out = {{'overview': svc.overview(src), 'branch': svc.branch_detail(src, {blocked.branch!r})}}",
        )
    finally:
        s3.server.stop()
    assert doc["spark_loaded"] == [] and doc["overview"]["note"] is None
    assert doc["overview"]["tables"][0]["rows_on_main"] == 150
    assert doc["overview"]["runs_by_status"] == {"blocked": 1, "published": 1}
    (bt,) = doc["branch"]["tables"]
    assert bt["rows_added"] == 80
    assert {n["column"]: n["nulls"] for n in bt["null_counts"]}["passenger_count"] == expected > 0


# --- the trend lakehouse: published, warned, blocked and held runs two hours apart (support.dashboard_lake) -----


@pytest.fixture(scope="module")
def trends(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> TrendLake:
    return build_trends(spark, tmp_path_factory.mktemp("trends"))


@pytest.fixture
def trend_app(trends: TrendLake, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """AppTest on the trend lakehouse, served on loopback (approve and reject shown without a login)."""
    import streamlit as st

    monkeypatch.setenv("WAP_CONFIG", str(trends.config))
    monkeypatch.setenv("WAP_DASHBOARD_HOST", "127.0.0.1")
    st.cache_data.clear()
    st.cache_resource.clear()
    at = app_test()
    yield at
    st.cache_data.clear()
    st.cache_resource.clear()


def _charts(at: Any) -> list[dict[str, Any]]:
    """Each Vega-Lite chart on the page: its spec, its layers, and its rows (sent beside it as Arrow)."""
    import pyarrow as pa

    out = []
    for e in at.get("vega_lite_chart"):
        spec = json.loads(e.proto.spec)
        rows = [r for d in e.proto.datasets for r in pa.ipc.open_stream(d.data.data).read_all().to_pylist()]
        out.append({**spec, "rows": rows, "layers": spec.get("layer") or [spec]})
    return out


def _texts(at: Any) -> list[str]:
    return [e.value for kind in (at.markdown, at.caption, at.error, at.success) for e in kind]


def test_overview_counts_runs_awaiting_review_apart_from_kept_branches(trend_app: Any, trends: TrendLake):
    trend_app.run()
    assert not trend_app.exception and not trend_app.error
    m = _metrics(trend_app)
    published = len(trends.of("published")) + len(trends.of("warned"))
    assert (m["Runs"], m["Published"], m["Blocked"]) == (str(len(trends.runs)), str(published), "1")
    assert (m["Awaiting review"], m["Kept branches"]) == ("1", "1")  # the held run's branch is not "kept"
    store = RunStore(load_config(str(trends.config)).run_store_url())
    (held,) = [store.get(r) for r in trends.of("held")]
    store.close()
    assert held is not None and held.finished_at is not None
    waited = (datetime.now(UTC) - held.finished_at.replace(tzinfo=UTC)).total_seconds() // 60
    caption = next(t for t in _texts(trend_app) if t.startswith("1 run(s) awaiting review, the oldest waiting "))
    shown = re.fullmatch(
        r"1 run\(s\) awaiting review, the oldest waiting (\d+)m: approve or reject on the Review page", caption
    )
    assert shown and abs(int(shown[1]) - waited) <= 1, caption  # held about 5 minutes before the build ended
    kept = next(d.value for d in trend_app.dataframe if "branch" in d.value.columns)
    assert list(kept["run_id"]) == trends.of("blocked")


def test_trends_are_charts_a_person_reads(trend_app: Any, trends: TrendLake):
    """Time on x in UTC, 24-hour (the runs span 18 hours), the anomaly band shaded, each run a point coloured by
    its status; the picker starts on the metric the anomaly check watches; a warned check counts as warned."""
    trend_app.run()
    trend_app.radio(key="page").set_value("Table").run()
    assert not trend_app.exception and not trend_app.error
    picker = trend_app.selectbox(key="trend_metric")
    assert picker.options[0] == WATCHED and picker.value == WATCHED
    assert sorted(picker.options[1:]) == picker.options[1:] and WATCHED not in picker.options[1:]
    charts = _charts(trend_app)
    trends_drawn = [c for c in charts if any(layer["mark"]["type"] == "area" for layer in c["layers"])]
    assert len(trends_drawn) == 2  # row_count, and the watched metric
    for chart in trends_drawn:
        area = next(layer for layer in chart["layers"] if layer["mark"]["type"] == "area")
        assert (area["encoding"]["y"]["field"], area["encoding"]["y2"]["field"]) == ("band_low", "band_high")
        dots = next(layer for layer in chart["layers"] if layer["mark"]["type"] == "point")
        scale = dots["encoding"]["color"]["scale"]
        assert scale["domain"] == ["published", "warned", "blocked", "held"]
        assert len(set(scale["range"])) == 4  # a colour each
        shown = {r["run_id"]: r["status"] for r in chart["rows"]}
        assert shown == trends.runs
        x = dots["encoding"]["x"]
        assert (x["type"], x["scale"]["type"]) == ("temporal", "utc")
        assert "utcFormat(datum.value, '%H:%M')" in x["axis"]["labelExpr"]  # 24-hour (the runs span 18 hours)
        ticks = [(t["hours"], t["minutes"]) for t in x["axis"]["values"]]
        assert len(ticks) >= 4 and all(m == 0 and h % 3 == 0 for h, m in ticks)  # whole hours, every third
    # The watched metric's band is the one each run's audit recorded (the anomaly check's robust band for a mean);
    # the row count, which no check watches, has its band recomputed, and the caption says so.
    row_count, watched = trends_drawn
    assert {r["band_from"] for r in watched["rows"] if r["band_low"] is not None} == {"as judged"}
    assert {r["band_from"] for r in row_count["rows"] if r["band_low"] is not None} == {"recomputed"}
    captions = [t for t in _texts(trend_app) if " per run by the time it ran; shaded band: " in t]
    assert captions == [
        "row_count per run by the time it ran; shaded band: no check of the table watches this metric: the band an "
        "anomaly check (sensitivity 3) would use over the last 30 published runs before each run (from 3), "
        "recomputed",
        f"{WATCHED} per run by the time it ran; shaded band: the band each run was judged by, as its audit recorded "
        f"it (anomaly({WATCHED}): robust band)",
    ]
    outcomes = next(c for c in charts if c["layers"][0]["encoding"].get("color", {}).get("field") == "outcome")
    warned = trends.of("warned")[0]
    assert {(r["check"], r["outcome"]) for r in outcomes["rows"] if r["run_id"] == warned} == {
        ("not_null(passenger_count)", "passed"),
        (f"anomaly({WATCHED})", "warned"),
    }


def test_the_wait_of_a_held_run_advances_between_refreshes(trend_app: Any, trends: TrendLake):
    """The queue is cached until the run store changes; its "waiting" is worked out at each render."""
    import time

    from wapflow.runs.store import runs_table

    (held,) = trends.of("held")
    store = RunStore(load_config(str(trends.config)).run_store_url())
    rec = store.get(held)
    assert rec is not None
    r = runs_table.c
    held_at = datetime.now(UTC) - timedelta(seconds=118)
    with store.engine.begin() as conn:
        conn.execute(runs_table.update().where(r.run_id == held).values(finished_at=held_at))
    try:
        trend_app.run()
        trend_app.radio(key="page").set_value("Review").run()
        assert f"**nyc.trips** · run `{held}` · waiting 1m" in _texts(trend_app)
        time.sleep(max(0.0, 121 - (datetime.now(UTC) - held_at).total_seconds()))
        trend_app.run()  # nothing changed in the run store: the queue comes from the cache
        assert f"**nyc.trips** · run `{held}` · waiting 2m" in _texts(trend_app)
        assert list(trend_app.dataframe[0].value["waiting"]) == ["2m"]
    finally:
        with store.engine.begin() as conn:
            conn.execute(runs_table.update().where(r.run_id == held).values(finished_at=rec.finished_at))
        store.close()


def test_a_decision_without_a_reason_is_asked_for_in_the_page_words(trend_app: Any, trends: TrendLake):
    (held,) = trends.of("held")
    trend_app.run()
    trend_app.radio(key="page").set_value("Review").run()
    trend_app.button(key=f"approve_{held}").click().run()
    trend_app.text_input(key=f"reason_{held}").input("   ").run()
    trend_app.button(key=f"confirm_{held}").click().run()
    assert not trend_app.exception
    errors = [e.value for e in trend_app.error]
    assert errors == [f"{held}: Give a reason to approve run {held}: it is recorded with the decision"]
    assert not any("--" in t for t in _texts(trend_app))  # no CLI flags on the page
    store = RunStore(load_config(str(trends.config)).run_store_url())
    assert store.get(held).status == "awaiting_review"  # type: ignore[union-attr]
    store.close()
