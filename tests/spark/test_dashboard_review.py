"""The dashboard's Review page and quality trends (AppTest): a person approves one held run and rejects another
with the same service calls as `wap approve / reject`; on a dashboard bound beyond loopback only after entering
$WAP_DASHBOARD_TOKEN. The lakehouse comes from real runs (four published batches of 100 rows, two held for review
by a warning at 200 rows); main is read back with PyIceberg, the run store as `wap report` shows it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.apptest import app_test
from support.data import trips_file
from support.typer_cli import wap
from wapflow.config import load_config
from wapflow.errors import EXIT_REVIEW
from wapflow.runs.store import RunStore

pytestmark = pytest.mark.spark
TOKEN = "s3cret-token-for-the-test"


@dataclass(frozen=True)
class Held:
    config: Path
    published: list[str]
    held: list[str]


@pytest.fixture(scope="module")
def lake(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Held:
    tmp = tmp_path_factory.mktemp("review_dash")
    landing = tmp / "landing"
    landing.mkdir()
    cfg = tmp / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{tmp / "lakehouse"}"\ncatalog_name = "rv_dash"\nmaster = "local[2]"\n\n'
        '[tables."nyc.trips"]\nreview = "on_warn"\nchecks = [{ check = "row_count", max = 150, severity = "warn" }]\n'
    )
    published, held = [], []
    for i in range(4):
        f = trips_file(landing, f"p{i}.parquet", 100, start_id=1 + 100 * i, seed=i)
        r = wap("run", "nyc.trips", str(f), "--config", str(cfg), "--json")
        assert r.exit_code == 0, r.output
        published.append(json.loads(r.stdout)["run_id"])
    for i, nulls in enumerate((0.0, 0.3)):
        f = trips_file(landing, f"h{i}.parquet", 200, start_id=1000 + 200 * i, null_rate=nulls, seed=10 + i)
        r = wap("run", "nyc.trips", str(f), "--config", str(cfg), "--json")
        assert r.exit_code == EXIT_REVIEW, r.output
        held.append(json.loads(r.stdout)["run_id"])
    return Held(cfg, published, held)


def _app(
    lake: Held, monkeypatch: pytest.MonkeyPatch, host: str, token: str | None = None, user: dict[str, Any] | None = None
) -> Any:
    import streamlit as st

    monkeypatch.setenv("WAP_CONFIG", str(lake.config))
    monkeypatch.setenv("WAP_DASHBOARD_HOST", host)
    if token is None:
        monkeypatch.delenv("WAP_DASHBOARD_TOKEN", raising=False)
    else:
        monkeypatch.setenv("WAP_DASHBOARD_TOKEN", token)
    st.cache_data.clear()
    st.cache_resource.clear()
    at = app_test(240)
    if user is not None:
        at.user = user  # what st.user holds: Streamlit's login sets it from the provider's id token
    at.run()
    at.sidebar.radio(key="page").set_value("Review").run()
    assert not at.exception, at.exception
    return at


@pytest.fixture(autouse=True)
def _clean_caches() -> Iterator[None]:
    yield
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()


def _main_ids(cfg: Path) -> list[int]:
    from pyiceberg.catalog.sql import SqlCatalog

    c = load_config(str(cfg))
    wh = Path(c.warehouse_location())
    catalog = SqlCatalog(c.lakehouse.catalog_name, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}")
    return sorted(catalog.load_table("nyc.trips").scan().to_arrow().column("trip_id").to_pylist())


def _texts(at: Any) -> list[str]:
    return [e.value for kind in (at.success, at.error, at.warning, at.markdown, at.caption) for e in kind]


def test_beyond_loopback_decisions_need_the_token(lake: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    first = lake.held[0]
    at = _app(lake, monkeypatch, "0.0.0.0")
    assert any("approve and reject are off" in w.value for w in at.warning)
    assert not [b for b in at.button if b.key == f"approve_{first}"]  # read-only: the queue, no buttons
    assert sorted(at.dataframe[0].value["run_id"]) == sorted(lake.held)

    at = _app(lake, monkeypatch, "0.0.0.0", token=TOKEN)
    assert not [b for b in at.button if b.key == f"approve_{first}"]
    at.text_input(key="login_name").input("carol").run()
    at.text_input(key="login_token").input("wrong").run()
    at.button(key="login").click().run()
    assert any("the token is wrong" in e.value for e in at.error)
    assert not [b for b in at.button if b.key == f"approve_{first}"]
    at.text_input(key="login_token").input(TOKEN).run()
    at.button(key="login").click().run()
    assert any("signed in as carol" in c.value for c in at.caption)
    assert [b for b in at.button if b.key == f"approve_{first}"]  # now a person may decide
    assert TOKEN not in json.dumps(_texts(at))


def test_with_oidc_deciding_needs_an_allowed_login(lake: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    """[dashboard.oidc]: logged out, the queue shows and "Log in with <provider>" instead of the buttons (on
    loopback too); logged in but not in `allow`, no buttons; logged in and allowed, Approve asks for a reason but
    no name; a click after the login ended decides nothing. Other pages read as before. (The real login, and an
    approval recorded as the provider's identity: tests/process/test_dashboard_browser.py.)"""
    first = lake.held[0]
    cfg = lake.config.with_name("wap-oidc.toml")
    cfg.write_text(
        lake.config.read_text() + '\n[dashboard.oidc]\nprovider = "Acme SSO"\n'
        'server_metadata_url = "https://sso.acme.example/.well-known/openid-configuration"\n'
        'client_id = "wapflow"\nclient_secret_env = "ACME_SSO_SECRET"\nallow = ["*@acme.example"]\n'
    )
    oidc = Held(cfg, lake.published, lake.held)

    at = _app(oidc, monkeypatch, "127.0.0.1", token=TOKEN, user={"is_logged_in": False})
    assert sorted(at.dataframe[0].value["run_id"]) == sorted(lake.held)
    assert [b.label for b in at.button if b.key == "oidc_login"] == ["Log in with Acme SSO"]
    assert not [b for b in at.button if b.key == f"approve_{first}"]
    assert not [t for t in at.text_input if t.key == "login_token"]  # the provider replaces the token
    at.sidebar.radio(key="page").set_value("Overview").run()
    assert not at.exception and not at.warning and not at.error, _texts(at)
    assert [m.value for m in at.metric][:2] == ["1", "6"]  # one table, six runs

    at = _app(oidc, monkeypatch, "127.0.0.1")  # AppTest's default user: no is_logged_in, as with no [auth]
    assert any("start it with `wap dashboard`" in w.value for w in at.warning), _texts(at)
    assert not [b for b in at.button if b.key == f"approve_{first}"]

    eve = {"is_logged_in": True, "email": "eve@elsewhere.example", "email_verified": True, "sub": "x-1"}
    at = _app(oidc, monkeypatch, "127.0.0.1", user=eve)  # the provider knows her; wap.toml's allow does not
    assert any("eve@elsewhere.example, who may not approve or reject here" in e.value for e in at.error), _texts(at)
    assert not [b for b in at.button if b.key == f"approve_{first}"]

    dana = {"is_logged_in": True, "email": "dana@acme.example", "email_verified": True, "sub": "acme-7"}
    at = _app(oidc, monkeypatch, "0.0.0.0", user=dana)
    assert any(c.value == "logged in with Acme SSO as dana@acme.example" for c in at.caption), _texts(at)
    at.button(key=f"approve_{first}").click().run()
    at.text_input(key=f"reason_{first}").input("looks right").run()
    assert not [t for t in at.text_input if t.key == f"by_{first}"]  # no name to type: the provider says who
    at.user = {"is_logged_in": False}  # logged out (another tab) before the click
    at.button(key=f"confirm_{first}").click().run()
    assert any("not logged in" in e.value for e in at.error), _texts(at)
    store = RunStore(load_config(str(lake.config)).run_store_url())
    assert store.get(first).status == "awaiting_review"  # type: ignore[union-attr]


def test_approve_one_held_run_and_reject_another(lake: Held, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, bad = lake.held
    before = _main_ids(lake.config)
    assert len(before) == 400
    at = _app(lake, monkeypatch, "127.0.0.1")
    queue = at.dataframe[0].value
    assert list(queue["run_id"]) == [ok, bad] and list(queue["warned checks"]) == ["row_count(max=150)"] * 2
    changes = dict(zip(queue["run_id"], queue["publishing would"], strict=True))
    assert changes[ok].startswith("add 200 row(s)") and "passenger_count: null fraction 0 → " in changes[bad]

    at.button(key=f"approve_{ok}").click().run()
    at.text_input(key=f"reason_{ok}").input("volume confirmed").run()
    at.text_input(key=f"by_{ok}").input("alice").run()
    at.button(key=f"confirm_{ok}").click().run()
    assert not at.exception, at.exception
    assert any(s.value.startswith(f"{ok}: ") for s in at.success), _texts(at)
    assert _main_ids(lake.config) == sorted(before + list(range(1000, 1200)))

    at.button(key=f"reject_{bad}").click().run()
    at.button(key=f"confirm_{bad}").click().run()  # no reason: refused, nothing changes
    assert any(f"Give a reason to reject run {bad}" in e.value for e in at.error), _texts(at)
    store = RunStore(load_config(str(lake.config)).run_store_url())
    assert store.get(bad).status == "awaiting_review"  # type: ignore[union-attr]
    at.text_input(key=f"reason_{bad}").input("null spike in passenger_count").run()
    at.text_input(key=f"by_{bad}").input("bob").run()
    at.button(key=f"confirm_{bad}").click().run()
    assert any(f"run {bad} rejected by bob (dashboard)" in s.value for s in at.success), _texts(at)
    assert _main_ids(lake.config) == sorted(before + list(range(1000, 1200)))

    approved, rejected = store.get(ok), store.get(bad)
    assert approved is not None and rejected is not None
    assert (approved.status, approved.review, approved.review_by, approved.review_reason) == (
        "published",
        "approved",
        "alice (dashboard)",
        "volume confirmed",
    )
    assert (rejected.status, rejected.review_by, rejected.review_reason) == (
        "rejected",
        "bob (dashboard)",
        "null spike in passenger_count",
    )
    assert not rejected.branch_kept
    at.run()
    assert any("no run awaits review" in c.value for c in at.caption)  # the queue is empty now

    # Quality trends of the table: row count per run with the band the anomaly check would have used.
    at.sidebar.radio(key="page").set_value("Table").run()
    assert not at.exception, at.exception
    assert any(s.value == "Quality trends" for s in at.subheader)
    from wapflow.service import review_queue as rq
    from wapflow.service.dashboard import open_sources

    doc = rq.trend(open_sources(lake.config), "nyc.trips")
    points = doc["points"]
    assert [p["value"] for p in points] == [100, 100, 100, 100, 200, 200]
    assert [p["status"] for p in points][-2:] == ["published", "rejected"]
    # No band until 3 published runs; then the check's multiplicative band of a count: median 100 x/÷ its least
    # change of 25% (the MAD is 0) = [100 / 1.25, 125]; 200 is outside.
    assert [p["band_low"] for p in points[:3]] == [None] * 3
    edges = (points[3]["band_low"], points[3]["median"], points[3]["band_high"])
    assert edges == pytest.approx((100 / 1.25, 100, 125))
    assert [p["outside"] for p in points] == [False] * 4 + [True, True]


def test_a_held_merge_shows_its_sample_keys(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A merge held for review: the Review page names a few keys of the rows it would insert, update and delete
    (the same lines as `wap diff`), as plain text."""
    from support.data import changes_file

    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{tmp_path / "lakehouse"}"\ncatalog_name = "rv_keys"\nmaster = "local[2]"\n\n'
        '[tables."crm.c"]\nmode = "merge"\nkey = ["id"]\ndelete_when = "op = \'D\'"\nreview = "on_warn"\n'
        'checks = [{ check = "row_count", max = 2, severity = "warn" }]\n'
    )
    landing = tmp_path / "landing"
    seed = changes_file(landing, "seed.parquet", [(i, f"n{i}", "I") for i in (1, 2)])
    assert wap("run", "crm.c", seed, "--config", str(cfg)).exit_code == 0
    change = changes_file(landing, "c.parquet", [(1, "one", "U"), (2, None, "D"), (10, "ten", "I"), (9, "nine", "I")])
    r = wap("run", "crm.c", change, "--config", str(cfg), "--json")
    assert r.exit_code == EXIT_REVIEW, r.output
    at = _app(Held(cfg, [], [json.loads(r.stdout)["run_id"]]), monkeypatch, "127.0.0.1")
    shown = [t.value for t in at.text]
    assert shown == ["sample keys inserted id: 9, 10", "sample keys updated id: 1", "sample keys deleted id: 2"], shown


def test_a_held_multi_table_run_is_one_decision(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A multi-table run held for review is one item of the queue: its tables listed in it, one Approve for the
    run (a table's own run id cannot be approved alone), which publishes every table together."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from support.data import write_parquet

    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{tmp_path / "lakehouse"}"\ncatalog_name = "rv_group"\nmaster = "local[2]"\n\n'
        '[tables."shop.orders"]\nreview = "always"\nchecks = [{ check = "not_null", column = "order_id" }]\n\n'
        '[tables."shop.lines"]\nchecks = [{ check = "not_null", column = "order_id" }]\n'
    )
    landing = tmp_path / "landing"
    landing.mkdir()
    o = write_parquet(landing / "o.parquet", pa.table({"order_id": pa.array([1, 2], pa.int64())}))
    ln = write_parquet(landing / "l.parquet", pa.table({"order_id": pa.array([1, 1, 2], pa.int64())}))
    r = wap("run-tables", f"shop.orders={o}", f"shop.lines={ln}", "--config", str(cfg), "--json")
    assert r.exit_code == EXIT_REVIEW, r.output
    group = json.loads(r.stdout)["run_id"]
    store = RunStore(load_config(str(cfg)).run_store_url())
    members = [m.run_id for m in store.group(group)]

    at = _app(Held(cfg, [], [group]), monkeypatch, "127.0.0.1")
    queue = at.dataframe[0].value
    assert list(queue["run_id"]) == members and list(queue["multi-table run"]) == [group, group]
    assert list(queue["table"]) == ["shop.orders", "shop.lines"]
    assert any(m.value.startswith(f"**multi-table run** `{group}` · 2 table(s)") for m in at.markdown), _texts(at)
    keys = {b.key for b in at.button}
    assert f"approve_{group}" in keys and not any(k.startswith(f"approve_{m}") for m in members for k in keys)

    at.button(key=f"approve_{group}").click().run()
    at.text_input(key=f"reason_{group}").input("both tables checked").run()
    at.button(key=f"confirm_{group}").click().run()
    assert not at.exception, at.exception
    assert any(s.value.startswith(f"{group}: ") for s in at.success), _texts(at)
    assert {m.status for m in store.group(group)} == {"published"}
    c = load_config(str(cfg))
    wh = Path(c.warehouse_location())
    catalog = SqlCatalog(c.lakehouse.catalog_name, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}")
    assert catalog.load_table("shop.orders").scan().to_arrow().num_rows == 2
    assert catalog.load_table("shop.lines").scan().to_arrow().num_rows == 3
