"""`wap run-tables` on the catalogs other than the embedded one (issue 45): a group of two tables published in one
commit on a JDBC catalog on PostgreSQL (one database transaction, tests/support/pg_server.py) and on Iceberg's
own REST server fixture (POST /v1/{prefix}/transactions/commit, tests/support/rest_server.py), read back by
PyIceberg's own clients of those catalogs; a blocked group leaves every main as it was; a REST server whose
GET /v1/config does not list the multi-table commit is refused before anything is written.

The REST runs go through a small loopback proxy in front of the fixture (EndpointProxy below) that records every
request and can take the multi-table commit out of the server's endpoint list: a server that does not offer it.
One group's publish meets other writers on the server: a cherry-pick over REST, and a commit the server refuses.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest

from support.cli_harness import unique_catalog, wap
from support.data import write_parquet
from support.local_http import QuietHandler, serve
from support.pg_server import PASSWORD
from wapflow._dev.pg_server import Urls
from wapflow.lakehouse.group_commit import TRANSACTIONS_ENDPOINT

RUN_ID_PROP = "wapflow.run-id"  # the snapshot property naming the run that wrote it

TABLES = """\
[tables."{ns}.orders"]
checks = [{{ check = "not_null", column = "order_id" }}, {{ check = "unique", columns = ["order_id"] }}]

[tables."{ns}.lines"]
checks = [
  {{ check = "not_null", column = "amount" }},
  {{ check = "foreign_key", column = "order_id", table = "{ns}.orders" }},
]
"""


def orders(landing: Path, name: str, ids: list[int]) -> str:
    t = pa.table({"order_id": pa.array(ids, pa.int64()), "total": pa.array([10.0 * i for i in ids])})
    return str(write_parquet(landing / name, t))


def lines(landing: Path, name: str, order_ids: list[int]) -> str:
    t = pa.table(
        {
            "order_id": pa.array(order_ids, pa.int64()),
            "line": pa.array(range(len(order_ids)), pa.int64()),
            "amount": pa.array([10.0 * i for i in order_ids]),
        }
    )
    return str(write_parquet(landing / name, t))


def config(folder: Path, catalog: str, catalog_lines: str, ns: str) -> str:
    """A wap.toml as a user writes it: the catalog's lines, a local warehouse (wapflow's state, and the
    tables' on a JDBC catalog), the two tables' checks."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = folder / "wap.toml"
    cfg.write_text(
        textwrap.dedent(
            f"""\
            [lakehouse]
            warehouse = "{folder / "lake"}"
            catalog_name = "{catalog}"
            master = "local[2]"
            driver_memory = "1g"
            """
        )
        + catalog_lines
        + '\n[lakehouse.spark_conf]\n"spark.sql.shuffle.partitions" = "2"\n\n'
        + TABLES.format(ns=ns)
    )
    return str(cfg)


def main_of(table: Any) -> tuple[int | None, int]:
    """main's snapshot id and its row count."""
    snap = table.current_snapshot()
    return (None, 0) if snap is None else (snap.snapshot_id, len(table.scan().to_arrow()))


def assert_published_together(reader: Any, ns: str, doc: dict[str, Any], rows: dict[str, int]) -> None:
    """Every table's main is its run's snapshot (the run id on it) with the rows the run brought; no branch left."""
    assert doc["status"] == "published" and "in one commit" in doc["message"], doc
    by_table = {r["table"]: r for r in doc["tables"]}
    assert set(by_table) == {f"{ns}.orders", f"{ns}.lines"}
    for name, want in rows.items():
        table = reader.load_table(f"{ns}.{name}")
        snap = table.current_snapshot()
        run = by_table[f"{ns}.{name}"]
        assert snap is not None and snap.snapshot_id == run["snapshot_id"], (name, run)
        assert snap.summary.additional_properties.get(RUN_ID_PROP) == run["run_id"]
        assert len(table.scan().to_arrow()) == want
        assert set(table.metadata.refs) == {"main"}, table.metadata.refs


# --- a JDBC catalog on PostgreSQL ------------------------------------------------------------------------


@pytest.mark.slow  # two `wap run-tables` processes (each a JVM)
def test_a_group_publishes_in_one_commit_and_a_blocked_group_leaves_both_mains_on_a_postgresql_catalog(
    tmp_path: Path, landing: Path, pg_db: Urls
):
    from pyiceberg.catalog.sql import SqlCatalog

    ns, catalog = "shop", unique_catalog("pggroup")
    props = f'uri = "{pg_db.jdbc}", "jdbc.user" = "{pg_db.user}", "jdbc.password" = "{pg_db.password}"'
    cfg = config(
        tmp_path / "project",
        catalog,
        f'catalog = "jdbc"\ncatalog_properties = {{ {props}, "jdbc.schema-version" = "V1" }}\n',
        ns,
    )
    reader = SqlCatalog(catalog, uri=pg_db.sqlalchemy, warehouse=f"file://{tmp_path / 'project' / 'lake'}")

    # 1. lines first on the command line: the foreign key still reads the run's orders (written first).
    ok = wap(
        "run-tables",
        f"{ns}.lines={lines(landing, 'l1.parquet', [1, 1, 2])}",
        f"{ns}.orders={orders(landing, 'o1.parquet', [1, 2])}",
        "--config",
        cfg,
        "--json",
        timeout=600,
    )
    assert ok.code == 0, ok.text
    assert_published_together(reader, ns, ok.doc, {"orders": 2, "lines": 3})
    assert PASSWORD not in ok.text
    heads = {name: main_of(reader.load_table(f"{ns}.{name}")) for name in ("orders", "lines")}

    # 2. A line whose order is in neither main nor the run: the group is blocked, no main moves (orders' rows
    #    passed their own checks and stay off main too), every table's rows kept on the run's branch.
    blocked = wap(
        "run-tables",
        f"{ns}.orders={orders(landing, 'o2.parquet', [3, 4])}",
        f"{ns}.lines={lines(landing, 'l2.parquet', [3, 9])}",
        "--config",
        cfg,
        "--json",
        timeout=600,
    )
    assert blocked.code == 1, blocked.text
    doc = blocked.doc
    assert doc["status"] == "blocked" and "no table changed on main" in doc["message"], doc
    assert "foreign_key" in doc["message"]
    assert {name: main_of(reader.load_table(f"{ns}.{name}")) for name in ("orders", "lines")} == heads
    for name in ("orders", "lines"):
        table = reader.load_table(f"{ns}.{name}")
        assert set(table.metadata.refs) == {"main", doc["branch"]}
        assert len(table.scan().use_ref(doc["branch"]).to_arrow()) == heads[name][1] + 2


# --- an Iceberg REST catalog ------------------------------------------------------------------------------


class EndpointProxy:
    """An HTTP proxy on 127.0.0.1 in front of a REST catalog server: every request forwarded as it came and
    recorded ("METHOD /path"); `without` endpoints are taken out of GET /v1/config's `endpoints` list."""

    def __init__(self, upstream: str, without: tuple[str, ...] = ()) -> None:
        self.upstream, self.without = upstream, without
        self.seen: list[str] = []
        proxy = self

        class Handler(QuietHandler):
            def forward(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size) if size else None
                proxy.seen.append(f"{self.command} {self.path.split('?', 1)[0]}")
                keep = {"content-type", "authorization", "accept", "x-client-version", "user-agent"}
                headers = {k: v for k, v in self.headers.items() if k.lower() in keep}
                with httpx.Client(timeout=60) as client:
                    r = client.request(self.command, proxy.upstream + self.path, content=body, headers=headers)
                out = r.content
                if self.command == "GET" and self.path.split("?", 1)[0] == "/v1/config" and r.status_code == 200:
                    doc = r.json()
                    doc["endpoints"] = [e for e in doc.get("endpoints") or [] if e not in proxy.without]
                    out = json.dumps(doc).encode()
                self.send_response(r.status_code)
                if "content-type" in r.headers:
                    self.send_header("Content-Type", r.headers["content-type"])
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(out)

            do_GET = do_POST = do_HEAD = do_DELETE = do_PUT = forward

        self.server, _ = serve(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def rest_proxy(rest_catalog: Any) -> Iterator[Any]:
    """`rest_proxy(without=(...))`: a started EndpointProxy in front of the session's REST server."""
    started: list[EndpointProxy] = []

    def start(without: tuple[str, ...] = ()) -> EndpointProxy:
        started.append(EndpointProxy(rest_catalog.url, without))
        return started[-1]

    yield start
    for p in started:
        p.close()


def rest_lines(uri: str) -> str:
    return f'catalog = "rest"\ncatalog_properties = {{ uri = "{uri}" }}\n'


def test_the_rest_fixture_lists_the_multi_table_commit(rest_catalog):
    """What the REST path of wapflow.lakehouse.group_commit relies on: Iceberg's own server lists the endpoint,
    in the form wapflow compares (PyIceberg's "METHOD path" string)."""
    endpoints = httpx.get(f"{rest_catalog.url}/v1/config", timeout=30).json()["endpoints"]
    assert TRANSACTIONS_ENDPOINT in endpoints


@pytest.mark.slow  # a `wap run-tables` process (a JVM)
def test_a_group_publishes_in_one_multi_table_commit_on_a_rest_catalog(rest_catalog, rest_proxy, tmp_path, landing):
    from pyiceberg.catalog.rest import RestCatalog

    ns = "grp_rest"
    proxy = rest_proxy()  # passes everything: it counts the requests
    cfg = config(tmp_path / "project", unique_catalog("restgroup"), rest_lines(proxy.url), ns)
    ok = wap(
        "run-tables",
        f"{ns}.orders={orders(landing, 'o.parquet', [1, 2])}",
        f"{ns}.lines={lines(landing, 'l.parquet', [1, 2, 2])}",
        "--config",
        cfg,
        "--json",
        timeout=600,
    )
    assert ok.code == 0, ok.text
    assert_published_together(RestCatalog("reader", uri=rest_catalog.url), ns, ok.doc, {"orders": 2, "lines": 3})
    # Iceberg's reference server commits the request's tables one by one: the report says its atomicity is not known.
    assert "is not known to commit a group atomically" in ok.doc["message"], ok.doc["message"]
    # Both mains moved by one request: the multi-table commit, and no table's own commit after the audit.
    commits = [s for s in proxy.seen if s.endswith("/transactions/commit")]
    assert commits == ["POST /v1/transactions/commit"], proxy.seen
    after = proxy.seen[proxy.seen.index(commits[0]) + 1 :]
    assert not [s for s in after if s.startswith("POST")], after


def test_a_rest_server_without_multi_table_commits_is_refused_before_anything_is_written(
    rest_catalog, rest_proxy, tmp_path, landing
):
    """The same server behind a proxy whose GET /v1/config leaves the multi-table commit out: `wap run-tables`
    exits 2 naming the server and the endpoint; an existing table keeps its main and gets no branch, a new one
    is not created, the files stay; the server saw nothing but GET /v1/config."""
    from pyiceberg.catalog.rest import RestCatalog

    ns = "grp_refused"
    server = RestCatalog("writer", uri=rest_catalog.url)
    server.create_namespace(ns)
    existing = server.create_table(f"{ns}.orders", pa.schema([("order_id", pa.int64()), ("total", pa.float64())]))
    existing.append(pa.table({"order_id": pa.array([1], pa.int64()), "total": pa.array([10.0])}))
    before = main_of(server.load_table(f"{ns}.orders"))

    proxy = rest_proxy(without=(TRANSACTIONS_ENDPOINT,))
    assert TRANSACTIONS_ENDPOINT not in httpx.get(f"{proxy.url}/v1/config", timeout=30).json()["endpoints"]
    proxy.seen.clear()
    cfg = config(tmp_path / "project", unique_catalog("restnogroup"), rest_lines(proxy.url), ns)
    o, li = orders(landing, "o.parquet", [2]), lines(landing, "l.parquet", [2])
    for json_flag in (("--json",), ()):
        r = wap("run-tables", f"{ns}.orders={o}", f"{ns}.lines={li}", "--config", cfg, *json_flag, timeout=300)
        assert r.code == 2, r.text
        assert "Traceback" not in r.stderr
        message = r.doc["error"]["message"] if json_flag else " ".join(r.stderr.split())  # as wrapped
        assert f"the REST catalog at {proxy.url}" in message, r.text
        assert TRANSACTIONS_ENDPOINT in message, r.text
    assert set(proxy.seen) == {"GET /v1/config"}, proxy.seen
    table = server.load_table(f"{ns}.orders")
    assert main_of(table) == before and set(table.metadata.refs) == {"main"}
    assert not server.table_exists(f"{ns}.lines")
    assert Path(o).exists() and Path(li).exists()


def test_on_a_rest_catalog_a_moved_main_is_cherry_picked_and_a_refused_commit_is_planned_again(
    rest_catalog, spark, tmp_path, landing
):
    """The group's steps on the tests' shared session, then its publish (wapflow.lakehouse.group_commit) against
    other writers on the server: orders' main moved after the audit (its change is added on top: a cherry-pick
    over REST), and lines' moves between the plan and the commit, so the server refuses the commit (409: no table
    moved, checked inside the attempt) and the group is planned again on the new heads and committed."""
    from pyiceberg.catalog.rest import RestCatalog

    from wapflow.config import load_config
    from wapflow.lakehouse.group_commit import RestGroupCommit, publish_group
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.pipeline import group_result, tables_group
    from wapflow.pipeline.driver import drive
    from wapflow.pipeline.group import Group, apply
    from wapflow.pipeline.steps.publish import slices

    ns = "grp_moved"
    cfg = config(tmp_path / "project", unique_catalog("restmoved"), rest_lines(rest_catalog.url), ns)
    lh = Lakehouse(load_config(cfg), spark=spark)
    reader = RestCatalog("reader", uri=rest_catalog.url)
    seed_state = tables_group(
        lh,
        [
            (f"{ns}.orders", [orders(landing, "o0.parquet", [100])]),
            (f"{ns}.lines", [lines(landing, "l0.parquet", [100])]),
        ],
    )
    seed = group_result(lh, drive(lh, seed_state))
    assert seed.status == "published", seed.message

    state = tables_group(
        lh,
        [
            (f"{ns}.orders", [orders(landing, "o1.parquet", [1, 2])]),
            (f"{ns}.lines", [lines(landing, "l1.parquet", [1, 2])]),
        ],
    )
    for step in ("prepare", "write", "audit"):
        state = apply(lh, state, step)
        assert state.status == "running", state.message
    run = Group(lh, state)
    reader.load_table(f"{ns}.orders").append(
        pa.table({"order_id": pa.array([7], pa.int64()), "total": pa.array([70.0])})
    )

    committer = RestGroupCommit(lambda: RestCatalog("group", uri=rest_catalog.url), rest_catalog.url)
    real_commit = committer.commit
    attempts: list[dict[str, int | None]] = []

    def heads() -> dict[str, int | None]:
        return {t: main_of(reader.load_table(f"{ns}.{t}"))[0] for t in ("orders", "lines")}

    def commit_after_another_writer(moves: Any) -> None:
        if not attempts:  # lines' main moves after the plan read it
            reader.load_table(f"{ns}.lines").append(
                pa.table(
                    {
                        "order_id": pa.array([100], pa.int64()),
                        "line": pa.array([5], pa.int64()),
                        "amount": pa.array([1.0]),
                    }
                )
            )
        before = heads()
        try:
            real_commit(moves)
        finally:
            attempts.append(heads())
            if len(attempts) == 1:
                assert attempts[0] == before  # the refused commit moved no table: orders neither

    committer.commit = commit_after_another_writer  # type: ignore[method-assign]
    done = publish_group(committer, run.branch, run.run_id, [sl for r in run.members for sl in slices(r)])
    assert len(attempts) == 2 and done["method"] == "cherry_pick"
    # Every writer's rows once: the seed, the other writer's and the run's.
    for name, want in (("orders", [1, 2, 7, 100]), ("lines", [1, 2, 100, 100])):
        table = reader.load_table(f"{ns}.{name}")
        assert sorted(table.scan().to_arrow()["order_id"].to_pylist()) == want, name
        assert set(table.metadata.refs) == {"main"}
        assert done["heads"][f"{ns}.{name}"] == table.metadata.current_snapshot_id
        snap = table.current_snapshot()
        assert snap is not None and snap.summary.additional_properties.get(RUN_ID_PROP, "").startswith(run.run_id)
