"""TLS and tokens to the catalog's servers (issue 25 item 4), through a real TLS endpoint on 127.0.0.1.

The session's Iceberg REST server and Nessie server (tests/support/rest_server.py, servers.py) speak plain
HTTP and ask for no token; each test puts wapflow._dev.tls_proxy in front of one (tests/support/tls_proxy.py):
https:// with a certificate signed by a throwaway CA no machine trusts, and a 401 unless the request carries
`Authorization: Bearer <the token>`. Everything else is real: `wap` processes (Spark's JVM with the trust
store wapflow makes with keytool; the no-JVM commands through httpx), read back by PyIceberg through the same
proxy (REST) or by the no-JVM `wap history` (Nessie).

A Spark Connect server (wapflow.lakehouse.connect.ConnectServer) started by the test demands a token itself
(Spark's spark.connect.authenticate.token); the proxy in front of it only terminates TLS (gRPC, ALPN h2).

For each server: the right token and `[lakehouse] ca_bundle` -> a run publishes; a wrong token -> exit 3
"unauthorised" naming the URL and the setting; no ca_bundle -> exit 3 "TLS verification failed" naming the
URL and `ca_bundle`; for REST and Nessie the same from `wap doctor` and the no-JVM commands. No token appears
in any output, log or run store file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from support.catalogs import catalog_config, no_jvm
from support.cli_harness import Proc, Reader, checksum, wap
from support.data import trips_file
from support.spark_cluster import cluster_config, ids
from wapflow._dev.tls_proxy import Authority
from wapflow.config import load_config
from wapflow.lakehouse.connect import ConnectServer
from wapflow.lakehouse.processes import free_port

REST_TOKEN = "rest-token-7f3a9c2e"
NESSIE_TOKEN = "nessie-token-51b8d04c"
CONNECT_TOKEN = "connect-token-9d2e61aa"
WRONG_TOKEN = "wrong-token-c0ffee11"
TOKENS = (REST_TOKEN, NESSIE_TOKEN, CONNECT_TOKEN, WRONG_TOKEN)


def config(folder: Path, lakehouse: str, table: str, ca: Path | None) -> Path:
    return catalog_config(folder, lakehouse, table, extra=f'ca_bundle = "{ca}"\n' if ca is not None else "")


def error(p: Proc) -> dict[str, Any]:
    err: dict[str, Any] = json.loads(p.stdout)["error"]
    return err


def catalog_finding(p: Proc) -> dict[str, str]:
    found = [f for f in json.loads(p.stdout)["findings"] if f["part"] == "catalog"]
    assert len(found) == 1, p.text
    return found[0]


def assert_no_secret(*where: Proc | Path) -> None:
    """Neither token in any output, nor in any file under the given folders (logs, run store, SQLite bytes)."""
    for w in where:
        if isinstance(w, Path):
            for f in (x for x in w.rglob("*") if x.is_file()):
                data = f.read_bytes()
                for token in TOKENS:
                    assert token.encode() not in data, f"{token} in {f}"
        else:
            for token in TOKENS:
                assert token not in w.text, w.text


def assert_unauthorised(err: dict[str, Any], url: str, setting: str) -> None:
    assert (err["kind"], err["exit_code"]) == ("environment", 3), err
    assert err["message"].startswith("unauthorised") and url in err["message"], err
    assert setting in err["hint"], err


def assert_untrusted(err: dict[str, Any], url: str) -> None:
    assert (err["kind"], err["exit_code"]) == ("environment", 3), err
    assert err["message"].startswith("TLS verification failed for ") and url in err["message"], err
    assert "[lakehouse] ca_bundle" in err["hint"], err


@pytest.mark.slow  # three `wap run` processes (JVMs)
def test_rest_catalog_over_tls_with_a_token(
    rest_catalog, tls_proxy, tls_authority: Authority, tmp_path, landing, monkeypatch
):
    from pyiceberg.catalog.rest import RestCatalog

    port = int(rest_catalog.url.rsplit(":", 1)[1])
    proxy = tls_proxy(port, token=REST_TOKEN)
    table = "tls_rest.trips"
    src = trips_file(landing, "batch.parquet", 60)

    def lakehouse(token: str | None) -> str:
        props = f'uri = "{proxy.url}"' + (f', token = "{token}"' if token else "")
        return f'catalog = "rest"\ncatalog_properties = {{ {props} }}\n'

    good = config(tmp_path / "good", lakehouse(REST_TOKEN), table, tls_authority.ca_pem)
    # The wrong token comes from $WAP_REST_TOKEN (the way to keep it out of wap.toml).
    wrong = config(tmp_path / "wrong", lakehouse(None), table, tls_authority.ca_pem)
    untrusted = config(tmp_path / "untrusted", lakehouse(REST_TOKEN), table, None)

    # Right token, CA trusted: Spark's REST client (its JVM trusts the CA through wapflow's trust store) publishes.
    run = wap("run", table, str(src), "--config", str(good), "--json")
    assert run.code == 0 and run.doc["status"] == "published", run.text
    assert proxy.forwarded > 0 and proxy.refused == [], proxy.refused
    # An independent reader through the same TLS endpoint and token: the run's rows are on main.
    # PyIceberg's `ssl.cabundle` (a nested property when given in code); requests lets $REQUESTS_CA_BUNDLE (or
    # $CURL_CA_BUNDLE) win over a session's own CA bundle, so they must not be set for this reader.
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    reader = RestCatalog("reader", uri=proxy.url, token=REST_TOKEN, ssl={"cabundle": str(tls_authority.ca_pem)})
    t = reader.load_table(table)
    assert t.current_snapshot() is not None and t.current_snapshot().snapshot_id == run.doc["snapshot_id"]
    assert checksum(t.scan().to_arrow().to_pylist(), "trip_id") == checksum(pq.read_table(src).to_pylist(), "trip_id")
    # The no-JVM path (httpx with the same CA bundle and token).
    history = no_jvm("history", table, "--config", str(good), "--json")
    assert history.code == 0, history.text
    assert history.doc["snapshots"][0]["snapshot_id"] == run.doc["snapshot_id"]
    doctor = wap("doctor", "--config", str(good), "--json")
    finding = catalog_finding(doctor)
    assert finding["status"] == "ok" and "TLS verified" in finding["detail"], doctor.text

    # A wrong token: exit 3, "unauthorised", the URL and the setting to check; on the Spark and no-JVM paths.
    refused_before = len(proxy.refused)
    bad = wap("run", table, str(src), "--config", str(wrong), "--json", WAP_REST_TOKEN=WRONG_TOKEN)
    assert bad.code == 3 and bad.doc["status"] == "failed", bad.text
    assert_unauthorised(error(bad), proxy.url, "catalog_properties.token or $WAP_REST_TOKEN")
    bad_history = no_jvm("history", table, "--config", str(wrong), "--json", WAP_REST_TOKEN=WRONG_TOKEN)
    assert bad_history.code == 3, bad_history.text
    assert_unauthorised(error(bad_history), proxy.url, "catalog_properties.token or $WAP_REST_TOKEN")
    bad_doctor = wap("doctor", "--config", str(wrong), "--json", WAP_REST_TOKEN=WRONG_TOKEN)
    finding = catalog_finding(bad_doctor)
    assert bad_doctor.code == 3 and finding["status"] == "fail", bad_doctor.text
    assert finding["detail"].startswith("unauthorised") and proxy.url in finding["detail"], finding
    assert len(proxy.refused) > refused_before
    assert all("invalid bearer token" in r for r in proxy.refused[refused_before:]), proxy.refused  # it was sent

    # No ca_bundle: the server's certificate is not trusted; one clear error naming the URL and the setting.
    forwarded_before = proxy.forwarded
    tls = wap("run", table, str(src), "--config", str(untrusted), "--json")
    assert tls.code == 3 and tls.doc["status"] == "failed", tls.text
    assert_untrusted(error(tls), proxy.url)
    tls_history = no_jvm("branches", table, "--config", str(untrusted), "--json")
    assert tls_history.code == 3, tls_history.text
    assert_untrusted(error(tls_history), proxy.url)
    tls_doctor = wap("doctor", "--config", str(untrusted), "--json")
    finding = catalog_finding(tls_doctor)
    assert tls_doctor.code == 3 and finding["status"] == "fail", tls_doctor.text
    assert finding["detail"].startswith("TLS verification failed") and "ca_bundle" in finding["fix"], finding
    assert proxy.forwarded == forwarded_before  # nothing got past the handshake

    # Main is still the first run's, and no token is in any output, log or run store.
    assert reader.load_table(table).current_snapshot().snapshot_id == run.doc["snapshot_id"]
    assert_no_secret(bad, bad_history, bad_doctor, tls, tls_history, tls_doctor, run, history, doctor)
    assert_no_secret(tmp_path / "good" / "lake", tmp_path / "wrong" / "lake", tmp_path / "untrusted" / "lake")


@pytest.mark.slow  # `wap run` processes (JVMs)
def test_nessie_over_tls_with_a_token(nessie_server, tls_proxy, tls_authority: Authority, tmp_path, landing):
    proxy = tls_proxy(nessie_server.port, token=NESSIE_TOKEN)
    table = "tls_nessie.trips"
    src = trips_file(landing, "batch.parquet", 40)
    lakehouse = f'catalog = "nessie"\nnessie_uri = "{proxy.url}/api/v2"\n'
    good = config(tmp_path / "good", lakehouse, table, tls_authority.ca_pem)
    untrusted = config(tmp_path / "untrusted", lakehouse, table, None)
    api = f"{proxy.url}/api/v2"

    # Right token ($WAP_NESSIE_TOKEN), CA trusted: the Nessie client and Spark's NessieCatalog publish over TLS.
    run = wap("run", table, str(src), "--config", str(good), "--json", WAP_NESSIE_TOKEN=NESSIE_TOKEN)
    assert run.code == 0 and run.doc["status"] == "published", run.text
    assert proxy.forwarded > 0 and proxy.refused == [], proxy.refused
    history = no_jvm("history", table, "--config", str(good), "--json", WAP_NESSIE_TOKEN=NESSIE_TOKEN)
    assert history.code == 0, history.text
    assert history.doc["snapshots"][0]["snapshot_id"] == run.doc["snapshot_id"]
    assert history.doc["snapshots"][0]["total_rows"] == 40
    doctor = wap("doctor", "--config", str(good), "--json", WAP_NESSIE_TOKEN=NESSIE_TOKEN)
    finding = catalog_finding(doctor)
    assert finding["status"] == "ok" and "TLS verified" in finding["detail"], doctor.text

    # A wrong token: exit 3 before anything is written, "unauthorised", the URL and where the token is set.
    bad = wap("run", table, str(src), "--config", str(good), "--json", WAP_NESSIE_TOKEN=WRONG_TOKEN)
    assert bad.code == 3 and bad.doc["status"] == "failed", bad.text
    assert_unauthorised(error(bad), api, "$WAP_NESSIE_TOKEN")
    bad_history = no_jvm("history", table, "--config", str(good), "--json", WAP_NESSIE_TOKEN=WRONG_TOKEN)
    assert bad_history.code == 3, bad_history.text
    assert_unauthorised(error(bad_history), api, "nessie_token")
    bad_doctor = wap("doctor", "--config", str(good), "--json")  # no token at all
    finding = catalog_finding(bad_doctor)
    assert bad_doctor.code == 3 and finding["detail"].startswith("unauthorised"), bad_doctor.text
    assert len(proxy.refused) >= 3

    # No ca_bundle: TLS verification fails, named with the URL and the setting.
    tls = wap("run", table, str(src), "--config", str(untrusted), "--json", WAP_NESSIE_TOKEN=NESSIE_TOKEN)
    assert tls.code == 3 and tls.doc["status"] == "failed", tls.text
    assert_untrusted(error(tls), api)
    tls_doctor = wap("doctor", "--config", str(untrusted), "--json", WAP_NESSIE_TOKEN=NESSIE_TOKEN)
    finding = catalog_finding(tls_doctor)
    assert tls_doctor.code == 3 and finding["detail"].startswith("TLS verification failed"), tls_doctor.text

    after = no_jvm("history", table, "--config", str(good), "--json", WAP_NESSIE_TOKEN=NESSIE_TOKEN)
    assert [s["snapshot_id"] for s in after.doc["snapshots"]] == [s["snapshot_id"] for s in history.doc["snapshots"]]
    assert_no_secret(run, history, doctor, bad, bad_history, bad_doctor, tls, tls_doctor)
    assert_no_secret(tmp_path / "good" / "lake", tmp_path / "untrusted" / "lake")


@pytest.fixture
def connect_with_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ConnectServer]:
    """A real Spark Connect server that demands CONNECT_TOKEN (Spark's own check, spark.connect.authenticate.token,
    given through $SPARK_CONNECT_AUTHENTICATE_TOKEN, which the server reads); the variable is gone from this
    process once it runs, so each client below gets the token only as the case says."""
    folder = tmp_path / "server"
    cfg = load_config(str(cluster_config(folder, "local[2]", catalog="boot", tables={})))
    for k in ("SPARK_REMOTE", "SPARK_CONNECT_MODE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SPARK_CONNECT_AUTHENTICATE_TOKEN", CONNECT_TOKEN)
    server = ConnectServer(cfg, free_port(), record=False)
    server.start()
    monkeypatch.delenv("SPARK_CONNECT_AUTHENTICATE_TOKEN")
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.spark
@pytest.mark.slow  # a Connect server (JVM) and thin `wap run` clients
def test_spark_connect_over_tls_with_a_token(
    connect_with_token: ConnectServer, tls_proxy, tls_authority: Authority, tmp_path: Path, landing
):
    # gRPC over TLS: the proxy only terminates TLS (ALPN h2); the token is checked by the Connect server itself.
    proxy = tls_proxy(connect_with_token.port, mode="tcp")
    url = f"sc://127.0.0.1:{proxy.port}/;use_ssl=true"
    ca = f'ca_bundle = "{tls_authority.ca_pem}"\n'
    table = "cl.pub"
    src = trips_file(landing, "batch.parquet", 50)

    def config(name: str, master: str, lakehouse: str = ca) -> Path:
        return cluster_config(tmp_path / name, master, catalog="conn", tables={table: ""}, lakehouse=lakehouse)

    good = config("good", url)
    wrong = config("wrong", f"{url};token={WRONG_TOKEN}")  # a token in the URL: shown as ;token=***
    untrusted = config("untrusted", url, lakehouse="")

    # Right token ($SPARK_CONNECT_AUTHENTICATE_TOKEN) and CA: a run publishes through the TLS endpoint.
    run = wap("run", table, str(src), "--config", str(good), "--json", SPARK_CONNECT_AUTHENTICATE_TOKEN=CONNECT_TOKEN)
    assert run.code == 0 and run.doc["status"] == "published", run.text
    assert proxy.forwarded > 0
    reader = Reader(tmp_path / "good", "conn")
    assert ids(reader.rows(table)) == ids(pq.read_table(src).to_pylist())

    # A wrong token (in the URL), then none at all: the server refuses it; exit 3 "unauthorised" with the URL.
    bad = wap("run", table, str(src), "--again", "--config", str(wrong), "--json")
    assert bad.code == 3, bad.text
    assert_unauthorised(error(bad), f"{url};token=***", "$SPARK_CONNECT_AUTHENTICATE_TOKEN")
    missing = wap("run", table, str(src), "--again", "--config", str(good), "--json")
    assert missing.code == 3, missing.text
    assert_unauthorised(error(missing), url, "$SPARK_CONNECT_AUTHENTICATE_TOKEN")

    # No ca_bundle: the certificate is not trusted; named at once (no retrying of the handshake), nothing relayed.
    forwarded_before = proxy.forwarded
    t0 = time.monotonic()
    tls = wap(
        "run",
        table,
        str(src),
        "--again",
        "--config",
        str(untrusted),
        "--json",
        SPARK_CONNECT_AUTHENTICATE_TOKEN=CONNECT_TOKEN,
    )
    took = time.monotonic() - t0
    assert tls.code == 3, tls.text
    assert_untrusted(error(tls), url)
    assert took < 30, took
    assert proxy.forwarded == forwarded_before

    # main is still the first run's, and no token is in any output, log or run store.
    assert ids(reader.rows(table)) == ids(pq.read_table(src).to_pylist())
    assert_no_secret(run, bad, missing, tls)
    assert_no_secret(*(tmp_path / name / "lakehouse" for name in ("good", "wrong", "untrusted", "server")))


def test_the_java_trust_store_holds_the_jdks_cas_and_the_bundle(tls_authority: Authority, tmp_path, monkeypatch):
    """Made by the JDK's keytool (Java's PKCS12 trusts only entries keytool marks), once per bundle and JDK."""
    import subprocess

    from wapflow.lakehouse import tls

    monkeypatch.setenv("WAP_JARS_DIR", str(tmp_path / "cache" / "jars"))
    store = tls.truststore(tls_authority.ca_pem)
    assert store.parent == tmp_path / "cache" / "truststores" and store.suffix == ".p12"
    listing = subprocess.run(
        [
            tls._keytool(),
            "-list",
            "-keystore",
            str(store),
            "-storepass",
            tls.TRUSTSTORE_PASSWORD,
            "-storetype",
            "PKCS12",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "wapflow-ca-0, " in listing and "trustedCertEntry" in listing
    assert listing.count("trustedCertEntry") > 50  # the JDK's public CAs stay trusted (S3, Maven, ...)
    made = store.stat().st_mtime_ns
    assert tls.truststore(tls_authority.ca_pem) == store and store.stat().st_mtime_ns == made  # cached
    assert list(store.parent.iterdir()) == [store]  # no temporary files left
