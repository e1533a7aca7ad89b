"""[maintenance] (and a table's own [tables."NS.TABLE".maintenance]): what `wap maintain` does to a table."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from wapflow.config.base import _duration, _Strict, parse_bytes
from wapflow.vocabulary import parse_duration

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
