"""wap.toml: where the lakehouse lives and what each table's audit demands.

Validated up front with errors that name the file, the section and the key, so a
typo is found before any JVM starts or any data moves.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from wapflow.audit.checktype import Scalar
from wapflow.audit.spec import CHECK_MODELS, CHECK_TYPES

# Check models live in wapflow.audit.spec; these two stay importable from here for existing callers
# (wapflow.pipeline). New code imports them from wapflow.audit.spec.
from wapflow.audit.spec import Check as Check
from wapflow.audit.spec import NotNullCheck as NotNullCheck
from wapflow.config.models import WRITE_KEYS, ModelConfig, model_order
from wapflow.errors import ConfigError, did_you_mean
from wapflow.spark.kind import is_connect_url
from wapflow.sql.layout import Layout, layout_of, parse_partition_by, parse_sort_by
from wapflow.storage.settings import SECRET_FIELDS, S3Config
from wapflow.vocabulary import ALERT_EVENTS as ALERT_EVENTS
from wapflow.vocabulary import QUARANTINE_SUFFIX
from wapflow.vocabulary import parse_duration as parse_duration

CONFIG_ENV = "WAP_CONFIG"
# The user's word a table without checks publishes on (WapConfig.audit_consent), as reports say it.
NO_CHECKS_DECLARED = "checks = [] in wap.toml"
NO_CHECKS_FLAG = "--no-checks"
DEFAULT_CONFIG_NAME = "wap.toml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- sections ---------------------------------------------------------------------------------


class LakehouseConfig(_Strict):
    """Where the tables live and how Spark runs: the catalog, the warehouse, the master, the jars, the run store."""

    # A folder, or s3://bucket/prefix (then an [s3] section configures the endpoint and credentials).
    warehouse: str = "./lakehouse"
    # sqlite: the embedded catalog (Iceberg's JDBC catalog on <warehouse>/catalog.db); or an Iceberg catalog type.
    catalog: Literal["sqlite", "jdbc", "rest", "hive", "glue", "hadoop", "custom", "nessie"] = "sqlite"
    # Spark catalog name; PyIceberg's SqlCatalog must use the same name to see the tables.
    catalog_name: str = "lakehouse"
    # Passed through to Iceberg's Spark catalog (uri, credential, io-impl, ...).
    catalog_properties: dict[str, str] = Field(default_factory=dict)
    # Where Spark runs: local[*], spark://host:7077, k8s://https://..., sc://host:15002 (Spark Connect).
    master: str = "local[*]"
    driver_memory: str = "2g"  # spark.driver.memory of the driver (the `wap` process on a local master)
    # Where the commands that need Spark (run, run-tables, ingest, backfill, query, revert, maintain, discard)
    # run: "auto" hands them to a warm wapflow engine, a background process of this user that keeps one
    # SparkSession for this config (started by the first such command; `wap engine status`, `stop`, `logs`);
    # "off" starts Spark in each command; "sc://host:15002" makes each command a client of that Spark Connect
    # server. `--no-engine`, and WAP_ENGINE=off or auto, override it for one command or a shell.
    engine: str = "auto"
    engine_idle: str = "15m"  # the engine stops after this long without a command (a duration: 90s, 15m, 1h)
    # Any extra Spark conf, e.g. { "spark.sql.shuffle.partitions" = "64" }.
    spark_conf: dict[str, Scalar] = Field(default_factory=dict)
    # JVM jars: by default downloaded once from Maven Central into jars_dir.
    # Offline clusters list local jar paths here instead.
    jars: list[str] = Field(default_factory=list)
    extra_packages: list[str] = Field(default_factory=list)  # more Maven coordinates to fetch (a catalog's driver)
    # download: wapflow fetches the jars into jars_dir; ivy: Spark resolves them (spark.jars.packages).
    jar_resolution: Literal["download", "ivy"] = "download"
    maven_repo: str = "https://repo1.maven.org/maven2"  # or a corporate mirror
    jars_dir: str | None = None  # unset: $WAP_JARS_DIR, else ~/.cache/wapflow/jars
    # Runs, the file ledger, alert deliveries and publish locks: any SQLAlchemy URL (postgresql:// uses
    # psycopg 3). Unset: wapflow_runs.db beside the catalog (in .wap/ beside wap.toml for an S3 warehouse).
    run_store: str | None = None
    # How long a run waits for another run's publish of the same table before failing (transient: retried).
    publish_lock_timeout: float = Field(default=600.0, gt=0)
    format_version: Literal[2, 3] = Field(
        default=2,
        description="the Iceberg format version of the tables wapflow creates (a table's own `format_version` "
        "overrides it); 3 adds deletion vectors and row lineage but needs v3 readers (the Format v3 guide); "
        "an existing table keeps its version until `wap maintain TABLE --upgrade-format 3`",
    )
    # catalog = "nessie": the server's REST API (e.g. http://127.0.0.1:19120/api/v2) and an optional
    # bearer token (or $WAP_NESSIE_TOKEN); the token is never printed.
    nessie_uri: str | None = None
    nessie_token: str | None = Field(default=None, repr=False)  # unset: $WAP_NESSIE_TOKEN
    # A PEM file (relative to wap.toml's folder) of the private CA that signed an https:// catalog server's
    # certificate (catalog = "rest" or "nessie") or a Spark Connect server's (sc://...;use_ssl=true): trusted
    # besides the public CAs, by wapflow, by Spark's JVM and by the Spark Connect client's gRPC channel.
    ca_bundle: str | None = None

    @field_validator("catalog_name")
    @classmethod
    def _catalog_name(cls, v: str) -> str:
        from wapflow.sql.identifiers import validate_part

        return validate_part(v, what="catalog_name")

    @field_validator("run_store")
    @classmethod
    def _run_store(cls, v: str | None) -> str | None:
        return _database_url(v)

    @field_validator("engine")
    @classmethod
    def _engine(cls, v: str) -> str:
        v = v.strip()
        if v not in ("auto", "off") and not is_connect_url(v):
            raise ValueError(f'{v!r} is not "auto", "off" or a Spark Connect URL (sc://host:15002)')
        return v

    @field_validator("engine_idle")
    @classmethod
    def _engine_idle(cls, v: str) -> str:
        if parse_duration(v) <= 0:
            raise ValueError(f"{v!r} is not a positive duration (e.g. 90s, 15m, 1h)")
        return v.strip()

    @model_validator(mode="after")
    def _jdbc_catalog(self) -> LakehouseConfig:
        """A JDBC catalog needs its database's uri; a password goes in jdbc.password, never in the uri
        (Iceberg and Spark put the uri in their error messages)."""
        uri = self.catalog_properties.get("uri")
        if self.catalog == "jdbc" and not uri:
            raise ValueError(
                'catalog = "jdbc" needs catalog_properties.uri, e.g. catalog_properties = { uri = '
                '"jdbc:postgresql://db-host:5432/lakehouse", "jdbc.user" = "wap", "jdbc.password" = "..." }'
            )
        if self.catalog == "jdbc" and uri and not uri.startswith("jdbc:"):
            raise ValueError(
                f'catalog = "jdbc": catalog_properties.uri must be a JDBC URL (jdbc:postgresql://host:5432/db), '
                f"not {uri.split(':', 1)[0]}:..."
            )
        if uri and uri.startswith("jdbc:") and re.search(r"[?&;]password=", uri, re.IGNORECASE):
            raise ValueError(
                'catalog_properties.uri carries a password: put it in catalog_properties."jdbc.password" '
                "instead (the uri appears in error messages)"
            )
        return self


def _duration(v: Any) -> Any:
    """Durations stay written as the user wrote them (shown so in messages); checked here. "never" (or
    "off") is how wap.toml, which has no null, unsets an optional one."""
    if v is None or (isinstance(v, str) and v.strip().lower() in ("never", "off")):
        return None
    parse_duration(v)
    return str(v) if not isinstance(v, str) else v.strip()


# Orphan removal deletes files no snapshot references: a running write's files are such files until its
# commit. Below this age a write could still be running, so wap.toml cannot ask for less (Iceberg's
# remove_orphan_files refuses less than 24 hours too).
ORPHAN_MIN_SECONDS = 86400.0


class MaintenanceConfig(_Strict):
    """[maintenance]: what `wap maintain` (and `wap watch`, every `every`) does to keep a table small and fast:
    compaction, manifest rewrite, snapshot expiry, orphan-file removal and the retention of kept branches.
    `[tables."NS.TABLE".maintenance]` overrides any of these keys for one table. Snapshots wapflow still
    needs are never expired: those of runs published within `revert_window`, every branch's snapshots back
    to where it left main, and the newest `keep_last` of main."""

    enabled: bool = Field(default=True, description="false: `wap maintain` and `wap watch` leave the table alone")
    every: str | None = Field(
        default="1h",
        description="`wap watch` maintains the tables of its sources this often (a duration: 30m, 1h, 1d); "
        '"never": only `wap maintain` does',
    )
    target_file_size: int = Field(
        default=128 * 2**20,
        gt=0,
        description='compaction writes data files of about this size ("128MB", "512MiB", or bytes)',
    )
    min_input_files: int = Field(
        default=5, ge=1, description="compaction rewrites a partition only when it has at least this many small files"
    )
    rewrite_manifests: bool = Field(default=True, description="rewrite the table's manifests after compaction")
    expire_older_than: str = Field(
        default="7d", description="snapshots older than this are expired (unless wapflow still needs them)"
    )
    keep_last: int = Field(default=10, ge=1, description="the newest this many snapshots of main are never expired")
    revert_window: str = Field(
        default="7d",
        description="runs published within this long stay revertable (`wap revert`) and idempotent by "
        "main's history: their files are not compacted, and their snapshots, with all of main's history back "
        "to them, are never expired",
    )
    orphan_older_than: str | None = Field(
        default="3d",
        description="files in the table's folder that no snapshot references and older than this are "
        "deleted (at least 1d: a running write's files are unreferenced until it commits); "
        '"never": no orphan removal',
    )
    keep_blocked_for: str | None = Field(
        default="14d",
        description="branches kept for inspection (blocked or failed runs) older than this are dropped "
        "and the drop recorded on the run; "
        '"never": kept until `wap discard`',
    )
    metadata_versions_max: int = Field(
        default=100,
        ge=1,
        description="old metadata.json files kept per table (Iceberg's write.metadata.previous-versions-max, "
        "with write.metadata.delete-after-commit.enabled set on the tables wapflow maintains)",
    )

    @field_validator("target_file_size", mode="before")
    @classmethod
    def _size(cls, v: Any) -> Any:
        return parse_bytes(v) if isinstance(v, (int, str)) and not isinstance(v, bool) else v

    @field_validator("every", "keep_blocked_for", mode="before")
    @classmethod
    def _optional_durations(cls, v: Any) -> Any:
        return _duration(v)

    @field_validator("expire_older_than", "revert_window", mode="before")
    @classmethod
    def _durations(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().lower() in ("never", "off"):
            raise ValueError("is required here: a duration (e.g. 7d)")
        return _duration(v)

    @field_validator("orphan_older_than", mode="before")
    @classmethod
    def _orphans(cls, v: Any) -> Any:
        v = _duration(v)
        if v is not None and parse_duration(v) < ORPHAN_MIN_SECONDS:
            raise ValueError(
                f"{v!r} is too young: orphan removal deletes files a running write has not committed yet; "
                'use at least 1d (default 3d), or "never" to skip orphan removal'
            )
        return v

    @field_validator("every")
    @classmethod
    def _every(cls, v: str | None) -> str | None:
        if v is not None and parse_duration(v) <= 0:
            raise ValueError(f"{v!r}: use a positive duration (30m, 1h), or leave it unset")
        return v

    def seconds(self, key: str) -> float | None:
        """A duration key in seconds (None when unset)."""
        value = getattr(self, key)
        return None if value is None else parse_duration(value)

    def merged(self, override: MaintenanceConfig | None) -> MaintenanceConfig:
        """These settings with the keys a table's own [maintenance] section sets."""
        if override is None:
            return self
        return self.model_copy(update={k: getattr(override, k) for k in override.model_fields_set})


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


_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20,
               "GIB": 2**30, "TIB": 2**40}  # fmt: skip


_T = TypeVar("_T")


def _plain_names(named: dict[str, _T], what: str) -> dict[str, _T]:
    """Names that reach commands, ids and SQL rows (sources, sinks): letters, digits, '_' and '-' only."""
    import re

    for name in named:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise ValueError(f"{what} name {name!r}: use letters, digits, '_' and '-' (at most 64)")
    return named


def _database_url(v: str | None) -> str | None:
    """A database wapflow keeps its state in (run store, DBOS): an SQLAlchemy URL, with `postgresql://`
    meaning psycopg 3 (installed with wapflow; SQLAlchemy 2.0 would pick psycopg2, which is not)."""
    if v is None or not v.strip():
        return None
    if "://" not in v:
        raise ValueError("is not a database URL (sqlite:////abs/path/runs.db or postgresql://user:pw@host:5432/db)")
    from wapflow.config.urls import normalize_url

    return normalize_url(v)


def parse_bytes(value: int | str) -> int:
    """2GB, 500MB, 1.5GiB or a plain number of bytes."""
    if isinstance(value, int):
        return value
    text = value.strip().upper().replace(" ", "")
    num = text.rstrip("KMGTIB")
    unit = text[len(num) :]
    if unit not in _SIZE_UNITS or not num:
        raise ValueError(f"{value!r} is not a size (e.g. 2GB, 500MB, 1.5GiB, or bytes)")
    return int(float(num) * _SIZE_UNITS[unit])


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


class SourceConfig(_Strict):
    """A landing location bound to a table (`wap ingest NAME`): every file in it published exactly once."""

    table: str  # the table the files are published to ("ns.table")
    location: str  # a folder, an s3:// prefix, or a glob ("landing/trips/*.parquet")
    format: Literal["parquet", "csv", "json"] | None = None  # else the table's, else from the extension
    max_files_per_run: int = Field(default=100, ge=1)  # small files are published together, up to this many
    max_bytes_per_run: int = Field(default=2 * 10**9, ge=1)  # and this many bytes ("2GB", "500MB", or a number)
    # A local file is taken once it has not changed for this long (its mtime is older than this).
    settle_seconds: float = Field(default=10.0, ge=0)
    # A file rewritten under the same name: a new file (its identity changed) or ignored.
    on_change: Literal["new_file", "ignore"] = "new_file"
    # Runs of a batch that failed with a transient error (catalog, network, throttling) before its files fail.
    max_attempts: int = Field(default=3, ge=1, le=20)
    # `wap watch`: list the location on this cron schedule (else every [watch] interval seconds).
    schedule: str | None = None
    # `wap watch`: S3 ObjectCreated notifications from this SQS queue ("sqs://QUEUE-NAME" on the [s3]
    # endpoint, or the queue's https:// URL); listing still runs every [watch] relist_seconds to catch
    # missed events.
    events: str | None = None
    # The write mode of this source's files, where it differs from the table's (a change feed merged into a
    # table that full loads replace); the keys that go with it as on a table. Unset: the table's.
    mode: Literal["append", "merge", "replace"] | None = Field(
        default=None,
        description="this source's write mode when it differs from the table's (append, merge or replace; see "
        "the Write modes guide); key, delete_when, order_by and replace_where below go with it, as on a table",
    )
    key: list[str] | None = Field(default=None, description='the merge key of this source\'s files (mode = "merge")')
    delete_when: str | None = Field(
        default=None, min_length=1, description='mode = "merge": this source\'s delete condition (see the table key)'
    )
    order_by: list[str] | None = Field(
        default=None, description='mode = "merge": this source\'s change order within a batch (see the table key)'
    )
    replace_where: str | None = Field(
        default=None, min_length=1, description='mode = "replace": this source\'s replace condition (see the table key)'
    )
    models: bool = Field(
        default=True,
        description="each batch also runs the models that read this source's table (and those downstream of "
        "them), published with the batch in one commit or not at all; false: the batch alone",
    )

    @field_validator("delete_when", "replace_where")
    @classmethod
    def _pure_condition(cls, v: str | None, info: Any) -> str | None:
        return _read_only_condition(v, str(info.field_name))

    def write_overrides(self) -> dict[str, Any]:
        """The table keys this source sets for its runs (mode and the keys that go with it)."""
        return {k: getattr(self, k) for k in WRITE_KEYS if getattr(self, k) is not None}

    @field_validator("schedule")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from croniter import croniter

        if not croniter.is_valid(v) or len(v.split()) != 5:
            raise ValueError(f"{v!r} is not a cron schedule (five fields: minute hour day month weekday)")
        return v

    @field_validator("events")
    @classmethod
    def _events(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not (v.startswith("sqs://") and len(v) > len("sqs://")) and not v.startswith(("https://", "http://")):
            raise ValueError(f"{v!r} is not an SQS queue (sqs://QUEUE-NAME or the queue's https:// URL)")
        return v

    @field_validator("max_bytes_per_run", mode="before")
    @classmethod
    def _bytes(cls, v: Any) -> Any:
        return parse_bytes(v) if isinstance(v, (int, str)) else v

    @field_validator("table")
    @classmethod
    def _table(cls, v: str) -> str:
        from wapflow.sql.identifiers import TableName

        return TableName.parse(v).dotted


@dataclass(frozen=True)
class Source:
    """A configured landing place, [sources.NAME], resolved: its name (the file ledger's and the alerts' handle)
    and its settings with the location absolute. Not a run's files (a run's files are RunState.files)."""

    name: str
    cfg: SourceConfig

    @property
    def table(self) -> str:
        return self.cfg.table

    @property
    def location(self) -> str:
        return self.cfg.location


class WatchConfig(_Strict):
    """`wap watch`: the long-running worker (durable runs on DBOS)."""

    # seconds between listings of a source without schedule (a local folder is listed at once when a file lands)
    interval: float = Field(default=10.0, gt=0)
    relist_seconds: float = Field(default=300.0, gt=0)  # a source with events is listed this often as well
    concurrency: int = Field(default=1, ge=1, le=64)  # runs at once in one worker (never two per table)
    # DBOS's system database (SQLAlchemy URL); default: dbos.sqlite beside the run store, or the run
    # store's PostgreSQL database.
    database: str | None = None

    @field_validator("database")
    @classmethod
    def _database(cls, v: str | None) -> str | None:
        return _database_url(v)

    # The worker's name (DBOS executor id): a worker restarted under its name resumes its interrupted runs.
    worker: str = Field(default="worker", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    stop_timeout: float = Field(default=120.0, ge=0)  # on SIGTERM/SIGINT: wait this long for running steps


# Events an alert sink can be sent (wapflow.vocabulary.ALERT_EVENTS, each said there); a sink without `events`
# gets all of them.
SINK_TYPES = ("slack", "webhook")


class AlertSinkConfig(_Strict):
    """[alerts.sinks.NAME]: where alerts go. The URL is read from the environment variable `url_env` at send
    time: webhook URLs are secrets and never appear in wap.toml, output or the run store."""

    type: Literal["slack", "webhook"]  # slack: an incoming webhook (Block Kit); webhook: JSON wapflow.alert/v1
    url_env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # the environment variable holding the URL
    events: list[str] = Field(default_factory=lambda: list(ALERT_EVENTS))  # the events this sink is sent
    timeout: float = Field(default=5.0, gt=0, le=120)  # seconds per attempt (connect, send, answer)
    max_attempts: int = Field(default=3, ge=1, le=10)  # sends of one alert (429 and 5xx are retried)

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, v: Any) -> Any:
        if isinstance(v, str) and v not in SINK_TYPES:
            raise ValueError(f"unknown sink type '{v}'{did_you_mean(v, SINK_TYPES)}; known: {', '.join(SINK_TYPES)}")
        return v

    @field_validator("events")
    @classmethod
    def _events(cls, v: list[str]) -> list[str]:
        for e in v:
            if e not in ALERT_EVENTS:
                raise ValueError(
                    f"unknown event '{e}'{did_you_mean(e, ALERT_EVENTS)}; known: {', '.join(ALERT_EVENTS)}"
                )
        return list(dict.fromkeys(v))


class AlertsConfig(_Strict):
    """[alerts]: sinks, and the thresholds of the events that have one."""

    sinks: dict[str, AlertSinkConfig] = Field(default_factory=dict)
    # A published run whose quarantined share of rows is above this (0..1) sends `quarantine_rate`.
    quarantine_rate_above: float | None = Field(default=None, ge=0, le=1)
    # `wap alerts check`: a branch kept for inspection longer than this many days sends `branch_kept`.
    branch_kept_days: int | None = Field(default=None, ge=0)
    # The dashboard's address as people open it (e.g. https://wap.example.com): `awaiting_review` alerts then link
    # to its Review page beside the approve / reject commands.
    dashboard_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")

    @field_validator("sinks")
    @classmethod
    def _sink_names(cls, v: dict[str, AlertSinkConfig]) -> dict[str, AlertSinkConfig]:
        return _plain_names(v, "sink")


LINEAGE_TRANSPORTS = ("http", "file")
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


class LineageConfig(_Strict):
    """[lineage]: OpenLineage run events (START, COMPLETE, FAIL, ABORT) of every run, sent through the
    `openlineage-python` client (the `lineage` extra: pip install 'wapflow[lineage]'). A receiver that is down,
    slow or failing costs at most its bounded time and one warning line: never a run's outcome or exit code."""

    # http: POST each event to the receiver (Marquez or any OpenLineage endpoint); file: append each event to
    # `path` as one JSON line.
    transport: Literal["http", "file"]
    url: str | None = None  # http: the receiver's base URL, e.g. http://127.0.0.1:5000 (or url_env)
    # http: the environment variable holding the base URL instead of `url` (a URL carrying a secret).
    url_env: str | None = Field(default=None, pattern=_ENV_NAME)
    endpoint: str = "api/v1/lineage"  # http: the path under the base URL events are POSTed to
    # http: the environment variable holding an API key, sent as a bearer token; never printed or stored.
    api_key_env: str | None = Field(default=None, pattern=_ENV_NAME)
    path: str | None = None  # file: the JSON-lines file (relative paths resolve against wap.toml's folder)
    namespace: str = Field(default="wapflow", min_length=1)  # the OpenLineage job namespace (the job is the table)
    timeout: float = Field(default=5.0, gt=0, le=60)  # http: seconds per attempt (connect, send, answer)
    max_attempts: int = Field(default=2, ge=1, le=5)  # http: sends of one event (5xx, refused, timeouts retried)

    @field_validator("transport", mode="before")
    @classmethod
    def _transport(cls, v: Any) -> Any:
        if isinstance(v, str) and v not in LINEAGE_TRANSPORTS:
            known = ", ".join(LINEAGE_TRANSPORTS)
            raise ValueError(f"unknown lineage transport '{v}'{did_you_mean(v, LINEAGE_TRANSPORTS)}; known: {known}")
        return v

    @model_validator(mode="after")
    def _keys_of_transport(self) -> LineageConfig:
        """Each transport's own keys, and the client installed: wap.toml asking for lineage must get it."""
        if self.transport == "http":
            if (self.url is None) == (self.url_env is None):
                raise ValueError('transport = "http" needs exactly one of url or url_env (the receiver\'s base URL)')
            if self.url is not None and not re.match(r"^https?://[^\s/]+", self.url):
                raise ValueError(f"url must be an http:// or https:// URL, got '{self.url}'")
            if self.path is not None:
                raise ValueError('path is a key of transport = "file", not "http"')
        else:
            if not self.path:
                raise ValueError('transport = "file" needs path (the JSON-lines file events are appended to)')
            extra = [k for k in ("url", "url_env", "api_key_env") if getattr(self, k) is not None]
            if extra:
                raise ValueError(f'{", ".join(extra)}: keys of transport = "http", not "file"')
        try:
            import openlineage.client  # noqa: F401 - only whether it is installed
        except ImportError:
            raise ValueError(
                "[lineage] needs the openlineage-python package, which is not installed: "
                "pip install 'wapflow[lineage]' (or remove [lineage])"
            ) from None
        return self


class OidcConfig(_Strict):
    """[dashboard.oidc]: people log in to the dashboard with an OpenID Connect provider (Streamlit's `st.login`;
    the `dashboard` extra installs Authlib) before they approve or reject a run, on any bind address; the
    decision records who the provider says they are (the verified email, else the subject). `wap dashboard`
    hands these settings to Streamlit as its `[auth]` secrets in a private file: no .streamlit/secrets.toml to
    write. Secrets stay in the environment: wap.toml names the variables, never holds the values."""

    # The provider's name as the Review page shows it: "Log in with <provider>".
    provider: str = Field(default="OpenID Connect", min_length=1, max_length=64)
    # The provider's discovery document, e.g. https://accounts.google.com/.well-known/openid-configuration;
    # `wap dashboard` fetches it at start and refuses to start (exit 2) when it does not answer.
    server_metadata_url: str = Field(pattern=r"^https?://[^\s]+$")
    client_id: str = Field(min_length=1)  # the client (application) id registered with the provider
    # The environment variable holding the client secret (required; read when `wap dashboard` starts).
    client_secret_env: str = Field(pattern=_ENV_NAME)
    # The environment variable holding the secret that signs the login cookie; unset: a random one per start
    # (restarting the dashboard then logs everyone out).
    cookie_secret_env: str | None = Field(default=None, pattern=_ENV_NAME)
    # Where the provider sends people back, registered with the provider; it ends in /oauth2callback. Unset:
    # [alerts] dashboard_url + /oauth2callback, else http://HOST:PORT/oauth2callback of `wap dashboard`.
    redirect_uri: str | None = Field(default=None, pattern=r"^https?://[^\s]+/oauth2callback$")
    # Who may decide once logged in: emails, subject ids or patterns such as "*@example.com" (case-insensitive).
    # Empty: anyone the provider logs in for this client (with Google: any Google account, unless the client is
    # limited to your organisation's users).
    allow: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _no_secret_values(cls, data: Any) -> Any:
        """A secret written into wap.toml is refused without echoing it: wap.toml names variables instead."""
        if isinstance(data, dict):
            for key in ("client_secret", "cookie_secret"):
                if key in data:
                    raise ValueError(
                        f"{key} does not go in wap.toml (a file people share and commit): put it in an environment "
                        f"variable and name that variable in {key}_env"
                    )
        return data

    @field_validator("allow")
    @classmethod
    def _allow(cls, v: list[str]) -> list[str]:
        if any(not p.strip() for p in v):
            raise ValueError("an empty entry would allow nobody: give emails or patterns such as '*@example.com'")
        return [p.strip() for p in v]

    @field_validator("client_id", "provider")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v.strip()


class DashboardConfig(_Strict):
    """[dashboard]: how `wap dashboard` lets people decide. Without [dashboard.oidc], anyone at this machine
    decides on a loopback-bound dashboard, and beyond loopback after entering $WAP_DASHBOARD_TOKEN."""

    # [dashboard.oidc]: log in with an OpenID Connect provider to approve or reject (None: no OIDC login).
    oidc: OidcConfig | None = None


class WapConfig(_Strict):
    """Everything wap.toml says: [lakehouse], [tables.*], [runs.*], [sources.*], [watch], [s3], [alerts],
    [maintenance], [lineage], [dashboard]."""

    lakehouse: LakehouseConfig = Field(default_factory=LakehouseConfig)
    tables: dict[str, TableConfig] = Field(default_factory=dict)
    runs: dict[str, RunConfig] = Field(default_factory=dict)
    # [models."ns.table"]: tables derived from others by SQL or Python (wapflow.config.models)
    models: dict[str, ModelConfig] = Field(default_factory=dict)
    sources: dict[str, SourceConfig] = Field(default_factory=dict)
    watch: WatchConfig = Field(default_factory=WatchConfig)
    # [s3]: endpoint, region, credentials for an s3:// warehouse and s3:// sources (None: no S3 jars).
    s3: S3Config | None = None
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    # [lineage]: OpenLineage events of every run (None: none sent).
    lineage: LineageConfig | None = None
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig)

    # Where the file was read from; relative paths in it resolve against its folder.
    source: Path | None = Field(default=None, exclude=True)
    base_dir: Path = Field(default_factory=Path.cwd, exclude=True)

    def run_specs(self, name: str) -> tuple[list[tuple[str, list[str]]], str | None]:
        """A [runs.NAME] section as (table, sources) pairs, relative paths resolved against the config's folder."""
        if name not in self.runs:
            raise ConfigError(
                f"no [runs.{name}] section in {self.source or 'the configuration'}{did_you_mean(name, self.runs)}",
                hint=f"known runs: {', '.join(self.runs) or 'none'}",
            )
        run = self.runs[name]
        specs = []
        for table, sources in run.tables.items():
            resolved = [src if "://" in src or os.path.isabs(src) else str(self.base_dir / src) for src in sources]
            specs.append((table, resolved))
        return specs, run.branch

    @field_validator("sources")
    @classmethod
    def _source_names(cls, v: dict[str, SourceConfig]) -> dict[str, SourceConfig]:
        return _plain_names(v, "source")

    @model_validator(mode="after")
    def _models_form_no_cycle(self) -> WapConfig:
        from wapflow.sql.identifiers import TableName

        for name in self.models:
            try:
                TableName.parse(name)
            except ConfigError as e:
                raise ValueError(f'[models."{name}"]: {e.message}') from None
        try:
            model_order(self.models)
        except ConfigError as e:
            raise ValueError(e.message + (f" ({e.hint})" if e.hint else "")) from None
        return self

    def resolve_source(self, name: str) -> Source:
        """A [sources.NAME] section resolved once (its relative location against the config's folder): the value
        `wap ingest`, `backfill` and `watch` pass down instead of the name."""
        if name not in self.sources:
            raise ConfigError(
                f"no [sources.{name}] section in {self.source or 'the configuration'}"
                f"{did_you_mean(name, self.sources)}",
                hint=f"known sources: {', '.join(self.sources) or 'none'}; declare one with table and location",
            )
        src = self.sources[name]
        loc = src.location
        if "://" not in loc and not os.path.isabs(loc):
            loc = str((self.base_dir / loc).resolve())
        return Source(name, src.model_copy(update={"location": loc}))

    @model_validator(mode="after")
    def _source_modes_fit_their_tables(self) -> WapConfig:
        """A source's mode / key / replace_where overrides are checked against its table's section."""
        for src_name, src in self.sources.items():
            if src.write_overrides():
                try:
                    self.table(src.table, source=src_name)
                except ValueError as e:
                    raise ValueError(f"[sources.{src_name}] (its table {src.table}): {e}") from None
        return self

    def format_version_for(self, name: str) -> int:
        """The format version a new table `name` is created with: its section's, else [lakehouse]'s; a
        quarantine table's is its table's."""
        base = name.removesuffix(QUARANTINE_SUFFIX)
        tbl = self.tables.get(name) or self.tables.get(base)
        own = tbl.format_version if tbl is not None else None
        return own if own is not None else self.lakehouse.format_version

    def maintenance_for(self, name: str) -> MaintenanceConfig:
        """[maintenance] with the table's own overrides ([tables."NAME".maintenance])."""
        tbl = self.tables.get(name)
        return self.maintenance.merged(tbl.maintenance if tbl is not None else None)

    def audit_consent(
        self, name: str, *, checks: int, no_checks: bool = False, flag: str | None = NO_CHECKS_FLAG
    ) -> str | None:
        """Whether a run of table `name` with `checks` checks (its section's and the caller's) may go ahead: None
        when it has checks; when it has none, the user's word it publishes unaudited on (NO_CHECKS_DECLARED:
        `checks = []` written in its section; NO_CHECKS_FLAG: the caller's `no_checks`). Anything else is a
        ConfigError, raised before anything is written:

        - no section for `name`, and a declared section's name is close to it: a typo in a section name would
          turn its audit (and its policies) off, whatever the caller says;
        - no checks, and the user said neither. `flag`: how this command takes the caller's word (None: it
          takes none, as `wap watch`, whose consent belongs in wap.toml).

        The schema contract is no check: it audits columns, never a value."""
        section = f'[tables."{name}"]'
        where = str(self.source) if self.source is not None else "wap.toml"
        tbl = self.tables.get(name)
        if tbl is None:
            near = self._misspelt(name)
            if near:
                raise ConfigError(
                    f"no {section} section in {where}{near}: a run of {name} would have none of that section's "
                    "checks and policies",
                    hint=f"fix the section's name in {where}; if {name} is another table, declare {section} "
                    "with its own checks",
                )
        if checks:
            return None
        if tbl is not None and "checks" in tbl.model_fields_set:
            return NO_CHECKS_DECLARED
        if no_checks:
            return NO_CHECKS_FLAG
        has = f"its section {section} declares none" if tbl is not None else f"{where} has no {section} section"
        ways = f"declare checks = [] in {section}" + (f", or pass {flag}" if flag else "")
        raise ConfigError(
            f"{name} has no checks ({has}): wapflow publishes nothing unaudited unless told to",
            hint=f'add checks to {section} (e.g. checks = [{{ check = "not_null", column = "id" }}]); '
            f"to publish without checks, {ways}",
        )

    def _misspelt(self, name: str) -> str:
        """' (did you mean [tables."X"]?)' for a declared table `name` is a typo of, else '': one that differs from
        it in its namespace alone or its table name alone, and closely there (two tables of one long namespace,
        shop_eu.orders and shop_eu.items, are not close for sharing it)."""
        ns, _, tbl = name.rpartition(".")
        declared = [(d, *d.rpartition(".")[::2]) for d in self.tables]  # (name, namespace, table name)
        by_table = {dt: d for d, dn, dt in declared if dn.lower() == ns.lower()}
        by_ns = {dn: d for d, dn, dt in declared if dt.lower() == tbl.lower()}
        return did_you_mean(tbl, by_table, n=1, shown=lambda t: f'[tables."{by_table[t]}"]', cutoff=0.8) or (
            did_you_mean(ns, by_ns, n=1, shown=lambda n: f'[tables."{by_ns[n]}"]', cutoff=0.8)
        )

    def table(self, name: str, source: str | None = None, write: Mapping[str, Any] | None = None) -> TableConfig:
        """The table's section, or defaults for a table wap.toml does not mention; for a run of [sources.SOURCE]'s
        files, with the write mode that source sets; `write`: the write mode a caller sets for one run
        (wapflow.write(mode=..., key=...)). Either is checked by the table's own rules."""
        base = self.tables.get(name, TableConfig())
        src = self.sources.get(source) if source else None
        overrides = src.write_overrides() if src is not None else {}
        overrides |= {k: v for k, v in (write or {}).items() if k in WRITE_KEYS and v is not None}
        if not overrides:
            return base
        if overrides.get("mode", base.mode) != base.mode:
            # A source's own mode does not inherit the table's mode-specific keys.
            base = base.model_copy(update={"delete_when": None, "order_by": [], "replace_where": None})
        merged = base.model_copy(update=overrides)
        merged.check_mode()
        return merged

    def warehouse_location(self) -> str:
        """Absolute warehouse URI or path (relative paths resolve against the config's folder)."""
        wh = self.lakehouse.warehouse
        if "://" in wh or wh.startswith("file:"):
            return wh
        return str((self.base_dir / wh).expanduser().resolve())

    def local_warehouse_path(self) -> Path | None:
        wh = self.warehouse_location()
        if wh.startswith("file://"):
            return Path(wh[len("file://") :])
        if wh.startswith("file:"):
            return Path(wh[len("file:") :])
        if "://" in wh:
            return None
        return Path(wh)

    def embedded_catalog_path(self) -> Path:
        """The embedded catalog's SQLite file: beside a local warehouse, else in ./.wap (it must be on a local
        disk even when the data lives on S3)."""
        local = self.local_warehouse_path()
        return (self.base_dir / ".wap" / "catalog.db").resolve() if local is None else local / "catalog.db"

    def state_dir(self) -> Path:
        """wapflow's own files on this machine (run store by default, logs): the local warehouse or ./.wap."""
        local = self.local_warehouse_path()
        return local if local is not None else (self.base_dir / ".wap").resolve()

    def run_store_url(self) -> str:
        """The run store's (and ledger's) SQLAlchemy URL: [lakehouse] run_store, else SQLite beside the catalog."""
        if self.lakehouse.run_store:
            return self.lakehouse.run_store
        return f"sqlite:///{self.state_dir() / 'wapflow_runs.db'}"

    def local_places(self) -> dict[str, Path]:
        """The local folders wapflow and Spark write to, by what they hold: what a full disk is reported
        against (the JVM's "No space left on device" does not say which one)."""
        import tempfile

        places: dict[str, Path] = {}
        local = self.local_warehouse_path()
        if local is not None:
            places["the warehouse"] = local
        store = self.run_store_url()
        if store.startswith("sqlite:///"):
            places["the run store"] = Path(store[len("sqlite:///") :]).parent
        if self.lakehouse.catalog == "sqlite":
            places["the catalog's database"] = self.embedded_catalog_path().parent
        places["Spark's logs"] = self.state_dir() / "logs"
        spark_local = self.lakehouse.spark_conf.get("spark.local.dir") or os.environ.get("SPARK_LOCAL_DIRS")
        places["Spark's local folder"] = (
            Path(str(spark_local).split(",")[0]) if spark_local else Path(tempfile.gettempdir())
        )
        return places


def ensure_folder(path: Path, what: str) -> None:
    """Create a folder wapflow writes to, or say clearly why it cannot be one."""
    bad = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if bad is not None:
        raise ConfigError(
            f"{what} {path} cannot be created: {bad} is a file, not a folder",
            hint="point [lakehouse].warehouse at a folder (it is created if missing), or move the file away",
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"{what} {path} cannot be created: {e.strerror}",
            hint="check the path and its permissions ([lakehouse].warehouse in wap.toml)",
        ) from None


# --- loading ----------------------------------------------------------------------------------


def find_config_path(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """--config wins, then $WAP_CONFIG, then ./wap.toml; None means built-in defaults."""
    if explicit:
        p = Path(explicit).expanduser()
        if not p.is_file():
            raise ConfigError(
                f"config file {p} does not exist",
                hint="create one with `wap init`, or drop --config to use the defaults",
            )
        return p
    env = os.environ.get(CONFIG_ENV)
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise ConfigError(
                f"config file {p} (from ${CONFIG_ENV}) does not exist",
                hint=f"fix or unset ${CONFIG_ENV}",
            )
        return p
    p = Path.cwd() / DEFAULT_CONFIG_NAME
    return p if p.is_file() else None


def load_config(path: str | os.PathLike[str] | None = None) -> WapConfig:
    found = find_config_path(path)
    if found is None:
        return WapConfig()
    try:
        data = tomllib.loads(found.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{found} is not valid TOML: {e}", hint="fix the syntax at the line named") from e
    cfg = parse_config(data, source=str(found))
    cfg.source = found.resolve()
    cfg.base_dir = found.resolve().parent
    return cfg


def parse_config(data: dict[str, Any], *, source: str = "wap.toml") -> WapConfig:
    _precheck_check_types(data, source)
    _precheck_layout(data, source)
    try:
        return WapConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_describe(e, data, source), hint="see docs/guides/configuration.md") from None


def _precheck_check_types(data: dict[str, Any], source: str) -> None:
    """Name unknown check types with suggestions; pydantic's union error would list every model."""
    tables = data.get("tables")
    if not isinstance(tables, dict):
        return
    for tname, tcfg in tables.items():
        if not isinstance(tcfg, dict):
            continue
        checks = tcfg.get("checks", [])
        if not isinstance(checks, list):
            continue
        for i, chk in enumerate(checks):
            where = f'[tables."{tname}"] checks[{i}]'
            if not isinstance(chk, dict):
                raise ConfigError(f'{source}: {where} must be a table like {{ check = "not_null", column = "x" }}')
            kind = chk.get("check")
            if kind is None:
                raise ConfigError(
                    f"{source}: {where} has no 'check' key",
                    hint=f"add check = one of {', '.join(CHECK_TYPES)}",
                )
            if kind not in CHECK_TYPES:
                raise ConfigError(
                    f"{source}: {where}: unknown check type '{kind}'{did_you_mean(str(kind), CHECK_TYPES)}",
                    hint=f"known check types: {', '.join(CHECK_TYPES)}",
                )


def _precheck_layout(data: dict[str, Any], source: str) -> None:
    """partition_by / sort_by that do not parse: one error naming the table, the key and the entry, with the
    layout module's hint (pydantic's would only say "value error")."""
    tables = data.get("tables")
    for tname, tcfg in tables.items() if isinstance(tables, dict) else ():
        for key, parse in (("partition_by", parse_partition_by), ("sort_by", parse_sort_by)):
            value = tcfg.get(key) if isinstance(tcfg, dict) else None
            if isinstance(value, list):
                try:
                    parse(value)
                except ConfigError as e:
                    raise ConfigError(f'{source}: [tables."{tname}"] {key}: {e.message}', hint=e.hint) from None


def _model_for(parent: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose keys live at `parent`, to suggest valid keys for an unknown one."""
    if not parent:
        return WapConfig
    if parent == ("lakehouse",):
        return LakehouseConfig
    if parent == ("s3",):
        return S3Config
    if parent == ("alerts",):
        return AlertsConfig
    if parent == ("lineage",):
        return LineageConfig
    if parent == ("maintenance",) or (len(parent) == 3 and parent[0] == "tables" and parent[2] == "maintenance"):
        return MaintenanceConfig
    if parent[0] == "alerts" and len(parent) == 3 and parent[1] == "sinks":
        return AlertSinkConfig
    if parent[0] == "runs" and len(parent) == 2:
        return RunConfig
    if parent[0] == "tables" and len(parent) == 2:
        return TableConfig
    if parent[0] == "tables" and len(parent) == 5 and parent[2] == "checks":
        return CHECK_MODELS.get(str(parent[4]))
    return None


def _where(loc: tuple[Any, ...]) -> str:
    if not loc:
        return "top level"
    if loc[0] == "tables" and len(loc) >= 2:
        head = f'[tables."{loc[1]}"]'
        rest = list(loc[2:])
        if len(rest) >= 2 and rest[0] == "checks":
            head += f" checks[{rest[1]}]"
            rest = rest[3:] if len(rest) >= 3 and rest[2] in CHECK_TYPES else rest[2:]
        return head + ("." + ".".join(str(r) for r in rest) if rest else "")
    if loc[0] == "alerts" and len(loc) >= 3 and loc[1] == "sinks":
        return f"[alerts.sinks.{loc[2]}]" + ("." + ".".join(str(r) for r in loc[3:]) if len(loc) > 3 else "")
    if loc[0] in ("lakehouse", "s3", "alerts", "maintenance"):
        return f"[{loc[0]}]" + ("." + ".".join(str(r) for r in loc[1:]) if len(loc) > 1 else "")
    return ".".join(str(x) for x in loc)


def _describe(e: ValidationError, data: dict[str, Any], source: str) -> str:
    lines = [f"{source} has {e.error_count()} problem(s):"]
    for err in e.errors():
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden":
            key = str(loc[-1])
            model = _model_for(loc[:-1])
            known = [f.alias or n for n, f in model.model_fields.items()] if model else []
            known = [k for k in known if k not in ("source", "base_dir")]
            suffix = did_you_mean(key, known) if known else ""
            lines.append(f"  - {_where(loc[:-1])}: unknown key '{key}'{suffix}")
        elif err["type"] == "missing":
            lines.append(f"  - {_where(loc[:-1])}: missing required key '{loc[-1]}'")
        else:
            got = err.get("input")
            got_s = repr(got) if not isinstance(got, dict) else "a table"
            if loc and (
                str(loc[-1]) in (*SECRET_FIELDS, "nessie_token", "url_env", "url", "api_key_env")
                or "password" in str(loc[-1]).lower()
                or (str(loc[-1]) == "endpoint" and "@" in str(got))
            ):
                got_s = "a value not shown, as it is a secret"
            elif loc and str(loc[-1]) in ("run_store", "database", "uri") and isinstance(got, str):
                from wapflow.config.urls import redact_url

                got_s = repr(redact_url(got))
            lines.append(f"  - {_where(loc)}: {err['msg']} (got {got_s})")
    return "\n".join(lines)


STARTER = """# wap.toml: wapflow configuration (see docs/guides/configuration.md).
# Every key is optional; with no file at all wapflow uses these defaults.

[lakehouse]
# Local folder (embedded Iceberg JDBC catalog on SQLite inside it) or a URI such as s3://bucket/warehouse.
warehouse = "./lakehouse"
# "sqlite" (embedded default) or an Iceberg catalog type: "jdbc", "rest", "hive", "glue", "hadoop", "custom".
catalog = "sqlite"
# Spark catalog name; also the name PyIceberg's SqlCatalog must use to read the tables.
catalog_name = "lakehouse"
# Extra Iceberg catalog properties, passed through (uri, credential, io-impl, ...).
# catalog_properties = { uri = "https://rest-catalog.example.com" }
# Spark master: local[*], spark://host:7077, k8s://https://..., or sc://host:15002 (Spark Connect).
master = "local[*]"
driver_memory = "2g"
# spark_conf = { "spark.sql.shuffle.partitions" = "8" }
# Offline clusters: point at jars you already have instead of downloading from Maven Central.
# jars = ["/opt/jars/iceberg-spark-runtime-4.1_2.13-1.11.0.jar", "/opt/jars/sqlite-jdbc-3.50.3.0.jar"]
# run_store = "sqlite:///./lakehouse/wapflow_runs.db"   # any SQLAlchemy URL
# publish_lock_timeout = 600   # seconds a run waits for another run's publish of its table (then: transient)

# S3 for warehouse = "s3://..." and s3:// sources (see docs/guides/s3.md). Without keys here, the standard
# AWS credential chain is used (AWS_* variables, ~/.aws profile, instance or container role).
# [s3]
# endpoint = "http://127.0.0.1:9000"   # S3-compatible server; unset for AWS S3
# region = "us-east-1"
# path_style = true                    # default: true with an endpoint, false for AWS
# landing = "s3://landing-bucket/incoming"   # created and checked by `wap storage init`

[tables."nyc.trips"]
format = "parquet"          # parquet | csv | json (JSON lines); default: from the file extension
on_failure = "keep"         # keep the audit branch for inspection, or "drop" it
# partition_by = ["day(pickup_at)"]  # col, year/month/day/hour(col), bucket(N, col), truncate(N, col)
# sort_by = ["pickup_at", "trip_id DESC"]
checks = [
  { check = "not_null", column = "passenger_count" },
  { check = "between", column = "fare_amount", min = 0, max = 1000, severity = "warn" },
  { check = "accepted_values", column = "payment_type", values = [1, 2, 3, 4, 5, 6] },
  { check = "unique", columns = ["trip_id"] },
  { check = "row_count", min = 1 },
  { check = "expression", sql = "dropoff_at >= pickup_at" },
]
"""
