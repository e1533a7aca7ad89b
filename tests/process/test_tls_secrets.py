"""No catalog token in any alert, lineage event or dashboard page (issue 25 item 4: "no secret in any output,
log, run record, alert or dashboard page").

tests/process/test_tls.py proves the outputs, logs and run store of `wap` processes hold no token. This file
follows the token to the other ways out: a real REST catalog behind wapflow._dev.tls_proxy (https:// with a
throwaway CA, a 401 without `Authorization: Bearer <token>`), the token given as $WAP_REST_TOKEN, a webhook
sink (the local receiver) and an OpenLineage file transport in wap.toml, and the dashboard (Streamlit's AppTest,
in this process) reading the same catalog through the TLS endpoint, with the right token and with a wrong one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.apptest import app_test
from support.catalogs import catalog_config
from support.cli_harness import wap
from support.data import trips_file
from wapflow._dev.tls_proxy import Authority

TOKEN = "rest-token-secret-4e91b7"
WRONG = "wrong-token-secret-8a02d3"


def _page(monkeypatch: pytest.MonkeyPatch, cfg: Path, token: str, page: str, **pick: str) -> list[str]:
    """Every text the dashboard shows on `page` (AppTest), with $WAP_REST_TOKEN = token."""
    import streamlit as st

    monkeypatch.setenv("WAP_CONFIG", str(cfg))
    monkeypatch.setenv("WAP_REST_TOKEN", token)
    monkeypatch.setenv("WAP_DASHBOARD_HOST", "127.0.0.1")
    st.cache_data.clear()
    st.cache_resource.clear()
    try:
        at = app_test(120)
        at.query_params["page"] = page
        for key, value in pick.items():
            at.query_params[key] = value
        at.run()
        assert not at.exception, at.exception
        kinds = (at.title, at.header, at.subheader, at.markdown, at.caption, at.success, at.error, at.warning)
        texts = [str(e.value) for kind in (*kinds, at.info, at.metric, at.code, at.json) for e in kind]
        texts += [json.dumps(df.value.astype(str).to_dict(), default=str) for df in at.dataframe]
        return texts
    finally:
        st.cache_data.clear()
        st.cache_resource.clear()


@pytest.mark.slow  # three `wap run` processes (JVMs)
def test_no_token_in_alerts_lineage_or_dashboard_pages(
    rest_catalog, tls_proxy, tls_authority: Authority, tmp_path: Path, landing: Path, receiver, monkeypatch
) -> None:
    port = int(rest_catalog.url.rsplit(":", 1)[1])
    proxy = tls_proxy(port, token=TOKEN)
    table = "tls_secrets.trips"
    events = tmp_path / "lineage.jsonl"
    extra = (
        f'ca_bundle = "{tls_authority.ca_pem}"\n'
        '\n[alerts.sinks.ops]\ntype = "webhook"\nurl_env = "WAP_T_HOOK"\ntimeout = 2\nmax_attempts = 1\n'
        f'\n[lineage]\ntransport = "file"\npath = "{events}"\n'
    )  # catalog_config's [lakehouse.spark_conf] and [tables.X] follow: TOML's dotted header finds [lakehouse]
    cfg = catalog_config(
        tmp_path / "lake", f'catalog = "rest"\ncatalog_properties = {{ uri = "{proxy.url}" }}\n', table, extra=extra
    )
    env = {"WAP_T_HOOK": receiver.url}

    ok = wap("run", table, str(trips_file(landing, "ok.parquet", 50)), "--config", str(cfg), "--json",
             WAP_REST_TOKEN=TOKEN, **env)  # fmt: skip
    assert ok.code == 0 and ok.doc["status"] == "published", ok.text
    dirty = trips_file(landing, "dirty.parquet", 50, null_rate=0.3, start_id=1000)
    blocked = wap("run", table, str(dirty), "--config", str(cfg), "--json", WAP_REST_TOKEN=TOKEN, **env)
    assert blocked.code != 0 and blocked.doc["status"] == "blocked", blocked.text
    refused = wap("run", table, str(dirty), "--config", str(cfg), "--json", WAP_REST_TOKEN=WRONG, **env)
    assert refused.code == 3 and refused.doc["error"]["message"].startswith("unauthorised"), refused.text
    assert any("invalid bearer token" in r for r in proxy.refused), proxy.refused  # the wrong token was sent

    # The alerts the runs sent (the blocked run's at least) and the lineage events all runs wrote.
    sent = json.dumps([receiver.bodies, receiver.paths, receiver.auth])
    assert any(json.dumps(b).find(blocked.doc["run_id"]) >= 0 for b in receiver.bodies), sent
    lineage = events.read_text()
    types = [json.loads(line)["eventType"] for line in lineage.splitlines()]
    assert types.count("START") >= 2 and "COMPLETE" in types and table in lineage, types  # run ids become UUIDs

    # The dashboard through the same TLS endpoint: the overview, the table, the blocked run; then a wrong token.
    pages = _page(monkeypatch, cfg, TOKEN, "Overview")
    pages += _page(monkeypatch, cfg, TOKEN, "Table", table=table)
    pages += _page(monkeypatch, cfg, TOKEN, "Run", run_id=blocked.doc["run_id"])
    assert any(blocked.doc["run_id"] in t for t in pages), pages
    wrong_pages = _page(monkeypatch, cfg, WRONG, "Table", table=table)
    assert any("unauthorised" in t for t in wrong_pages), wrong_pages

    for secret in (TOKEN, WRONG):
        for where, text in (("alerts", sent), ("lineage", lineage), ("pages", json.dumps(pages + wrong_pages))):
            assert secret not in text, f"{where} holds a token"
        for p in (ok, blocked, refused):
            assert secret not in p.text
        for f in (x for x in (tmp_path / "lake").rglob("*") if x.is_file()):
            assert secret.encode() not in f.read_bytes(), f"{secret} in {f}"
