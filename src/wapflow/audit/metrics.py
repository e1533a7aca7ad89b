"""What the audit reads from Iceberg metadata instead of scanning rows: the added files' column metrics.

The audit's own type, so the audit (whose check types are part of wap.toml's model) needs nothing of the
lakehouse that produces it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FileMetrics:
    """Per-column metrics summed over the data files a run added, or live on main (from Iceberg metadata).

    Produced by summed_file_metrics from Spark's `entries` or `files` metadata table (wapflow.lakehouse.tables)
    or the manifests (wapflow.lakehouse.manifests); the
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
    # Live on a branch: the rows a reader of its head gets (the snapshot's count, deletes applied). `rows` is the
    # data files' records, the denominator of their null counts; on a merge-on-read (v3) table it also counts
    # the rows that deletion vectors removed. None: not a branch's head, or a snapshot without a total.
    reader_rows: int | None = None

    @property
    def rows_read(self) -> int:
        """The rows a reader gets: reader_rows where known, else the files' records."""
        return self.reader_rows if self.reader_rows is not None else self.rows


def summed_file_metrics(files: Iterable[tuple[int, Mapping[str, Any]]]) -> FileMetrics:
    """Per-column metrics of data files (each: its record count, its `readable_metrics` as a dict of Rows or
    dicts) summed: null and NaN counts added, bounds widened; None where some file does not track one. A
    column is in `columns` when some file holds values of it (a value count)."""
    fm = FileMetrics(rows=0)
    first = True
    for count, metrics in files:
        fm.rows += count
        for col, met in metrics.items():
            key = col.lower()
            met = met.asDict() if hasattr(met, "asDict") else dict(met or {})
            if met.get("value_count") is not None:
                fm.columns.add(key)
            for target, name in ((fm.null_counts, "null_value_count"), (fm.nan_counts, "nan_value_count")):
                v = met.get(name)
                if first:
                    target[key] = v
                elif target.get(key) is not None:
                    target[key] = None if v is None else target[key] + v
            lo, hi = met.get("lower_bound"), met.get("upper_bound")
            if first:
                fm.lower[key], fm.upper[key] = lo, hi
            else:
                cur_lo, cur_hi = fm.lower.get(key), fm.upper.get(key)
                fm.lower[key] = None if lo is None or cur_lo is None else min(lo, cur_lo)
                fm.upper[key] = None if hi is None or cur_hi is None else max(hi, cur_hi)
        first = False
    return fm
