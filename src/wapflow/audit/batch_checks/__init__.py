"""Batch-level check types: one verdict for the whole batch (a rate, a count, a key, a join, a query).

One module per family of check: bounds (null_rate, row_count, freshness, max_change), keys (unique,
unique_in_table, foreign_key), reconcile, control (control_totals: the producer's manifest), history
(volume, anomaly, schema_change: judged against the table's published runs) and custom_sql. Every name is
exported from here too: callers import them from wapflow.audit.batch_checks, and audit.spec registers them.
"""

from __future__ import annotations

from wapflow.audit.batch_checks.bounds import (
    CHANGE_METRICS,
    FreshnessCheck,
    MaxChangeCheck,
    NullRateCheck,
    RowCountCheck,
)
from wapflow.audit.batch_checks.control import ControlTotalsCheck
from wapflow.audit.batch_checks.custom_sql import CustomSqlCheck
from wapflow.audit.batch_checks.history import (
    MEANS,
    AnomalyCheck,
    SchemaChangeCheck,
    VolumeCheck,
    metric_rhythm,
    metric_weekdays,
    schema_diff,
    schema_of,
    seasonal,
    short_history,
    with_rhythm,
)
from wapflow.audit.batch_checks.keys import (
    BIT_WORD_VALUES_PER_ROW,
    ForeignKeyCheck,
    UniqueCheck,
    UniqueInTableCheck,
    duplicate_rows_by_bit_words,
)
from wapflow.audit.batch_checks.reconcile import FLOAT_SLACK, ReconcileCheck, reconciles

__all__ = [
    "BIT_WORD_VALUES_PER_ROW",
    "CHANGE_METRICS",
    "FLOAT_SLACK",
    "MEANS",
    "AnomalyCheck",
    "ControlTotalsCheck",
    "CustomSqlCheck",
    "ForeignKeyCheck",
    "FreshnessCheck",
    "MaxChangeCheck",
    "NullRateCheck",
    "ReconcileCheck",
    "RowCountCheck",
    "SchemaChangeCheck",
    "UniqueCheck",
    "UniqueInTableCheck",
    "VolumeCheck",
    "duplicate_rows_by_bit_words",
    "metric_rhythm",
    "metric_weekdays",
    "reconciles",
    "schema_diff",
    "schema_of",
    "seasonal",
    "short_history",
    "with_rhythm",
]
