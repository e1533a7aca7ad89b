"""[sources.NAME] and [watch]: landing locations bound to tables, and the `wap watch` worker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator

from wapflow.config.base import _database_url, _Strict, parse_bytes
from wapflow.config.models import WRITE_KEYS
from wapflow.config.tables import _read_only_condition


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
