"""[tables."NS.TABLE"] and [runs.NAME]: one table's checks and policies, and named multi-table runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from wapflow.audit.spec import Check, ControlTotalsCheck
from wapflow.config.base import _duration, _Strict
from wapflow.config.maintenance import MaintenanceConfig
from wapflow.errors import ConfigError
from wapflow.sql.layout import Layout, layout_of, parse_partition_by, parse_sort_by
from wapflow.vocabulary import parse_duration


def _read_only_condition(v: str | None, field_name: str) -> str | None:
    """A user's SQL condition (delete_when, replace_where) accepted only as one read-only expression."""
    from wapflow.audit import sqlguard
    from wapflow.audit.checktype import read_only

    return None if v is None else read_only(sqlguard.check_expression_text, v, field_name)


class TableConfig(_Strict):
    """One table's checks and policies. A table with no checks (no section, or a section without any) is
    published only on the user's word: `checks = []` written here, or --no-checks (WapConfig.audit_consent)."""

    format: Literal["parquet", "csv", "json"] | None = None  # json: JSON lines; unset: from the file extension
    # A blocked run's branch: kept for inspection, or dropped.
    on_failure: Literal["keep", "drop"] = "keep"
    checks: list[Check] = Field(default_factory=list)
    # Schema contract: strict (any difference blocks), add_columns (new nullable columns are added
    # when the run publishes), ignore_extra (extra columns are dropped and reported).
    schema_policy: Literal["strict", "add_columns", "ignore_extra"] = Field(default="strict", alias="schema")
    # Rows failing row-level error checks: block the run, or divert them to <table>__quarantine.
    on_row_failure: Literal["block", "quarantine"] = "block"
    # With quarantine: block the run if more than this fraction (0..1) of its rows would be quarantined.
    max_quarantine_rate: float | None = Field(default=None, ge=0, le=1)
    # Columns that identify a row in audit samples (default: the first unique check's columns).
    key: list[str] = Field(
        default_factory=list,
        description='the columns identifying a row: the merge key (mode = "merge"), and the columns shown with '
        "audit samples (default: the first unique check's columns)",
    )
    # Reader options passed to Spark (e.g. {"delimiter" = ";"} for CSV).
    read_options: dict[str, str] = Field(default_factory=dict)
    # The table's layout (wapflow.sql.layout parses it; docs/guides/layout.md).
    partition_by: list[str] | None = Field(
        default=None,
        description='Iceberg partition transforms, e.g. ["day(ts)", "bucket(16, id)", "region"] (identity, '
        "year/month/day/hour(col), bucket(N, col), truncate(N, col)): the table wapflow creates is partitioned "
        "so, an existing table's spec is evolved to it before a run writes (old files keep theirs); [] means "
        "unpartitioned; unset leaves the table's spec as it is",
    )
    sort_by: list[str] | None = Field(
        default=None,
        description='The table\'s write sort order, e.g. ["ts", "id DESC NULLS LAST"]: writes are range-distributed '
        "and sorted by it; [] means unsorted; unset leaves the table's sort order as it is",
    )
    mode: Literal["append", "merge", "replace"] = Field(
        default="append",
        description="how a batch changes the table: append its rows; merge them by `key` (update matched rows, "
        "insert new ones, delete where `delete_when`); replace the partitions it touches (or `replace_where`). "
        "See the Write modes guide",
    )
    delete_when: str | None = Field(
        default=None,
        min_length=1,
        description='mode = "merge": a read-only SQL condition over the batch\'s columns marking a row as a delete '
        "of its key (a change feed's op = 'D'); such rows are never inserted",
    )
    order_by: list[str] = Field(
        default_factory=list,
        description='mode = "merge": columns ordering the changes of one key within a batch; the row with the '
        "greatest values is applied (without it, two rows of one key block the run)",
    )
    replace_where: str | None = Field(
        default=None,
        min_length=1,
        description='mode = "replace": a read-only SQL condition; the table\'s rows matching it are replaced by '
        "the batch (required on an unpartitioned table)",
    )
    time_column: str | None = Field(
        default=None,
        min_length=1,
        description="a date or timestamp column holding when each row happened: a batch's day is the median day "
        "of it, recorded with the run's metrics, and anomaly checks' weekly seasonality judges the batch by that "
        "day (a backfill or a late delivery by its data's day, not the day it ran); unset: the day the run started",
    )
    holidays: str | None = Field(
        default=None,
        min_length=2,
        description='the public holidays the data follows ("US", "US-NY", "GB", "DE-BY": a country, optionally a '
        "subdivision): on a holiday and the day either side of it, anomaly and volume checks judge counts and sums "
        "with a wider least change (x/÷ 1.6), since a year of history holds each holiday once; the batch's day is "
        "that of time_column where named",
    )
    format_version: Literal[2, 3] | None = Field(
        default=None,
        description="the Iceberg format version wapflow creates this table with (unset: [lakehouse] "
        "format_version); an existing table is upgraded only by `wap maintain TABLE --upgrade-format 3`",
    )
    maintenance: MaintenanceConfig | None = Field(
        default=None, description="this table's overrides of [maintenance] (any of its keys)"
    )
    adopt_parquet: bool = Field(
        default=True,
        description="landed parquet files whose columns are exactly the table's (an append to an unsorted "
        "table, each file of one partition of a partitioned one) are validated by one scan and copied into the "
        "table as they are, not rewritten by Spark; false: always rewrite (the table's codec, row groups and "
        "file size for every file)",
    )
    # A person looks before main changes: "never" publishes a run whose audit passed; "on_warn" holds it as
    # awaiting_review (branch kept, main unchanged, exit 6) when a warn-severity check failed; "always" holds
    # every run that passed. `wap approve RUN --reason ...` publishes it (audited again against main as it is
    # then), `wap reject RUN --reason ...` drops its branch. See the Review guide.
    review: Literal["never", "on_warn", "always"] = "never"
    review_timeout: str | None = Field(
        default=None,
        description="how long a run may await review (a duration: 48h, 7d), counted from when it was held; then "
        "`on_review_timeout` applies, enforced by `wap watch` on every tick and by `wap expire-reviews`; unset: "
        "a held run waits until someone decides",
    )
    on_review_timeout: Literal["reject", "alert"] = Field(
        default="alert",
        description='a held run past `review_timeout`: "alert" sends `awaiting_review` again, once per timeout '
        'period; "reject" rejects it as `wap reject` does (branch dropped, files `rejected`, by "wapflow", reason '
        '"review timed out after 48h"), and `wap approve` of it is refused',
    )

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("holidays")
    @classmethod
    def _holidays(cls, v: str | None) -> str | None:
        if v is None:
            return None
        from wapflow.audit.calendars import parse

        country, subdiv = parse(v)
        return country if subdiv is None else f"{country}-{subdiv}"

    @field_validator("partition_by", "sort_by")
    @classmethod
    def _layout(cls, v: list[str] | None, info: ValidationInfo) -> list[str] | None:
        """Parsed at load; kept in canonical spelling ("days(ts)" -> "day(ts)")."""
        if v is None:
            return v
        try:
            if info.field_name == "partition_by":
                return [f.text() for f in parse_partition_by(v)]
            return [s.text() for s in parse_sort_by(v)]
        except ConfigError as e:
            raise ValueError(f"{e.message} ({e.hint})" if e.hint else e.message) from None

    @field_validator("review_timeout", mode="before")
    @classmethod
    def _review_timeout(cls, v: Any) -> Any:
        v = _duration(v)
        if v is not None and parse_duration(v) <= 0:
            raise ValueError(f"{v!r}: use a positive duration (48h, 7d), or leave it unset")
        return v

    def review_timeout_seconds(self) -> float | None:
        """review_timeout in seconds (None: a held run waits until someone decides)."""
        return None if self.review_timeout is None else parse_duration(self.review_timeout)

    def holds_for_review(self, warned: bool) -> bool:
        """A run whose audit passed (`warned`: with a warn-severity check failed) waits for a person first."""
        return self.review == "always" or (self.review == "on_warn" and warned)

    def layout(self) -> Layout:
        """partition_by and sort_by as typed values (wapflow.sql.layout)."""
        return layout_of(self.partition_by, self.sort_by)

    @model_validator(mode="after")
    def _quarantine(self) -> TableConfig:
        if self.max_quarantine_rate is not None and self.on_row_failure != "quarantine":
            raise ValueError('max_quarantine_rate needs on_row_failure = "quarantine"')
        if self.on_row_failure == "quarantine" and self.schema_policy == "add_columns":
            raise ValueError('on_row_failure = "quarantine" cannot be combined with schema = "add_columns" yet')
        return self

    @field_validator("delete_when", "replace_where")
    @classmethod
    def _pure_condition(cls, v: str | None, info: Any) -> str | None:
        return _read_only_condition(v, str(info.field_name))

    @model_validator(mode="after")
    def _trailer_skipped(self) -> TableConfig:
        """A control_totals trailer line must be skipped by Spark's reader (its `comment`), or it is a row."""
        comment = {k.lower(): v for k, v in self.read_options.items()}.get("comment")
        for chk in self.checks:
            if isinstance(chk, ControlTotalsCheck) and chk.declared_in == "trailer" and comment != chk.trailer:
                raise ValueError(
                    f'control_totals with declared_in = "trailer" needs read_options = {{ comment = "{chk.trailer}" '
                    "}: Spark must skip the trailer line, or it is read as a row of the batch"
                )
        return self

    @model_validator(mode="after")
    def _mode(self) -> TableConfig:
        self.check_mode()
        return self

    def check_mode(self) -> None:
        """The keys a write mode needs, and only with that mode (write.modes holds what each mode does); a
        ValueError says what is missing. Also for a table's settings as a source changes them (WapConfig.table)."""
        if self.mode == "merge" and not self.key:
            raise ValueError('mode = "merge" needs key = [...], the columns matching a batch row to a table row')
        if self.mode != "merge" and (self.delete_when or self.order_by):
            raise ValueError(f'delete_when and order_by need mode = "merge" (mode is "{self.mode}")')
        if self.mode != "replace" and self.replace_where:
            raise ValueError(f'replace_where needs mode = "replace" (mode is "{self.mode}")')
        if self.mode == "replace" and self.on_row_failure == "quarantine":
            raise ValueError('mode = "replace" cannot be combined with on_row_failure = "quarantine" yet')
        if self.mode != "append" and self.schema_policy == "add_columns":
            # The batch's new columns must be in the table's schema before its rows change in place, and a
            # table's schema is shared by its branches: adding them would change main's before the audit.
            raise ValueError(
                f'mode = "{self.mode}" cannot be combined with schema = "add_columns": the new columns would '
                "change main's schema before the audit; add them to the table first (Spark SQL ALTER TABLE ... "
                'ADD COLUMNS), then merge with schema = "strict" or "ignore_extra"'
            )

    def sample_key(self) -> list[str]:
        """Columns that identify a row in audit samples: `key`, else the first unique check's columns."""
        if self.key:
            return list(self.key)
        for chk in self.checks:
            if chk.keyed:
                return chk.columns()
        return []


class RunConfig(_Strict):
    """A named multi-table run (`wap run-tables --run NAME`): one source list per table, one atomic commit."""

    # "ns.table" = a source or a list of sources (relative paths resolve against wap.toml's folder).
    tables: dict[str, list[str]] = Field(min_length=1)
    branch: str | None = None  # the run's branch on every table (or the Nessie branch); unset: wap_<run-id>

    @field_validator("tables", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {k: [x] if isinstance(x, str) else x for k, x in v.items()}
        return v


def write_settings(
    mode: str | None = None,
    key: Sequence[str] | None = None,
    delete_when: str | None = None,
    order_by: Sequence[str] | None = None,
    replace_where: str | None = None,
) -> dict[str, Any]:
    """What one run sets of WRITE_KEYS for its table (wapflow.write, a transaction's write): the given ones."""
    given = {
        "mode": mode,
        "key": list(key) if key is not None else None,
        "delete_when": delete_when,
        "order_by": list(order_by) if order_by is not None else None,
        "replace_where": replace_where,
    }
    return {k: v for k, v in given.items() if v is not None}
