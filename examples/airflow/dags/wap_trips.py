"""A landed file through wapflow in Airflow: published into raw.trips, then gold.daily derived from it.

A clean file publishes both. A dirty one (nulls in passenger_count) is blocked: the `land` task fails at once,
without retry, and `daily` never runs (upstream_failed), so gold.daily stays as it was. A transient failure
(a commit conflict, a publish lock held too long) is retried by Airflow and resumes the same wapflow run.

    airflow dags test wap_trips -c '{"file": "/data/landing/2026-12-01.parquet"}'
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, Param

from wapflow.integrations.airflow import WapModelsOperator, WapRunOperator

CONFIG = os.environ.get("WAP_CONFIG", str(Path(__file__).resolve().parents[1] / "wap.toml"))

with DAG(
    "wap_trips",
    schedule=None,
    params={"file": Param("landing/trips.parquet", type="string", description="the landed file")},
    default_args={"retries": 2, "retry_delay": timedelta(seconds=20)},
    tags=["wapflow"],
):
    land = WapRunOperator(task_id="land", table="raw.trips", files=["{{ params.file }}"], config=CONFIG)
    daily = WapModelsOperator(task_id="daily", models=["gold.daily"], config=CONFIG)
    land >> daily
