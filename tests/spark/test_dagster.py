"""wapflow.integrations.dagster in a real Dagster (in-process `materialize`, on the shared SparkSession, and the
`dagster` CLI loading the Component from YAML): what a Dagster user sees in the run's events and the instance's
records, and what is on main (read back with PyIceberg)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.cli_harness import LazyReader, env, write_config
from support.data import trips_file

pytestmark = pytest.mark.spark
dg = pytest.importorskip("dagster")

_n = iter(range(1000))
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dagster"

TABLES = """
[tables."raw.trips"]
on_failure = "keep"
review = "{review}"
checks = [{{ check = "not_null", column = "passenger_count" }}, {{ check = "row_count", min = 1 }}]

[models."gold.daily"]
sql = "SELECT to_date(pickup_at) AS day, count(*) AS trips FROM raw.trips GROUP BY 1"
mode = "merge"
key = ["day"]
checks = [{{ check = "not_null", column = "day" }}]
"""


@pytest.fixture
def instance() -> Iterator[Any]:
    """An ephemeral Dagster instance, disposed after the test: its in-memory SQLite connections are closed here,
    not left to the garbage collector, which may run their finalizers in a later test's thread."""
    with dg.DagsterInstance.ephemeral() as inst:
        yield inst


def _lake(tmp_path: Path, review: str = "never") -> tuple[Path, LazyReader]:
    catalog = f"dg{next(_n)}_{os.getpid()}"
    cfg = write_config(tmp_path, TABLES.format(review=review), catalog=catalog)
    return cfg, LazyReader(tmp_path, catalog)


def _materialize(cfg: Path, files: list[str], instance: Any) -> Any:
    from wapflow.integrations.dagster import WapflowResource, wap_assets

    assets = wap_assets(cfg)
    return dg.materialize(
        assets,
        resources={"wapflow": WapflowResource(config=str(cfg))},
        run_config={"ops": {"raw_trips": {"config": {"files": files}}}},
        instance=instance,
        raise_on_error=False,
    )


def _checks(result: Any) -> dict[str, tuple[bool, str]]:
    out = {}
    for ev in result.get_asset_check_evaluations():
        out[f"{'.'.join(ev.asset_key.path)}:{ev.check_name}"] = (ev.passed, ev.severity.value)
    return out


def test_assets_and_checks_come_from_wap_toml(tmp_path):
    from wapflow.integrations.dagster import wap_assets

    cfg, _ = _lake(tmp_path)
    specs = {tuple(k.path) for a in wap_assets(cfg) for k in a.keys}
    assert specs == {("raw", "trips"), ("gold", "daily")}
    checks = {(tuple(c.asset_key.path), c.name, c.blocking) for a in wap_assets(cfg) for c in a.check_specs}
    assert checks == {
        (("raw", "trips"), "not_null_passenger_count", True),
        (("raw", "trips"), "row_count_min_1", True),
        (("gold", "daily"), "not_null_day", True),
    }
    (models,) = [a for a in wap_assets(cfg) if ("gold", "daily") in {tuple(k.path) for k in a.keys}]
    assert {tuple(d.path) for d in models.asset_deps[dg.AssetKey(["gold", "daily"])]} == {("raw", "trips")}


def test_clean_file_materializes_both_dirty_one_blocks_downstream(spark, tmp_path, instance):
    cfg, reader = _lake(tmp_path)
    landing = tmp_path / "landing"
    ok = _materialize(cfg, [str(trips_file(landing, "a.parquet", 40))], instance)
    assert ok.success
    mats = {tuple(e.asset_key.path) for e in ok.asset_materializations_for_node("raw_trips")}
    assert mats == {("raw", "trips")}
    assert {tuple(e.asset_key.path) for e in ok.asset_materializations_for_node("wap_models")} == {("gold", "daily")}
    assert _checks(ok) == {
        "raw.trips:not_null_passenger_count": (True, "ERROR"),
        "raw.trips:row_count_min_1": (True, "ERROR"),
        "gold.daily:not_null_day": (True, "ERROR"),
    }
    (mat,) = ok.asset_materializations_for_node("raw_trips")
    snapshot = mat.metadata["snapshot_id"].value
    assert snapshot == reader.main("raw.trips") and len(reader.rows("raw.trips")) == 40
    daily_before = reader.main("gold.daily")

    dirty = trips_file(landing, "b.parquet", 40, null_rate=0.25, start_id=100)
    bad = _materialize(cfg, [str(dirty)], instance)
    assert not bad.success
    assert _checks(bad)["raw.trips:not_null_passenger_count"] == (False, "ERROR")
    assert bad.asset_materializations_for_node("raw_trips") == []
    failure = next(e for e in bad.all_events if e.event_type_value == "STEP_FAILURE")
    assert "blocked by raw.trips: not_null(passenger_count)" in failure.event_specific_data.error.message
    assert "wap report" in failure.event_specific_data.error.message
    skipped = [e.step_key for e in bad.all_events if e.event_type_value in ("STEP_SKIPPED", "STEP_UPSTREAM_FAILED")]
    assert skipped == [] or "wap_models" in skipped
    assert "wap_models" not in {e.step_key for e in bad.all_events if e.event_type_value == "STEP_START"}
    # Main unchanged on both tables; the blocked run's branch kept (on_failure = keep); no retry of the step.
    assert reader.main("raw.trips") == snapshot and reader.main("gold.daily") == daily_before
    assert len(reader.rows("raw.trips")) == 40 and len(reader.branches("raw.trips")) == 1
    assert len([e for e in bad.all_events if e.event_type_value == "STEP_START" and e.step_key == "raw_trips"]) == 1
    # The instance's record: the check's last evaluation failed, the asset's last materialization is the clean one.
    records = instance.get_latest_materialization_event(dg.AssetKey(["raw", "trips"]))
    assert records.asset_materialization.metadata["snapshot_id"].value == snapshot


def test_held_review_warns_and_leaves_downstream_pending(spark, tmp_path, instance):
    cfg, reader = _lake(tmp_path, review="always")
    res = _materialize(cfg, [str(trips_file(tmp_path / "landing", "a.parquet", 30))], instance)
    assert res.success  # nothing failed: a person decides
    checks = _checks(res)
    assert checks["raw.trips:review"] == (False, "WARN")
    assert checks["raw.trips:not_null_passenger_count"] == (True, "ERROR")
    assert res.asset_materializations_for_node("raw_trips") == []
    obs = [e for e in res.all_events if e.event_type_value == "ASSET_OBSERVATION"]
    assert obs and obs[0].asset_observation_data.asset_observation.metadata["status"].value == "awaiting_review"
    assert "wap_models" not in {e.step_key for e in res.all_events if e.event_type_value == "STEP_START"}
    assert reader.rows("raw.trips") == []  # nothing on main until approved


def test_component_yaml_through_the_dagster_cli(spark, tmp_path):
    """`dagster asset materialize` on a defs folder whose defs.yaml names the Component: a real CLI process."""
    cfg, reader = _lake(tmp_path)
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE / "wap_defs", project / "wap_defs")
    shutil.copy(EXAMPLE / "definitions.py", project / "definitions.py")
    shutil.copy(cfg, project / "wap.toml")  # the example's defs.yaml names ../../wap.toml
    f = trips_file(tmp_path / "landing", "a.parquet", 25)
    dagster = Path(sys.executable).with_name("dagster")
    config = f'{{"ops": {{"raw_trips": {{"config": {{"files": ["{f}"]}}}}}}}}'
    home = tmp_path / "dagster-home"
    home.mkdir()
    cmd = [str(dagster), "asset", "materialize", "-f", str(project / "definitions.py"), "--select", "*"]
    got = subprocess.run(
        [*cmd, "--config-json", config], capture_output=True, text=True, timeout=600, check=False,
        env=env(DAGSTER_HOME=str(home)), cwd=project,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr[-3000:]
    assert "RUN_SUCCESS" in got.stderr + got.stdout
    assert len(reader.rows("raw.trips")) == 25 and reader.main("gold.daily") is not None


SDP_TABLES = """
[tables."sales.orders"]
checks = [{ check = "not_null", column = "id" }, { check = "between", column = "amount", min = 0 }]

[tables."sales.big_orders"]
checks = [{ check = "row_count", min = 1 }]
"""


def test_an_sdp_pipeline_is_one_multi_asset_its_datasets_checked_and_a_block_materializes_none(
    spark, tmp_path, instance
):
    from support.sdp_project import project
    from wapflow.integrations.dagster import WapflowResource, wap_assets

    catalog = f"dg{next(_n)}_{os.getpid()}"
    cfg = write_config(tmp_path, SDP_TABLES, catalog=catalog)
    reader = LazyReader(tmp_path, catalog)
    spec = project(tmp_path / "shop")
    assets = wap_assets(cfg, pipelines={str(spec): ["sales.orders", "sales.big_orders"]})
    (pipe,) = [a for a in assets if ("sales", "orders") in {tuple(k.path) for k in a.keys}]
    assert {tuple(k.path) for k in pipe.keys} == {("sales", "orders"), ("sales", "big_orders")}
    resources = {"wapflow": WapflowResource(config=str(cfg))}
    ok = dg.materialize([pipe], resources=resources, instance=instance, raise_on_error=False)
    assert ok.success
    assert {tuple(e.asset_key.path) for e in ok.get_asset_materialization_events()} == {
        ("sales", "orders"),
        ("sales", "big_orders"),
    }
    assert all(passed for passed, _ in _checks(ok).values()) and len(_checks(ok)) == 3
    before = reader.main("sales.orders")
    assert len(reader.rows("sales.orders")) == 20

    project(tmp_path / "shop", shift=3)  # three negative amounts: the between check fails
    bad = dg.materialize([pipe], resources=resources, instance=instance, raise_on_error=False)
    assert not bad.success
    assert _checks(bad)["sales.orders:between_amount_min_0"] == (False, "ERROR")
    assert bad.get_asset_materialization_events() == []  # neither dataset: one commit or none
    assert reader.main("sales.orders") == before
