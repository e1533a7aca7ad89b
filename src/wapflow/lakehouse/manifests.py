"""Column metrics of data files read from a table's manifests: no Spark job, no JVM.

The audit sums the column metrics of the files a run added (Tables.added_file_metrics), `wap diff` those live
at main's head (Tables.live_file_metrics), `wap metrics --backfill` those of each append on main. Spark's
`entries` and `files` metadata tables answer the same with a Spark job each (~0.1 s, much of a small warm
run's audit). Here the table's metadata JSON (Iceberg's own: through the gateway in Tables._metadata, or from
the catalog in wapflow.lakehouse.metadata) names each snapshot's manifest list; PyIceberg's Avro readers read
it and the manifests through wapflow's Storage (local files and s3://, with wap.toml's [s3] settings).

The values are those of Spark's `readable_metrics` (audit.metrics.summed_file_metrics sums either): every primitive
column of the table's current schema by its full name, None where a file lacks a metric, bounds of the
Python type PySpark returns for the column (int, float, bool, str, Decimal, date, datetime: a timestamp with
time zone as naive local time, one without as it is; binary as bytearray, a UUID as its string).

PyIceberg is an optional dependency (the readers, dashboard, connect and dev extras): `available` says
whether this reader can work for a table; where it cannot, callers read the metadata tables.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from wapflow.audit.metrics import FileMetrics, summed_file_metrics
from wapflow.display import time_bound
from wapflow.lakehouse.model import rows_at, snapshots_of
from wapflow.storage.settings import is_s3_uri

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema

    from wapflow.storage import Storage


_asked = False


def worth_loading() -> bool:
    """Whether to read manifests here rather than run the metadata table's Spark job. PyIceberg's readers cost
    a process ~0.5 s of CPU to import, more than the one job they save, so a one-off `wap run` keeps the job;
    a process that audits again (a watch worker, the engine, a Python caller) reads manifests from its second
    call on, or at once when its PyIceberg readers are loaded already."""
    global _asked
    if _asked or "pyiceberg.manifest" in sys.modules:
        return True
    _asked = True
    return False


def pyiceberg_installed() -> bool:
    return importlib.util.find_spec("pyiceberg") is not None


def readable_location(location: str) -> bool:
    """A table location wapflow's Storage reads (a local path or file: URI, s3://, s3a://)."""
    return is_s3_uri(location) or location.startswith(("/", "file:")) or "://" not in location


def added_entries(io: FileIO, manifest_list: str, snapshot_id: int) -> Iterator[DataFile]:
    """The data files one snapshot added, as Iceberg's Snapshot.addedDataFiles: the ADDED entries of the
    manifests that snapshot wrote (a later manifest merge keeps them there, not in the head's manifests)."""
    from pyiceberg.manifest import ManifestContent, ManifestEntryStatus, read_manifest_list

    for manifest in read_manifest_list(io.new_input(manifest_list)):
        if manifest.content != ManifestContent.DATA or manifest.added_snapshot_id != snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot_id:
                yield entry.data_file


def live_entries(io: FileIO, manifest_list: str) -> Iterator[DataFile]:
    """The data files live in a snapshot (what the `files` metadata table lists at it, delete files left out)."""
    from pyiceberg.manifest import DataFileContent, ManifestContent, read_manifest_list

    for manifest in read_manifest_list(io.new_input(manifest_list)):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            if entry.data_file.content == DataFileContent.DATA:
                yield entry.data_file


class ManifestMetrics:
    """Summed column metrics of data files, from a table's metadata JSON and its manifests."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._io: FileIO | None = None

    @staticmethod
    def available(meta: dict[str, Any] | None) -> bool:
        """Whether this reader can answer for a table of this metadata (PyIceberg installed, files on a
        filesystem wapflow's Storage reads, every snapshot with a manifest list: not an early v1 table's
        inline manifests); if not, the caller reads the metadata tables."""
        return (
            meta is not None
            and pyiceberg_installed()
            and readable_location(str(meta.get("location") or ""))
            and all(s.get("manifest-list") for s in meta.get("snapshots") or [])
        )

    def io(self) -> FileIO:
        if self._io is None:
            from wapflow.lakehouse.storage_io import StorageFileIO

            self._io = StorageFileIO(self.storage)
        return self._io

    def added(self, meta: dict[str, Any], snapshot_ids: Iterable[int]) -> FileMetrics:
        """Summed over the data files the given snapshots added."""
        lists = _manifest_lists(meta)
        files = (f for sid in snapshot_ids if sid in lists for f in added_entries(self.io(), lists[sid], sid))
        return _summed(_schema(meta), files)

    def live(self, meta: dict[str, Any], snapshot_id: int) -> FileMetrics:
        """Summed over the data files live in a snapshot (a branch's head), with the rows a reader of it gets."""
        fm = _summed(_schema(meta), live_entries(self.io(), _manifest_lists(meta)[snapshot_id]))
        fm.reader_rows = rows_at(snapshots_of(meta), snapshot_id)
        return fm


def _summed(schema: Schema, files: Iterable[DataFile]) -> FileMetrics:
    columns = _columns(schema)
    return summed_file_metrics((int(f.record_count), _readable(f, columns)) for f in files)


def _manifest_lists(meta: dict[str, Any]) -> dict[int, str]:
    return {int(s["snapshot-id"]): str(s["manifest-list"]) for s in meta.get("snapshots") or []}


def _schema(meta: dict[str, Any]) -> Schema:
    """The table's current schema (v2 metadata lists schemas; v1 has one)."""
    from pyiceberg.schema import Schema

    current = meta.get("current-schema-id")
    for s in meta.get("schemas") or []:
        if s.get("schema-id") == current:
            return Schema.model_validate(s)
    return Schema.model_validate(meta["schema"])


def _columns(schema: Schema) -> list[tuple[int, str, Any]]:
    """(field id, full name, type) of each primitive column, as `readable_metrics` has a field for each."""
    from pyiceberg.schema import index_name_by_id

    out = []
    for fid, name in index_name_by_id(schema).items():
        t = schema.find_type(fid)
        if t.is_primitive:
            out.append((fid, name, t))
    return out


def _readable(f: DataFile, columns: list[tuple[int, str, Any]]) -> dict[str, dict[str, Any]]:
    """One file's metrics as `readable_metrics` gives them: a dict per column, None where the file lacks one."""
    values = f.value_counts or {}
    nulls = f.null_value_counts or {}
    nans = f.nan_value_counts or {}
    lower = f.lower_bounds or {}
    upper = f.upper_bounds or {}
    return {
        name: {
            "value_count": values.get(fid),
            "null_value_count": nulls.get(fid),
            "nan_value_count": nans.get(fid),
            "lower_bound": bound(t, lower.get(fid)),
            "upper_bound": bound(t, upper.get(fid)),
        }
        for fid, name, t in columns
    }


def bound(t: Any, raw: bytes | None) -> Any:
    """A bound's bytes (Iceberg's single-value serialization) as PySpark returns a value of the column's type:
    a date column's days and a timestamp's microseconds as times (wapflow.display.time_bound: Spark's TIMESTAMP
    as naive local time, as pyspark TimestampType.fromInternal gives it; TIMESTAMP_NTZ the wall time written)."""
    if raw is None:
        return None
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import BinaryType, FixedType, PrimitiveType, UUIDType

    v: Any = from_bytes(t, raw)
    if isinstance(t, PrimitiveType) and isinstance(v, int):
        v = time_bound(str(t), v)
    if isinstance(t, UUIDType):
        import uuid

        return str(uuid.UUID(bytes=bytes(v)))
    if isinstance(t, BinaryType | FixedType):
        return bytearray(v)
    return v
