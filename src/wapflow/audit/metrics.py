"""What the audit reads from Iceberg metadata instead of scanning rows: the added files' column metrics.

The audit's own type, so the audit (whose check types are part of wap.toml's model) needs nothing of the
lakehouse that produces it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FileMetrics:
    """Per-column metrics summed over the data files a run added, or live on main (from Iceberg metadata).

    Produced by wapflow.lakehouse.tables (summed_file_metrics) from the `entries` or `files` metadata table; the
    audit reads them to answer checks without a scan, `wap diff` to show main beside a batch.
    Keys are lower-cased column names.
    """

    rows: int
    null_counts: dict[str, int | None] = field(default_factory=dict)  # None: not tracked for some file
    nan_counts: dict[str, int | None] = field(default_factory=dict)
    # Bounds are whatever Spark returns for the column's type (int, float, date, datetime, Decimal, str...).
    lower: dict[str, Any] = field(default_factory=dict)  # None: unknown for some file
    upper: dict[str, Any] = field(default_factory=dict)
    columns: set[str] = field(default_factory=set)  # columns some file holds values of (a value count)
