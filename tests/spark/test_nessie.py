"""WAP on catalog-level branches against a real Nessie server (runner jar, RocksDB store, 127.0.0.1).

The server is started once per test session (tests/support/servers.py `nessie_server`); every test uses its
own namespace, warehouse folder and Spark catalog name, so tests do not see each other's tables.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from support.data import TRIPS_CHECKS, changes_file, make_config, trips_file, write_parquet
from wapflow.cli import app
from wapflow.config import LineageConfig, TableConfig
from wapflow.demo.generate import generate_trips
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.lakehouse.nessie import NessieClient
from wapflow.pipeline import WapRun, run_group, run_wap
from wapflow.pipeline.lineage import run_uuid
from wapflow.sql.identifiers import TableName

pytestmark = pytest.mark.spark
_ns = itertools.count()


@pytest.fixture
def ns() -> str:
    return f"nessie_t{next(_ns)}"


@pytest.fixture
def nessie_lh(spark: Any, tmp_path: Path, nessie_server: Any) -> Callable[..., Lakehouse]:
    def make(tables: dict[str, Any] | None = None, **lakehouse: Any) -> Lakehouse:
        lakehouse.setdefault("nessie_uri", nessie_server.url)
        cfg = make_config(tmp_path, tables, catalog="nessie", **lakehouse)
        lh = Lakehouse(cfg, spark=spark)
        if main_hash(lh) == lh.nessie.no_ancestor_hash():
            # Give the shared server's repository its first commit, so every test sees real merges.
            seed = write_parquet(tmp_path / "seed.parquet", pa.table({"id": [1]}))
            assert run_wap(lh, "seed.first", [str(seed)], no_checks=True).status == "published"
        return lh

    return make


def test_first_publish_into_an_empty_repository(spark, tmp_path, landing):
    """Nessie cannot merge into a repository without commits: main is moved to the branch instead."""
    from wapflow._dev.nessie_server import NessieServer

    with NessieServer(tmp_path / "empty-nessie") as server:
        tables = {"first.trips": {"checks": []}}  # about the first commit, not checks
        lh = Lakehouse(make_config(tmp_path, tables, catalog="nessie", nessie_uri=server.url), spark=spark)
        empty = lh.nessie.no_ancestor_hash()
        assert main_hash(lh) == empty
        res = run_wap(lh, "first.trips", [str(trips_file(landing, "a.parquet", 20))])
        assert res.status == "published", res.message
        assert lh.tables.row_count(TableName.parse("first.trips")) == 20
        assert main_hash(lh) != empty and lh.nessie.get_reference(res.branch) is None


def main_hash(lh: Lakehouse) -> str:
    ref = lh.nessie.get_reference("main")
    assert ref is not None
    return ref.hash


def test_single_table_wap_on_a_nessie_branch(nessie_lh, landing, ns):
    table = f"{ns}.trips"
    lh = nessie_lh({table: {"checks": TRIPS_CHECKS}})
    before = main_hash(lh)
    res = run_wap(lh, table, [str(trips_file(landing, "clean.parquet", 300))])
    assert res.status == "published", res.message
    assert res.exit_code == 0 and res.published_via == "merge"
    t = TableName.parse(table)
    assert lh.tables.row_count(t) == 300
    assert lh.tables.head(t) == res.snapshot_id
    assert lh.tables.snapshots(t)[res.snapshot_id].run_id == res.run_id
    # One merge commit on main, carrying the run id; the branch is gone.
    log = lh.nessie.log("main", limit=5)
    assert log[0].run_id == res.run_id and log[0].properties["wapflow.tables"] == table
    assert before in {c.hash for c in log} and main_hash(lh) != before
    assert lh.nessie.get_reference(res.branch) is None

    # A dirty file: blocked, main's hash unchanged, the Nessie branch kept with the rows.
    dirty = trips_file(landing, "dirty.parquet", 200, null_rate=0.05, start_id=1000, seed=3)
    before = main_hash(lh)
    bad = run_wap(lh, table, [str(dirty)])
    assert bad.status == "blocked" and bad.exit_code == 1, bad.message
    assert [c["check"] for c in bad.checks if c["status"] == "failed"] == ["not_null"]
    assert main_hash(lh) == before
    assert lh.tables.row_count(t) == 300
    assert lh.nessie.get_reference(bad.branch) is not None
    on_branch = lh.iceberg.tables_for(bad.branch)
    assert on_branch.row_count(t) == 500
    # The reproduction SQL printed in the report reads the kept branch from a plain session.
    failed = next(c for c in bad.checks if c["status"] == "failed")
    assert lh.spark.sql(failed["sql"]).count() == 10
    # Re-running the published run id only cleans up.
    again = run_wap(lh, table, [str(landing / "clean.parquet")], run_id=res.run_id)
    assert again.status == "published" and again.published_via == "already"
    assert lh.tables.row_count(t) == 300


def test_a_landed_file_is_adopted_on_the_nessie_branch_and_reaches_main_with_the_merge(nessie_lh, landing, ns):
    """A parquet file whose columns are the table's is copied as it is into the table and committed on the run's
    Nessie branch, not rewritten: main's data files after the merge are the landed bytes. A blocked one stays on
    its branch; main's files are unchanged."""
    import hashlib

    def files(lh: Lakehouse, view: Any, t: TableName) -> dict[str, str]:
        rows = lh.spark.sql(f"SELECT file_path FROM {view.ident(t)}.files").collect()
        paths = [Path(r.file_path.removeprefix("file:")) for r in rows]
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}

    table = f"{ns}.trips"
    t = TableName.parse(table)
    lh = nessie_lh({table: {"checks": TRIPS_CHECKS}})
    first, second = trips_file(landing, "a.parquet", 300), trips_file(landing, "b.parquet", 100, start_id=900)
    runs = [run_wap(lh, table, [str(f)]) for f in (first, second)]
    assert [r.published_via for r in runs] == ["merge", "merge"], [r.message for r in runs]
    digest = {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in (first, second)}
    assert files(lh, lh.tables, t) == {
        f"{runs[0].run_id}-adopted-00000.parquet": digest[first],
        f"{runs[1].run_id}-adopted-00000.parquet": digest[second],
    }
    assert lh.tables.row_count(t) == 400
    dirty = trips_file(landing, "dirty.parquet", 200, null_rate=0.05, start_id=1000, seed=3)
    bad = run_wap(lh, table, [str(dirty)])
    assert bad.status == "blocked", bad.message
    on_main = files(lh, lh.tables, t)
    assert len(on_main) == 2 and lh.tables.row_count(t) == 400
    on_branch = files(lh, lh.iceberg.tables_for(bad.branch), t)
    assert on_branch[f"{bad.run_id}-adopted-00000.parquet"] == hashlib.sha256(dirty.read_bytes()).hexdigest()


def test_table_created_by_a_blocked_run_never_reaches_main(nessie_lh, landing, ns):
    table = f"{ns}.trips"
    lh = nessie_lh({table: {"checks": [{"check": "not_null", "column": "passenger_count"}], "on_failure": "drop"}})
    before = main_hash(lh)
    res = run_wap(lh, table, [str(trips_file(landing, "bad.parquet", 40, null_rate=0.1))])
    assert res.status == "blocked"
    assert main_hash(lh) == before
    assert not lh.tables.exists(TableName.parse(table))
    assert lh.nessie.get_reference(res.branch) is None


def _orders(path: Path, ids: list[int]) -> Path:
    return write_parquet(path, pa.table({"order_id": ids, "amount": [10.0 * i for i in ids]}))


def _items(path: Path, order_ids: list[int | None]) -> Path:
    n = len(order_ids)
    return write_parquet(
        path, pa.table({"item_id": list(range(1, n + 1)), "order_id": pa.array(order_ids, pa.int64())})
    )


def _shop(ns: str) -> dict[str, Any]:
    return {
        f"{ns}.orders": {"checks": [{"check": "unique", "columns": ["order_id"]}]},
        f"{ns}.items": {
            "checks": [
                {"check": "not_null", "column": "order_id"},
                # Cross-table: every item's order must exist in orders as on the run's branch.
                {"check": "foreign_key", "column": "order_id", "table": f"{ns}.orders"},
            ]
        },
    }


def test_multi_table_run_publishes_both_tables_in_one_nessie_commit(nessie_lh, landing, ns):
    lh = nessie_lh(_shop(ns))
    before = main_hash(lh)
    # items listed first: the run writes orders first because items' foreign key references it.
    res = run_group(
        lh,
        [
            (f"{ns}.items", [str(_items(landing / "i.parquet", [1, 2, 2, 3]))]),
            (f"{ns}.orders", [str(_orders(landing / "o.parquet", [1, 2, 3]))]),
        ],
    )
    assert res.status == "published", res.message
    assert res.exit_code == 0
    assert [r.status for r in res.tables] == ["published", "published"]
    assert lh.tables.row_count(TableName.parse(f"{ns}.orders")) == 3
    assert lh.tables.row_count(TableName.parse(f"{ns}.items")) == 4
    fk = next(c for c in res.tables[0].checks if c["check"] == "foreign_key")
    assert fk["status"] == "passed"  # orders existed only on the branch when it was checked
    # Exactly one new commit on main, changing both tables, carrying the run id.
    log = lh.nessie.log("main", limit=10, with_keys=True)
    new = list(log[: [c.hash for c in log].index(before)])
    assert len(new) == 1
    assert new[0].run_id == res.run_id
    assert {f"{ns}.items", f"{ns}.orders"} <= set(new[0].keys)  # (plus the namespace, created by the run)
    assert lh.nessie.get_reference(res.branch) is None


def test_one_failing_audit_blocks_every_table(nessie_lh, landing, ns, tmp_path):
    lh = nessie_lh(_shop(ns))
    events_file = tmp_path / "lineage.jsonl"  # lineage of multi-table runs: one OpenLineage run per table
    lh.config.lineage = LineageConfig(transport="file", path=str(events_file))
    first = run_group(
        lh,
        [
            (f"{ns}.orders", [str(_orders(landing / "o1.parquet", [1, 2]))]),
            (f"{ns}.items", [str(_items(landing / "i1.parquet", [1, 2]))]),
        ],
    )
    assert first.status == "published", first.message
    before = main_hash(lh)
    # orders is clean; items references order 99, which exists nowhere: the foreign key fails.
    res = run_group(
        lh,
        [
            (f"{ns}.orders", [str(_orders(landing / "o2.parquet", [3, 4]))]),
            (f"{ns}.items", [str(_items(landing / "i2.parquet", [3, 99]))]),
        ],
    )
    assert res.status == "blocked" and res.exit_code == 1
    assert "foreign_key" in res.message
    assert [r.status for r in res.tables] == ["blocked", "blocked"]
    assert main_hash(lh) == before
    assert lh.tables.row_count(TableName.parse(f"{ns}.orders")) == 2
    assert lh.tables.row_count(TableName.parse(f"{ns}.items")) == 2
    kept = lh.iceberg.tables_for(res.branch)
    assert kept.row_count(TableName.parse(f"{ns}.orders")) == 4
    # `wap discard` drops the whole branch.
    lh.iceberg.discard(res.branch, [])
    assert lh.nessie.get_reference(res.branch) is None
    # Lineage: START then COMPLETE (first run) / FAIL (the blocked one) for each table, the group as parent.
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    seen = [(e["eventType"], e["job"]["name"], e["run"]["facets"]["parent"]["run"]["runId"]) for e in events]
    group1, group2 = run_uuid(first.run_id), run_uuid(res.run_id)
    assert seen == [
        ("START", f"{ns}.orders", group1), ("START", f"{ns}.items", group1),
        ("COMPLETE", f"{ns}.orders", group1), ("COMPLETE", f"{ns}.items", group1),
        ("START", f"{ns}.orders", group2), ("START", f"{ns}.items", group2),
        ("FAIL", f"{ns}.orders", group2), ("FAIL", f"{ns}.items", group2),
    ]  # fmt: skip
    assert {e["run"]["runId"] for e in events[:2]} == {run_uuid(r.run_id) for r in first.tables}
    assert all(e["run"]["facets"]["parent"]["job"]["name"] == "run-tables" for e in events)
    fail_items = events[-1]
    assert "blocked by its audit" in fail_items["run"]["facets"]["errorMessage"]["message"]


def test_concurrent_runs_both_publish(nessie_lh, landing, ns):
    table = f"{ns}.trips"
    lh = nessie_lh({table: {"checks": [{"check": "unique", "columns": ["trip_id"]}]}})
    seed = run_wap(lh, table, [str(trips_file(landing, "seed.parquet", 10))])
    assert seed.status == "published"
    a = WapRun(lh, table, [str(trips_file(landing, "a.parquet", 30, start_id=100))])
    b = WapRun(lh, table, [str(trips_file(landing, "b.parquet", 40, start_id=200))])
    other = WapRun(lh, f"{ns}.other", [str(trips_file(landing, "c.parquet", 5, start_id=300))], no_checks=True)
    for r in (a, b, other):
        r.prepare()
        r.write()
        r.audit()
    a.publish()
    other.publish()  # another table: Nessie merges it on top of a's merge without conflict
    b.publish()  # same table: Nessie refuses the merge; b's audited rows are re-applied on the new main
    assert (a.rec.status, other.rec.status, b.rec.status) == ("published", "published", "published"), b.message
    assert a.state.published_via == "merge" and other.state.published_via == "merge"
    assert b.state.published_via == "merge_reapplied"
    t = TableName.parse(table)
    assert lh.tables.row_count(t) == 80
    ids = {r.trip_id for r in lh.tables.read(t).select("trip_id").collect()}
    assert len(ids) == 80
    for r in (a, b, other):
        assert lh.nessie.get_reference(r.branch) is None
    # Each run is found published by its run id (no double publish on a re-run).
    again = run_wap(lh, table, [str(landing / "b.parquet")], run_id=b.run_id)
    assert again.published_via == "already" and lh.tables.row_count(t) == 80


def test_crash_between_merge_and_branch_deletion_rerun_only_cleans_up(nessie_lh, landing, ns, monkeypatch):
    table = f"{ns}.trips"
    lh = nessie_lh({table: {"checks": []}})
    f = trips_file(landing, "x.parquet", 25)
    r = WapRun(lh, table, [str(f)])
    r.prepare()
    r.write()
    r.audit()
    # The crash: the merge happens, the run dies before the branch is deleted (a fault injected at publish:moved;
    # tests/process kills real processes at every point, this checks what the re-run does on Nessie).
    monkeypatch.setenv("WAP_RAISE_AT", "publish:moved")
    failed = r.publish()
    monkeypatch.delenv("WAP_RAISE_AT")
    assert failed.status == "failed" and "injected fault at publish:moved" in failed.message
    assert lh.nessie.get_reference(r.branch) is not None
    merged = main_hash(lh)
    res = run_wap(lh, table, [str(f)], run_id=r.run_id)
    assert res.status == "published" and res.published_via == "already"
    assert main_hash(lh) == merged
    assert lh.tables.row_count(TableName.parse(table)) == 25
    assert lh.nessie.get_reference(r.branch) is None


def test_server_unreachable_fails_before_any_write(lakehouse_factory, spark, tmp_path, landing, nessie_server):
    from wapflow.lakehouse.processes import free_port

    tables = {"down.trips": {"checks": []}}  # so that what fails is the server
    cfg = make_config(tmp_path, tables, catalog="nessie", nessie_uri=f"http://127.0.0.1:{free_port()}/api/v2")
    lh = Lakehouse(cfg, spark=spark)
    res = run_wap(lh, "down.trips", [str(trips_file(landing, "a.parquet", 5))])
    assert res.status == "failed" and res.exit_code == 5  # transient: the server may come back
    assert res.error["step"] == "prepare" and res.error["kind"] == "transient" and res.error["retryable"]
    assert "not reachable" in res.message and "wap nessie up" in res.message
    # A URL that is not Nessie's API: a configuration error (exit 2), also before any write.
    cfg2 = make_config(tmp_path, tables, catalog="nessie", nessie_uri=nessie_server.url.replace("/api/v2", "/nope"))
    res2 = run_wap(Lakehouse(cfg2, spark=spark), "down.trips", [str(landing / "a.parquet")])
    assert res2.status == "failed" and res2.exit_code == 2, res2.message


def test_cli_run_tables_branches_and_log(nessie_server, spark, tmp_path, landing, ns):
    """The CLI end to end in-process: run-tables (blocked), branches, query --branch, discard, nessie log."""
    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f"""
[lakehouse]
warehouse = "{tmp_path / "lh"}"
catalog = "nessie"
nessie_uri = "{nessie_server.url}"
catalog_name = "clicat"
master = "local[2]"

[tables."{ns}.items"]
checks = [{{ check = "foreign_key", column = "order_id", table = "{ns}.orders" }}]
""",
        encoding="utf-8",
    )
    runner = CliRunner()
    o = _orders(landing / "o.parquet", [1])
    i = _items(landing / "i.parquet", [7])
    # orders has no section: --no-checks lets it publish without checks; items' foreign_key blocks the run.
    args = ["run-tables", f"{ns}.orders={o}", f"{ns}.items={i}", "--no-checks", "--config", str(cfg), "--json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    assert doc["status"] == "blocked"
    branch = doc["branch"]
    res = runner.invoke(app, ["branches", "--config", str(cfg), "--json"])
    assert res.exit_code == 0, res.output
    assert branch in {b["branch"] for b in json.loads(res.stdout)["branches"]}
    res = runner.invoke(
        app, ["query", f"SELECT count(*) AS n FROM {ns}.items", "--branch", branch, "--config", str(cfg), "--json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["rows"] == [[1]]
    res = runner.invoke(app, ["discard", branch, "--table", f"{ns}.orders", "--config", str(cfg)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["nessie", "log", "--config", str(cfg), "--json"])
    assert res.exit_code == 0 and "commits" in json.loads(res.stdout)


def test_token_is_never_printed():
    from wapflow.config import parse_config
    from wapflow.errors import ConfigError

    with pytest.raises(ConfigError) as exc:
        parse_config({"lakehouse": {"catalog": "nessie", "nessie_uri": "http://x/api/v2", "nessie_token": 987654321}})
    assert "987654321" not in str(exc.value) and "secret" in str(exc.value)
    cfg = parse_config({"lakehouse": {"catalog": "nessie", "nessie_uri": "http://x", "nessie_token": "s3cr3t-tok"}})
    assert "s3cr3t-tok" not in repr(cfg) and "s3cr3t-tok" not in repr(NessieClient("http://x", "s3cr3t-tok"))
    assert NessieClient("http://x:1", "s3cr3t-tok").base == "http://x:1/api/v2"


def test_named_run_section_in_wap_toml(nessie_server, spark, tmp_path, landing, ns):
    """[runs.NAME]: the tables and their sources of a multi-table run, declared once in wap.toml."""
    _orders(landing / "o.parquet", [1, 2])
    _items(landing / "i.parquet", [1, 2, 2])
    cfg = tmp_path / "wap.toml"
    cfg.write_text(
        f"""
[lakehouse]
warehouse = "{tmp_path / "lh"}"
catalog = "nessie"
nessie_uri = "{nessie_server.url}"
catalog_name = "runcat"
master = "local[2]"

[tables."{ns}.orders"]
checks = []

[tables."{ns}.items"]
checks = [{{ check = "foreign_key", column = "order_id", table = "{ns}.orders" }}]

[runs.shop]
tables = {{ "{ns}.orders" = "landing/o.parquet", "{ns}.items" = ["landing/i.parquet"] }}
""",
        encoding="utf-8",
    )
    runner = CliRunner()
    res = runner.invoke(app, ["run-tables", "--run", "shop", "--config", str(cfg), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["status"] == "published"
    res = runner.invoke(app, ["query", f"SELECT count(*) FROM {ns}.items", "--config", str(cfg), "--json"])
    assert json.loads(res.stdout)["rows"] == [[3]]
    res = runner.invoke(app, ["run-tables", "--run", "shoop", "--config", str(cfg)])
    assert res.exit_code == 2 and "no [runs.shoop] section" in res.stderr and "did you mean 'shop'" in res.stderr


# --- staging (add_columns) and quarantine through the same branch interface (issue 9) ----------------


def _with_tip(t: pa.Table, nulls: int = 0) -> pa.Table:
    tips = [None if n < nulls else float(n % 7) for n in range(t.num_rows)]
    return t.append_column("tip", pa.array(tips, pa.float64()))


def test_add_columns_on_a_nessie_branch(nessie_lh, landing, ns):
    """A Nessie branch holds schema changes too: new columns are added on the branch (no staging table), main
    keeps its schema until the merge, and a blocked run's branch shows the new column."""
    table = f"{ns}.trips"
    t = TableName.parse(table)
    lh = nessie_lh({table: {"schema": "add_columns", "checks": []}})
    assert run_wap(lh, table, [str(trips_file(landing, "seed.parquet", 20))]).status == "published"
    names = lh.tables.schema(t).fieldNames()
    # Checks on the new column apply from the second batch on.
    lh.config.tables[table] = TableConfig.model_validate(
        {"schema": "add_columns", "checks": [{"check": "not_null", "column": "tip"}]}
    )
    before = main_hash(lh)
    dirty = write_parquet(landing / "dirty.parquet", _with_tip(generate_trips(30, start_id=100), nulls=4))
    bad = run_wap(lh, table, [str(dirty)])
    assert bad.status == "blocked" and bad.exit_code == 1, bad.message
    assert [c["name"] for c in bad.checks if c["status"] == "failed"] == ["not_null(tip)"]
    assert bad.staging_table is None and f"rows kept on Nessie branch {bad.branch}" in bad.message
    assert main_hash(lh) == before and lh.tables.schema(t).fieldNames() == names
    kept = lh.iceberg.tables_for(bad.branch)
    assert kept.schema(t).fieldNames() == [*names, "tip"] and kept.row_count(t) == 50
    assert not any(x.name.startswith("trips__wap_") for x in lh.tables.list_tables())

    clean = write_parquet(landing / "clean.parquet", _with_tip(generate_trips(30, start_id=200)))
    res = run_wap(lh, table, [str(clean)])
    assert res.status == "published" and res.published_via == "merge", res.message
    assert any("tip" in c for c in res.schema_changes)
    assert lh.tables.schema(t).fieldNames() == [*names, "tip"]
    rows = lh.spark.sql(f"SELECT count(*) AS n, count(tip) AS tips FROM {lh.tables.ident(t)}").collect()[0]
    assert (rows["n"], rows["tips"]) == (50, 30)
    assert lh.nessie.get_reference(res.branch) is None
    # The blocked run's branch is still there, and discarding it leaves main alone.
    assert lh.iceberg.discard(bad.branch, []).found and lh.nessie.get_reference(bad.branch) is None


def test_quarantine_on_a_nessie_branch(nessie_lh, landing, ns):
    """Quarantine on Nessie: good rows and diverted rows reach main in the same merge commit; over the
    rate limit, neither table changes on main and the branch keeps both."""
    table, quarantine = f"{ns}.trips", f"{ns}.trips__quarantine"
    t, q = TableName.parse(table), TableName.parse(quarantine)
    cfg = {"on_row_failure": "quarantine", "max_quarantine_rate": 0.2, "checks": TRIPS_CHECKS}
    lh = nessie_lh({table: cfg})
    f = trips_file(landing, "some_nulls.parquet", 200, null_rate=0.05, seed=7)
    res = run_wap(lh, table, [str(f)])
    assert res.status == "published" and res.published_via == "merge", res.message
    assert res.quarantined_rows and 0 < res.quarantined_rows <= 40
    assert lh.tables.row_count(t) == 200 - res.quarantined_rows
    assert lh.tables.row_count(q) == res.quarantined_rows
    assert lh.spark.sql(f"SELECT count(*) FROM {lh.tables.ident(t)} WHERE passenger_count IS NULL").collect()[0][0] == 0
    ids = {r[0] for r in lh.spark.sql(f"SELECT DISTINCT _wap_run_id FROM {lh.tables.ident(q)}").collect()}
    assert ids == {res.run_id}
    merge = lh.nessie.log("main", limit=1)[0]
    assert merge.run_id == res.run_id and set(merge.properties["wapflow.tables"].split(",")) == {table, quarantine}
    assert lh.nessie.get_reference(res.branch) is None

    before, rows = main_hash(lh), (lh.tables.row_count(t), lh.tables.row_count(q))
    worse = trips_file(landing, "many_nulls.parquet", 100, null_rate=0.4, start_id=5000, seed=8)
    bad = run_wap(lh, table, [str(worse)])
    assert bad.status == "blocked", bad.message
    assert [c["check"] for c in bad.checks if c["status"] == "failed"] == ["max_quarantine_rate"]
    assert main_hash(lh) == before and (lh.tables.row_count(t), lh.tables.row_count(q)) == rows
    kept = lh.iceberg.tables_for(bad.branch)
    assert kept.row_count(t) + kept.row_count(q) == sum(rows) + 100


@pytest.mark.slow
def test_sigkill_after_quarantined_rows_then_resume_on_nessie(nessie_server, spark, tmp_path, landing, ns):
    """A `wap run` killed between the quarantine table's append and the table's own (both on the Nessie
    branch): the resumed run takes its unfinished quarantine rows back off the branch (an Iceberg rollback
    on the branch only) and writes again; main gets every row exactly once."""
    import signal

    import pyarrow.parquet as pq

    from support.cli_harness import wap, write_config
    from wapflow.config import load_config

    table, quarantine = f"{ns}.trips", f"{ns}.trips__quarantine"
    cfg = write_config(
        tmp_path / "lake",
        f'[tables."{table}"]\non_row_failure = "quarantine"\n'
        'checks = [{ check = "not_null", column = "passenger_count" }]\n',
        lakehouse=f'catalog = "nessie"\nnessie_uri = "{nessie_server.url}"\n',
        catalog=f"nq{ns}",
    )
    f = trips_file(landing, "q.parquet", 200, null_rate=0.1, seed=11)
    command = ["run", table, str(f), "--run-id", "nessie_q", "--config", str(cfg)]
    killed = wap(*command, WAP_CRASH_AT="write:quarantine-appended")
    assert killed.code == -signal.SIGKILL, killed.text
    done = wap(*command, "--json")
    assert done.code == 0 and done.doc["status"] == "published", done.text

    lh = Lakehouse(load_config(cfg), spark=spark)
    expected = pq.read_table(f).to_pylist()
    good = [r for r in expected if r["passenger_count"] is not None]
    bad = [r for r in expected if r["passenger_count"] is None]
    assert bad and done.doc["quarantined_rows"] == len(bad)
    t, q = TableName.parse(table), TableName.parse(quarantine)

    def ids(tbl: TableName) -> list[int]:
        return sorted(r[0] for r in lh.tables.read(tbl).select("trip_id").collect())

    assert ids(t) == sorted(r["trip_id"] for r in good)  # each good row once
    assert ids(q) == sorted(r["trip_id"] for r in bad)  # each diverted row once, the killed attempt's gone
    assert lh.nessie.get_reference(done.doc["branch"]) is None


CDC = {"mode": "merge", "key": ["id"], "delete_when": "op = 'D'"}


def nessie_main_rows(lh: Lakehouse, table: str) -> list[dict[str, Any]]:
    """main of a table read without wapflow's Spark: the metadata location from Nessie's content API, the rows
    by PyIceberg's StaticTable."""
    from pyiceberg.table import StaticTable

    t = TableName.parse(table)
    content = lh.nessie.content("main", (*t.namespace, t.name))
    assert content is not None, f"{table} is not on main"
    rows = StaticTable.from_metadata(content["metadataLocation"]).scan().to_arrow().to_pylist()
    return sorted(rows, key=lambda r: r["id"])


def test_merge_on_a_nessie_branch_reaches_main_with_the_merge(nessie_lh, landing, ns):
    table = f"{ns}.customers"
    lh = nessie_lh({table: {**CDC, "checks": []}})
    seed = run_wap(lh, table, [changes_file(landing, "seed.parquet", [(i, f"n{i}", "I") for i in range(1, 6)])])
    assert seed.status == "published", seed.message
    before = main_hash(lh)
    batch = [(1, "one", "U"), (3, None, "D"), (6, "six", "I")]
    res = run_wap(lh, table, [changes_file(landing, "b1.parquet", batch)], run_id="nm_one")
    assert res.status == "published" and res.published_via == "merge", res.message
    assert "inserted 1, updated 1, deleted 1" in res.message
    assert main_hash(lh) != before and lh.nessie.get_reference(res.branch) is None
    assert [(r["id"], r["name"]) for r in nessie_main_rows(lh, table)] == [
        (1, "one"), (2, "n2"), (4, "n4"), (5, "n5"), (6, "six")
    ]  # fmt: skip
    again = run_wap(lh, table, [str(landing / "b1.parquet")], run_id="nm_one")
    assert again.published_via == "already" and len(nessie_main_rows(lh, table)) == 5


def test_a_blocked_merge_on_nessie_leaves_main_as_it_was(nessie_lh, landing, ns):
    table = f"{ns}.customers"
    lh = nessie_lh({table: {**CDC, "checks": [{"check": "max_change", "metric": "rows_deleted", "max_rows": 1}]}})
    seed = run_wap(lh, table, [changes_file(landing, "seed.parquet", [(i, f"n{i}", "I") for i in range(1, 6)])])
    assert seed.status == "published", seed.message
    before = main_hash(lh)
    res = run_wap(lh, table, [changes_file(landing, "d.parquet", [(1, None, "D"), (2, None, "D")])])
    assert res.status == "blocked" and res.exit_code == 1, res.message
    assert main_hash(lh) == before and [r["id"] for r in nessie_main_rows(lh, table)] == [1, 2, 3, 4, 5]


def test_a_merge_on_nessie_quarantines_failing_changes_and_merges_the_rest(nessie_lh, landing, ns):
    """on_row_failure = "quarantine" with a merge on a Nessie branch: the changes failing a row check go to the
    quarantine table, the rest are merged (a delete judged by nothing), and both tables reach main in the one
    Nessie merge of the run; main read by PyIceberg from Nessie's content."""
    table, quarantine = f"{ns}.customers", f"{ns}.customers__quarantine"
    cfg = {**CDC, "on_row_failure": "quarantine", "checks": [{"check": "not_null", "column": "name"}]}
    lh = nessie_lh({table: cfg})
    seed = run_wap(lh, table, [changes_file(landing, "seed.parquet", [(i, f"n{i}", "I") for i in range(1, 6)])])
    assert seed.status == "published", seed.message
    before = main_hash(lh)
    batch = [(1, "one", "U"), (2, None, "U"), (3, None, "D"), (7, None, "I"), (8, "eight", "I")]
    res = run_wap(lh, table, [changes_file(landing, "b.parquet", batch)], run_id="nq_one")
    assert res.status == "published" and res.published_via == "merge" and res.exit_code == 0, res.message
    assert res.quarantined_rows == 2
    assert [(r["id"], r["name"]) for r in nessie_main_rows(lh, table)] == [
        (1, "one"), (2, "n2"), (4, "n4"), (5, "n5"), (8, "eight")
    ]  # fmt: skip
    assert [
        (r["id"], r["op"], r["_wap_run_id"], list(r["_wap_failed_checks"])) for r in nessie_main_rows(lh, quarantine)
    ] == [
        (2, "U", "nq_one", ["not_null(name)"]),
        (7, "I", "nq_one", ["not_null(name)"]),
    ]
    (merge,) = lh.nessie.log("main", limit=1)
    assert merge.run_id == res.run_id and merge.parent == before  # main moved once, by the run's merge
    assert set(merge.properties["wapflow.tables"].split(",")) == {table, quarantine}
    assert lh.nessie.get_reference(res.branch) is None


def test_a_merge_on_nessie_is_applied_again_when_main_moved(nessie_lh, landing, ns):
    """An append publishes id 50 while a merge that upserts id 50 waits between audit and publish: the merge
    is applied again on a fresh branch of the new main, never its rows re-appended."""
    table = f"{ns}.customers"
    lh = nessie_lh({table: {**CDC, "checks": []}})
    seed = run_wap(lh, table, [changes_file(landing, "seed.parquet", [(i, f"n{i}", "I") for i in range(1, 6)])])
    assert seed.status == "published", seed.message
    m = WapRun(lh, table, [changes_file(landing, "m.parquet", [(1, "merged", "U"), (50, "from merge", "U")])])
    m.prepare()
    m.write()
    m.audit()
    other = run_wap(lh, table, [changes_file(landing, "a.parquet", [(50, "from other", "I"), (51, "x", "I")])])
    assert other.status == "published", other.message
    res = m.run()
    assert res.status == "published", res.message
    assert "applied again 1 time(s)" in res.message
    rows = {r["id"]: r["name"] for r in nessie_main_rows(lh, table)}
    assert sorted(rows) == [1, 2, 3, 4, 5, 50, 51] and rows[50] == "from merge" and rows[1] == "merged"


def test_replace_on_a_nessie_branch_overwrites_the_partitions_the_batch_touches(nessie_lh, landing, ns):
    table = f"{ns}.daily"
    lh = nessie_lh({table: {"mode": "replace", "partition_by": ["day"], "checks": []}})

    def day_file(name: str, rows: list[tuple[int, int]]) -> str:
        t = pa.table(
            {"id": pa.array([r[0] for r in rows], pa.int64()), "day": pa.array([r[1] for r in rows], pa.int32())}
        )
        return str(write_parquet(landing / name, t))

    first = run_wap(lh, table, [day_file("all.parquet", [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3)])])
    assert first.status == "published", first.message
    res = run_wap(lh, table, [day_file("day2.parquet", [(30, 2), (31, 2), (32, 2)])])
    assert res.status == "published" and res.published_via == "merge", res.message
    assert [(r["id"], r["day"]) for r in nessie_main_rows(lh, table)] == [
        (1, 1), (2, 1), (5, 3), (30, 2), (31, 2), (32, 2)
    ]  # fmt: skip
    (change,) = [c for c in res.checks if c["check"] == "changes"]
    assert (change["observed"]["rows_inserted"], change["observed"]["rows_replaced"]) == (3, 2)


def test_maintain_on_nessie_compacts_on_main_and_leaves_gc_to_nessie_gc(nessie_lh, landing, ns):
    """`wap maintain` on a Nessie catalog: compaction and the manifest rewrite commit on Nessie's main (its hash
    moves, an independent reader sees the same rows in fewer files); a blocked run's kept Nessie branch is
    dropped after keep_blocked_for; snapshot expiry, orphan removal and metadata deletion are skipped, naming
    nessie-gc, by a real pass and by a dry run alike (exit 0)."""
    from datetime import UTC, datetime, timedelta

    from pyiceberg.table import StaticTable

    from wapflow.maintain import maintain
    from wapflow.runs.maintenance import MaintenanceLog

    table = f"{ns}.trips"
    t = TableName.parse(table)
    lh = nessie_lh({table: {"checks": TRIPS_CHECKS}})
    eager = {"expire_older_than": "0s", "revert_window": "0s", "keep_last": 1, "min_input_files": 2}
    lh.config.maintenance = lh.config.maintenance.model_copy(update={**eager, "keep_blocked_for": "1h"})
    for i in range(4):
        f = trips_file(landing, f"m{i}.parquet", 25, start_id=1 + 100 * i, seed=i)
        assert run_wap(lh, table, [str(f)]).status == "published"
    bad = run_wap(lh, table, [str(trips_file(landing, "bad.parquet", 30, null_rate=0.2, start_id=9000))])
    assert bad.status == "blocked" and lh.nessie.get_reference(bad.branch) is not None

    def on_main() -> tuple[list[dict[str, Any]], int]:
        content = lh.nessie.content("main", (*t.namespace, t.name))
        assert content is not None
        tbl = StaticTable.from_metadata(content["metadataLocation"])
        rows = sorted(tbl.scan().to_arrow().to_pylist(), key=lambda r: r["trip_id"])
        return rows, len(list(tbl.scan().plan_files()))

    rows, files = on_main()
    assert len(rows) == 100 and files == 4
    later = datetime.now(UTC) + timedelta(hours=2)

    dry = maintain(lh, table, dry_run=True, now=later).to_dict()
    assert dry["exit_code"] == 0, dry
    (out,) = dry["tables"]
    skipped = {a["action"]: a["figures"]["skipped"] for a in out["actions"] if a["status"] == "skipped"}
    assert {"properties", "expire_snapshots", "remove_orphans"} <= set(skipped), out
    assert all("nessie-gc" in skipped[a] for a in ("properties", "expire_snapshots", "remove_orphans"))
    assert next(a for a in out["actions"] if a["action"] == "compact")["figures"]["planned_files"] == 4
    assert on_main() == (rows, files) and lh.nessie.get_reference(bad.branch) is not None

    before = main_hash(lh)
    res = maintain(lh, table, now=later)
    assert res.exit_code == 0, res.to_dict()
    (done,) = res.tables
    assert done.status == "done", done.to_dict()
    assert done.figures("compact")["rewritten_data_files"] == 4
    assert done.figures("drop_branches")["dropped"] == [
        {"branch": bad.branch, "run_id": bad.run_id, "status": "blocked"}
    ]
    assert lh.nessie.get_reference(bad.branch) is None
    rec = lh.store.get(bad.run_id)
    assert rec is not None and rec.status == "discarded" and not rec.branch_kept
    assert main_hash(lh) != before  # the compaction is a commit on Nessie's main
    after_rows, after_files = on_main()
    assert after_rows == rows and after_files == 1
    assert lh.tables.row_count(t) == 100
    recs = {r.action: r for r in MaintenanceLog(lh.store.engine).list(table, pass_id=res.pass_id)}
    for action in ("properties", "expire_snapshots", "remove_orphans"):
        assert recs[action].status == "skipped" and "nessie-gc" in recs[action].figures["skipped"]
    assert recs["compact"].status == "done" and recs["compact"].figures["rewritten_data_files"] == 4


def _nessie_main_ids(lh: Lakehouse, table: str) -> list[int]:
    """trip ids on main of a Nessie table, read by PyIceberg from the metadata Nessie's main points at."""
    from pyiceberg.table import StaticTable

    t = TableName.parse(table)
    content = lh.nessie.content("main", (*t.namespace, t.name))
    if content is None:
        return []
    return sorted(StaticTable.from_metadata(content["metadataLocation"]).scan().to_arrow()["trip_id"].to_pylist())


def test_review_on_nessie_holds_a_run_on_its_branch_then_approve_merges_it_and_reject_drops_it(nessie_lh, landing, ns):
    """review = "always" on a Nessie catalog: a passed run waits on its Nessie branch (main's hash unchanged),
    `approve` merges it (one commit on main carrying the run id; who and why in the run store and on the table's
    snapshot), `reject` deletes the branch; main read back by PyIceberg from Nessie's content API."""
    from wapflow import api
    from wapflow.lakehouse.model import APPROVAL_REASON_PROP, APPROVED_BY_PROP
    from wapflow.service.diff import diff

    table = f"{ns}.trips"
    lh = nessie_lh({table: {"checks": TRIPS_CHECKS, "review": "always"}})
    before = main_hash(lh)
    held = run_wap(lh, table, [str(trips_file(landing, "a.parquet", 120))])
    assert held.status == "awaiting_review" and held.branch_kept, held.message
    assert main_hash(lh) == before and _nessie_main_ids(lh, table) == []
    assert lh.nessie.get_reference(held.branch) is not None
    shown = diff(lh, held.run_id)  # what approving would change, read while the run waits
    assert shown["rows"] is not None and shown["rows"]["added"] == 120 and shown["status"] == "awaiting_review"

    done = api.approve(lh, held.run_id, reason="counts match the export", by="alice")
    assert done.status == "published", done.message
    assert _nessie_main_ids(lh, table) == list(range(1, 121))
    assert lh.nessie.get_reference(held.branch) is None and main_hash(lh) != before
    assert lh.nessie.log("main", limit=5)[0].run_id == held.run_id
    rec = lh.store.get(held.run_id)
    assert rec is not None and (rec.status, rec.review, rec.review_by) == ("published", "approved", "alice")
    snap = lh.tables.snapshots(TableName.parse(table))[lh.tables.head(TableName.parse(table))]
    assert snap.summary[APPROVED_BY_PROP] == "alice"
    assert snap.summary[APPROVAL_REASON_PROP] == "counts match the export"

    # A second run held, then rejected: its Nessie branch is deleted, main keeps only the first run's rows.
    second = run_wap(lh, table, [str(trips_file(landing, "b.parquet", 50, start_id=1000, seed=4))])
    assert second.status == "awaiting_review" and lh.nessie.get_reference(second.branch) is not None
    after_first = main_hash(lh)
    dropped = api.reject(lh, second.run_id, reason="wrong export", by="bob")
    assert dropped["status"] == "rejected" and dropped["dropped"] is True
    assert lh.nessie.get_reference(second.branch) is None and main_hash(lh) == after_first
    assert _nessie_main_ids(lh, table) == list(range(1, 121))
    rec = lh.store.get(second.run_id)
    assert rec is not None and (rec.status, rec.review_by, rec.review_reason) == ("rejected", "bob", "wrong export")


def test_review_of_a_multi_table_run_on_nessie_holds_both_and_one_approval_merges_both_in_one_commit(
    nessie_lh, landing, ns
):
    """review = "always" on one table of a Nessie multi-table run holds the whole run on its one Nessie branch;
    approving the run's id merges both tables in one commit on main; a second held run rejected deletes its
    branch and leaves main as it was."""
    from wapflow import api

    shop = _shop(ns)
    shop[f"{ns}.orders"]["review"] = "always"
    lh = nessie_lh(shop)
    before = main_hash(lh)
    orders_t, items_t = TableName.parse(f"{ns}.orders"), TableName.parse(f"{ns}.items")

    def run(tag: str, order_ids: list[int]) -> Any:
        return run_group(
            lh,
            [
                (f"{ns}.orders", [str(_orders(landing / f"o{tag}.parquet", order_ids))]),
                (f"{ns}.items", [str(_items(landing / f"i{tag}.parquet", order_ids))]),
            ],
        )

    held = run("1", [1, 2, 3])
    assert held.status == "awaiting_review" and held.exit_code == 6, held.message
    assert main_hash(lh) == before and lh.nessie.get_reference(held.branch) is not None
    assert {m.status for m in lh.store.group(held.run_id)} == {"awaiting_review"}

    done = api.approve(lh, held.run_id, reason="both tables checked", by="alice")
    assert done.status == "published", done.message
    log = lh.nessie.log("main", limit=10, with_keys=True)
    new = list(log[: [c.hash for c in log].index(before)])
    assert len(new) == 1 and new[0].run_id == held.run_id  # both tables in one merge
    assert {orders_t.dotted, items_t.dotted} <= set(new[0].keys)
    assert lh.tables.row_count(orders_t) == 3 and lh.tables.row_count(items_t) == 3
    assert lh.nessie.get_reference(held.branch) is None
    assert {(m.status, m.review_by) for m in lh.store.group(held.run_id)} == {("published", "alice")}

    second = run("2", [4, 5])
    assert second.status == "awaiting_review", second.message
    after_first = main_hash(lh)
    doc = api.reject(lh, second.run_id, reason="wrong day", by="bob")
    assert doc["status"] == "rejected" and len(doc["tables"]) == 2, doc
    assert lh.nessie.get_reference(second.branch) is None and main_hash(lh) == after_first
    assert lh.tables.row_count(orders_t) == 3 and lh.tables.row_count(items_t) == 3
    assert {m.status for m in lh.store.group(second.run_id)} == {"rejected"}
