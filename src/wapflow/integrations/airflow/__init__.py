"""wapflow as an Airflow 3 provider (`pip install 'wapflow[airflow]'`): operators for `wap run`, `wap ingest`,
`wap run-tables` and `wap pipelines run`, a deferrable wait for a run held for review, OpenLineage facets.

    from wapflow.integrations.airflow import WapIngestOperator, WapRunOperator

    land = WapRunOperator(task_id="land", table="raw.trips", files=["/landing/{{ ds }}.parquet"], config="wap.toml",
                          retries=3)
    silver = WapRunTablesOperator(...)        # or WapModelsOperator, WapPipelineOperator
    land >> silver                            # a blocked land fails at once (no retry): silver never runs

Airflow finds the provider through the `apache_airflow_provider` entry point (`get_provider_info` below imports
nothing of Airflow). The operators are in `operators`, the trigger in `triggers`; importing this package imports
them lazily, so `airflow providers list` costs nothing.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ReviewTrigger",
    "WapIngestOperator",
    "WapModelsOperator",
    "WapOperator",
    "WapPipelineOperator",
    "WapRunOperator",
    "WapRunTablesOperator",
    "get_provider_info",
]

_LAZY = {
    "ReviewTrigger": "wapflow.integrations.airflow.triggers",
    "WapIngestOperator": "wapflow.integrations.airflow.operators",
    "WapModelsOperator": "wapflow.integrations.airflow.operators",
    "WapOperator": "wapflow.integrations.airflow.operators",
    "WapPipelineOperator": "wapflow.integrations.airflow.operators",
    "WapRunOperator": "wapflow.integrations.airflow.operators",
    "WapRunTablesOperator": "wapflow.integrations.airflow.operators",
}


def get_provider_info() -> dict[str, Any]:
    """What `airflow providers list` shows and where Airflow finds the operators and the trigger."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        versions = [version("wapflow")]
    except PackageNotFoundError:  # a source checkout that is not installed
        versions = []
    return {
        "package-name": "wapflow",
        "name": "wapflow",
        "description": "Write-Audit-Publish for Apache Iceberg on Apache Spark: runs audited on a branch, "
        "published only when their checks pass",
        "versions": versions,
        "integrations": [{"integration-name": "wapflow", "tags": ["software"]}],
        "operators": [{"integration-name": "wapflow", "python-modules": ["wapflow.integrations.airflow.operators"]}],
        "triggers": [{"integration-name": "wapflow", "python-modules": ["wapflow.integrations.airflow.triggers"]}],
    }


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
