"""`wap diff` of a merge run held for review names sample keys of the rows it would insert, update and delete
(recorded by the run's audit, shown without scanning anything), on real runs (Spark, Iceberg, the embedded
catalog); the keys expected are the test's own batch against main as PyIceberg reads it, not wapflow's."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import wapflow
from support.data import changes_file, write_parquet
from support.typer_cli import as_json, wap
from wapflow.errors import EXIT_REVIEW
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import run_wap
from wapflow.writing.modes import KEY_SAMPLES

pytestmark = pytest.mark.spark


def _config(tmp: Path, catalog: str, table: str, review: str) -> str:
    p = tmp / "wap.toml"
    p.write_text(
        f'[lakehouse]\nwarehouse = "{tmp / "lakehouse"}"\ncatalog_name = "{catalog}"\nmaster = "local[2]"\n\n'
        # checks = []: these tests are about what a held merge would change, not about checks.
        f'[tables."crm.customers"]\n{table}\nreview = "{review}"\nchecks = []\n'
    )
    return str(p)


def _main_ids(cfg: str) -> set[int]:
    """main's ids, read by PyIceberg from the catalog (no wapflow code)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from wapflow.config import load_config

    c = load_config(cfg)
    wh = Path(c.warehouse_location())
    cat = SqlCatalog(c.lakehouse.catalog_name, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}")
    return set(cat.load_table("crm.customers").scan().to_arrow().column("id").to_pylist())


def test_diff_of_a_held_merge_names_sample_keys_per_kind(spark, tmp_path, landing):
    merge = 'mode = "merge"\nkey = ["id"]\ndelete_when = "op = \'D\'"'
    cfg = _config(tmp_path, "diff_keys", merge, "never")
    seed = [(i, f"n{i}", "I") for i in range(1, 11)]
    first = as_json(wap("run", "crm.customers", changes_file(landing, "seed.parquet", seed), "--config", cfg, "--json"))
    assert first["status"] == "published", first
    cfg = _config(tmp_path, "diff_keys", merge, "always")

    # Against main's ids 1..10: seven updates (more than KEY_SAMPLES), two deletes, one delete of a key main
    # lacks (changes nothing), three inserts, in no particular order.
    updates, deletes, inserts = [10, 2, 8, 4, 9, 6, 7], [3, 1], [15, 11, 12]
    batch = [(i, f"u{i}", "U") for i in updates] + [(i, None, "D") for i in [*deletes, 99]]
    batch += [(i, f"new{i}", "I") for i in inserts]
    r = wap("run", "crm.customers", changes_file(landing, "batch.parquet", batch), "--config", cfg, "--json")
    assert r.exit_code == EXIT_REVIEW, r.output
    held = as_json(r)
    assert held["status"] == "awaiting_review"
    on_main = _main_ids(cfg)
    assert on_main == set(range(1, 11))  # held: main unchanged

    expected = {
        "key": ["id"],
        "inserted": sorted(i for i in inserts if i not in on_main)[:KEY_SAMPLES],
        "updated": sorted(i for i in updates if i in on_main)[:KEY_SAMPLES],
        "deleted": sorted(i for i in deletes if i in on_main)[:KEY_SAMPLES],
    }
    assert expected["updated"] == [2, 4, 6, 7, 8]  # the five smallest of seven
    r = wap("diff", held["run_id"], "--config", cfg, "--json")
    assert r.exit_code == 0, r.output
    doc = as_json(r)
    assert doc["rows"] == {"added": 3, "updated": 7, "deleted": 2, "replaced": 0, "main_rows": 10}
    assert doc["keys"] == expected

    r = wap("diff", held["run_id"], "--config", cfg)
    assert r.exit_code == 0, r.output
    assert "sample keys inserted id: 11, 12, 15" in r.stdout
    assert "sample keys updated id: 2, 4, 6, 7, 8" in r.stdout
    assert "sample keys deleted id: 1, 3" in r.stdout

    # `wap report` shows them too, from the record alone; approving publishes exactly that change.
    report = as_json(wap("report", held["run_id"], "--config", cfg, "--json"))
    assert report["change_keys"] == expected
    assert "sample keys deleted id: 1, 3" in wap("report", held["run_id"], "--config", cfg).stdout
    r = wap("approve", held["run_id"], "--reason", "checked the keys", "--config", cfg, "--json")
    assert r.exit_code == 0, r.output
    assert _main_ids(cfg) == (on_main - set(deletes)) | set(inserts)


def _regions(landing: Path, name: str, rows: list[tuple[str, int, str | None, str]]) -> str:
    table = pa.table(
        {
            "region": pa.array([r[0] for r in rows], pa.string()),
            "id": pa.array([r[1] for r in rows], pa.int64()),
            "name": pa.array([r[2] for r in rows], pa.string()),
            "op": pa.array([r[3] for r in rows], pa.string()),
        }
    )
    return str(write_parquet(landing / name, table))


def test_a_composite_key_is_shown_as_an_object_and_a_tuple(spark, tmp_path, landing):
    merge = 'mode = "merge"\nkey = ["region", "id"]\ndelete_when = "op = \'D\'"'
    cfg = _config(tmp_path, "diff_keys_composite", merge, "never")
    odd = 'ap "x" [b]'  # a value that looks like quoting and markup: shown as a value
    seed = [("eu", 1, "a", "I"), ("eu", 2, "b", "I"), ("us", 1, "c", "I"), (odd, 1, "d", "I")]
    r = wap("run", "crm.customers", _regions(landing, "seed.parquet", seed), "--config", cfg, "--json")
    assert as_json(r)["status"] == "published", r.output
    cfg = _config(tmp_path, "diff_keys_composite", merge, "always")
    # ("us", 2) and ("eu", 3) are new (id 2 exists in eu, region us exists: only the pair decides).
    batch = [("us", 1, "c2", "U"), (odd, 1, None, "D"), ("us", 2, "n", "I"), ("eu", 3, "n", "I")]
    r = wap("run", "crm.customers", _regions(landing, "b.parquet", batch), "--config", cfg, "--json")
    assert r.exit_code == EXIT_REVIEW, r.output
    run_id = as_json(r)["run_id"]

    doc = as_json(wap("diff", run_id, "--config", cfg, "--json"))
    assert doc["rows"]["added"] == 2 and doc["rows"]["updated"] == 1 and doc["rows"]["deleted"] == 1
    assert doc["keys"] == {
        "key": ["region", "id"],
        "inserted": [{"region": "eu", "id": 3}, {"region": "us", "id": 2}],
        "updated": [{"region": "us", "id": 1}],
        "deleted": [{"region": odd, "id": 1}],
    }
    text = wap("diff", run_id, "--config", cfg).stdout
    assert 'sample keys inserted (region, id): ("eu", 3), ("us", 2)' in text
    assert 'sample keys deleted (region, id): ("ap \\"x\\" [b]", 1)' in text


def test_an_append_run_has_no_sample_keys(lakehouse_factory, landing):
    lh: Lakehouse = lakehouse_factory({"crm.customers": {"review": "always", "checks": []}})
    res = run_wap(lh, "crm.customers", [changes_file(landing, "a.parquet", [(1, "a", "I"), (2, "b", "I")])])
    assert res.status == "awaiting_review", res.message
    doc = wapflow.diff(lh, res.run_id)
    assert doc["rows"] is not None and doc["rows"]["added"] == 2
    assert doc["keys"] is None
    assert wapflow.report(lh, res.run_id)["change_keys"] is None


def test_changes_a_quarantine_held_back_are_not_among_the_sample_keys(lakehouse_factory, landing):
    cdc = {"mode": "merge", "key": ["id"], "delete_when": "op = 'D'"}
    quarantine = {"on_row_failure": "quarantine", "checks": [{"check": "not_null", "column": "name"}]}
    lh: Lakehouse = lakehouse_factory({"crm.customers": {**cdc, **quarantine}})
    seed = run_wap(
        lh, "crm.customers", [changes_file(landing, "seed.parquet", [(i, f"n{i}", "I") for i in range(1, 6)])]
    )
    assert seed.status == "published", seed.message
    # 2's update and 7's insert fail not_null(name): quarantined, so main keeps 2 as it was and never gets 7.
    batch = [(1, "one", "U"), (2, None, "U"), (3, None, "D"), (7, None, "I"), (8, "eight", "I")]
    lh.config.tables["crm.customers"] = lh.config.tables["crm.customers"].model_copy(update={"review": "always"})
    res = run_wap(lh, "crm.customers", [changes_file(landing, "b.parquet", batch)])
    assert res.status == "awaiting_review" and res.quarantined_rows == 2, res.message
    keys = wapflow.report(lh, res.run_id)["change_keys"]
    assert keys == {"key": ["id"], "inserted": [8], "updated": [1], "deleted": [3]}


def test_a_merge_that_publishes_at_once_takes_no_sample_keys(lakehouse_factory, landing):
    """Nobody diffs a run already on main: its merge pays for no key job."""
    cdc = {"mode": "merge", "key": ["id"], "delete_when": "op = 'D'"}
    lh: Lakehouse = lakehouse_factory({"crm.customers": {**cdc, "checks": []}})
    rows = [(i, f"n{i}", "I") for i in range(1, 4)]
    seed = run_wap(lh, "crm.customers", [changes_file(landing, "seed.parquet", rows)])
    assert seed.status == "published", seed.message
    res = run_wap(lh, "crm.customers", [changes_file(landing, "b.parquet", [(1, "one", "U"), (9, "nine", "I")])])
    assert res.status == "published", res.message
    assert wapflow.report(lh, res.run_id)["change_keys"] is None
