"""Landed parquet files that already hold the table's rows are adopted: validated by one Spark scan, copied byte
for byte into the table's data location and committed to the run's branch, instead of decoded, encoded and
compressed again by a Spark write (at 100M rows, most of a run's time).

A file is adopted only when nothing about its rows would change in a rewrite: an append (no merge, replace,
quarantine or staged new columns) to an unsorted table (on a table branch, or on a Nessie branch through the
branch's catalog), of local files or S3 objects into a local table or one on S3, read without reader options
(one file, or several of 64 MiB and more: small ones are better packed by a rewrite), whose parquet columns are
the table's (names; Iceberg types, or int for long and float for double, which Iceberg's readers widen; a
required column only where the file's is too), with no nested types and no Iceberg field ids of their own.
Into a partitioned table, each file must hold one partition's rows, as its footer's statistics show (PyIceberg
infers the value, as its add_files does): an order-preserving transform (identity, year/month/day/hour,
truncate) of a column without nulls (or only nulls) whose lowest and highest values give the same partition.
The files are committed through Iceberg's Java API, or on a Spark Connect client through PyIceberg on the same
catalog (where it opens it: JDBC and REST). Anything else is rewritten as before; `adopt_parquet = false` always
rewrites.

What a rewrite would have checked still is: the scan decodes every value (a corrupt page fails the run
before anything is copied, naming the file), and it observes the row-level checks as the write would. A small
local batch (SMALL_BATCH_BYTES) whose checks the added files' Iceberg counts answer (nothing to observe but the
row count) is decoded by Arrow in this process instead: a Spark job costs more than the whole decode there,
and is most of a small file's run in `wap watch`. The
bytes copied are the file the ledger listed: a copy from S3 (within S3, or down to a local table) is
conditional on its ETag, one from a local file (or up to S3) is followed by a stat (a file changed meanwhile
is rewritten instead). The copy keeps the file's codec, row groups and
size; `wap maintain`'s compaction rewrites files far from the table's target size.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any, Literal

from wapflow.errors import InputError
from wapflow.files.access import local_path
from wapflow.files.parquet_checks import parquet_footer
from wapflow.lakehouse.model import DATA_PATH_PROP, METRICS_DEFAULT_PROP
from wapflow.lakehouse.tables import local_location
from wapflow.spark import errors as spark_errors
from wapflow.storage import Storage, is_s3_uri
from wapflow.storage.files import FileIdentity, local_identity

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wapflow.pipeline.steps.context import Run
    from wapflow.writing.modes import WriteMode

_FIELD_ID_KEY = b"PARQUET:field_id"
# A batch of several files is adopted only when each is at least this big: small files are better packed by a
# rewrite into fewer data files (one file alone becomes one data file either way).
MIN_FILE_BYTES = 64 * 2**20
# Iceberg's Java API (a classic session) and PyIceberg (a Spark Connect client's commit), by class name.
_COMMIT_STATE_UNKNOWN = (
    "org.apache.iceberg.exceptions.CommitStateUnknownException",
    "pyiceberg.exceptions.CommitStateUnknownException",
)
# A local batch up to this size whose checks need no row observed is decoded by Arrow here, not by a Spark job.
SMALL_BATCH_BYTES = 8 * 2**20
# Iceberg's partition string for null (Conversions.fromPartitionString): a string value equal to it is not carried.
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_EPOCH = date(1970, 1, 1)


@dataclass(frozen=True)
class Adoptable:
    """What committing the run's files as they are needs: the table's partition spec, and each file's partition
    as Iceberg's partition strings (one list per file, in the run's order; empty lists: unpartitioned)."""

    spec_id: int
    partitions: list[list[str | None]]


def check(run: Run, mode: WriteMode, df: DataFrame) -> Adoptable | str:
    """Why the run's files must be rewritten, or what adopting them as they are needs."""
    cfg = run.table_cfg
    if not cfg.adopt_parquet:
        return "adopt_parquet = false"
    if run.fmt != "parquet":
        return f"the files are {run.fmt}"
    if mode.name != "append" or mode.reapplies:
        return f"mode {mode.name}"
    if run.new_columns:
        return "new columns are staged"
    if run.quarantine is not None and run.plan is not None and run.plan.quarantinable:
        return "failing rows are quarantined"
    if cfg.read_options:
        return "read_options are set"
    if len(run.files) > 1 and any((f.size or 0) < MIN_FILE_BYTES for f in run.files):
        return "several files, some small (a rewrite packs them into fewer data files)"
    meta = run.wt().commits.commit_metadata(run.target)
    if meta is None:
        return (
            "no commit of files reaches the table from here (on Spark Connect, PyIceberg opens JDBC and REST catalogs)"
        )
    if sorted_table(meta):
        return "the table is sorted (a rewrite writes its rows in the table's order)"
    props = meta.get("properties") or {}
    data = props.get(DATA_PATH_PROP) or f"{meta.get('location', '')}/data"
    if local_location(data) is None and not is_s3_uri(data):
        return f"the table's data location {data} is neither local nor on S3"
    if not all(local_path(f) is not None or (is_s3_uri(f.uri) and f.version) for f in run.files):
        return "a file is neither local nor an S3 object with an ETag"
    return files_fit(meta, run.files, run.lh.storage, list(df.columns))


def adopt(run: Run, how: Adoptable, df: DataFrame, observation: Any) -> Literal["scanned", "decoded"] | None:
    """Scan the batch (observing the row-level checks), then copy its files into the table and commit them to
    the run's branch: "scanned" (by Spark, through `observation`) or "decoded" (by Arrow here: run.observed
    holds the row count). None (nothing committed) when a file changed since it was listed: the caller rewrites
    the rows then, observing again."""
    run.lh.progress(f"adopting {len(run.files)} parquet file(s) as they are: their columns are the table's")
    observed = _decoded_here(run)
    if observed is None:
        out = (
            df.observe(observation, *run.plan.observable(counted=True)) if observation is not None and run.plan else df
        )
        # Every value decoded once (the noop sink reads all columns): what the write's read would have found.
        out.write.format("noop").mode("overwrite").save()
    names = [f"{run.run_id}-adopted-{i:05d}.parquet" for i in range(len(run.files))]
    locations = run.wt().commits.data_locations(run.target, names)
    copied: list[str] = []
    try:
        for f, location in zip(run.files, locations, strict=True):
            copied.append(location)  # before the copy: a copy cut short is taken back out too
            if not _copy(run, f, location):
                run.lh.progress(f"{f.uri} changed since it was listed: rewriting the batch instead")
                _remove(run, copied)
                return None
    except BaseException:
        _remove(run, copied)
        raise
    try:
        run.wt().commits.append_files(
            run.target, run.ref(), locations, run.snapshot_properties(), spec_id=how.spec_id, partitions=how.partitions
        )
    except Exception as e:
        # A commit that failed references none of the copies; one whose outcome Iceberg does not know may, so
        # its copies stay (`wap maintain` removes them if they are orphans). A stop signal leaves them too.
        if not _outcome_unknown(e):
            _remove(run, copied)
        raise
    if observed is None:
        return "scanned"
    run.observed = observed
    return "decoded"


def _outcome_unknown(e: BaseException) -> bool:
    """A commit that may have landed: Iceberg's Java API (classic session) or PyIceberg (Spark Connect) says it
    does not know whether it did (by class name, as spark.errors recognises the other commit outcomes)."""
    return spark_errors.raised(e, *_COMMIT_STATE_UNKNOWN)


def _decoded_here(run: Run) -> dict[str, Any] | None:
    """A small local batch whose only observed metric is its row count: every page decoded by Arrow here (what
    the Spark scan would do), and the count it observed; None when the Spark scan must run (something to
    observe, a large batch, an object store)."""
    if run.plan is not None and not run.plan.counts_only(bounds=None):
        return None
    paths = [local_path(f) for f in run.files]
    if any(p is None for p in paths) or sum(f.size or 0 for f in run.files) > SMALL_BATCH_BYTES:
        return None
    import pyarrow.parquet as pq

    rows = 0
    for f, path in zip(run.files, paths, strict=True):
        try:
            rows += pq.read_table(str(path)).num_rows
        except FileNotFoundError:
            raise InputError(
                f"source file {f.uri} disappeared before it was read", hint="run again once the file is back"
            ) from None
        except Exception as e:  # noqa: BLE001 - Arrow raises several types for a bad page; all mean the same
            raise InputError(
                f"{f.uri} is not a valid parquet file (cannot decode its data: {str(e).splitlines()[0][:200]})",
                hint="re-export or re-upload the file",
            ) from None
    return {"_rows": rows}


def _copy(run: Run, f: FileIdentity, location: str) -> bool:
    """Copy the file, as the ledger identified it, to `location`; False when its content is another by now.
    From a local file (to a local table, or uploaded to S3): one stat after the copy (mtime and size, the
    ledger's identity). From S3 (a server-side copy, or a download to a local table): on the condition that
    the object's ETag is still the listed one, so the bytes adopted are the bytes scanned."""
    local, source = local_location(location), local_path(f)
    if local is not None:
        local.parent.mkdir(parents=True, exist_ok=True)
    if source is None:
        store = run.lh.storage.s3
        if not f.version:
            return False  # no ETag to hold the object to (why_not adopts none such): rewritten instead
        if local is not None:
            return store.download_if(f.uri, f.version, local)
        return store.copy_if(f.uri, f.version, location)
    if local is not None:
        shutil.copyfile(str(source), local)
    else:
        run.lh.storage.s3.upload(source, location)
    try:
        return local_identity(str(source)).version == f.version
    except OSError:
        return False


def _remove(run: Run, locations: list[str]) -> None:
    """Take copies back out (a failed or abandoned adoption leaves nothing behind)."""
    for location in locations:
        try:
            local = local_location(location)
            if local is not None:
                local.unlink(missing_ok=True)
            else:
                run.lh.storage.s3.delete(location)
        except Exception as e:  # noqa: BLE001 - cleanup must not hide the adoption's own outcome
            run.lh.progress(f"warning: could not remove {location}: {e} (`wap maintain` removes orphan files)")


def sorted_table(meta: dict[str, Any]) -> bool:
    """The table's default sort order has fields (its writers sort rows; a landed file's order is unknown)."""
    order_id = meta.get("default-sort-order-id", 0)
    orders = [o for o in meta.get("sort-orders", []) if o.get("order-id") == order_id]
    return bool(orders and orders[0].get("fields"))


def files_fit(meta: dict[str, Any], files: list[FileIdentity], storage: Storage, columns: list[str]) -> Adoptable | str:
    """Why the files' columns are not exactly the table's (`meta`: its Iceberg metadata JSON), as an Iceberg
    reader sees them, or a file's rows are not one partition's; else what adopting them needs. `columns`: the
    batch's, as the write step read them."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table.name_mapping import create_mapping_from_schema, parse_mapping_from_json
    from pyiceberg.types import DoubleType, FloatType, IntegerType, LongType, PrimitiveType

    from wapflow.lakehouse.model import NAME_MAPPING_PROP

    # The primitive promotions of Iceberg's spec that every reader resolves when it reads the file: a file's int
    # column read as the table's long, a float as a double (what a table's type change leaves in its old files).
    promoted = {(IntegerType, LongType), (FloatType, DoubleType)}

    schema_id = meta.get("current-schema-id", 0)
    found = [s for s in meta.get("schemas", []) if s.get("schema-id") == schema_id]
    spec_id = meta.get("default-spec-id", 0)
    specs = [s for s in meta.get("partition-specs", []) if s.get("spec-id") == spec_id]
    if not found or not specs:
        return "the table's schema or partition spec is not in its metadata"
    table = Schema.model_validate(found[0])
    spec = PartitionSpec.model_validate(specs[0])
    mapping_json = (meta.get("properties") or {}).get(NAME_MAPPING_PROP)
    mapping = parse_mapping_from_json(mapping_json) if mapping_json else create_mapping_from_schema(table)
    if columns != [f.name for f in table.fields]:
        return "the batch's columns are not the table's, in its order"
    want = {f.name: f for f in table.fields}
    partitions: list[list[str | None]] = []
    for file in files:
        footer = parquet_footer(file, storage)
        if footer is None:
            return f"the footer of {file.uri} is not readable here"
        arrow = footer.arrow
        name = file.uri.rsplit("/", 1)[-1]
        if any(f.metadata and _FIELD_ID_KEY in f.metadata for f in arrow):
            return f"{name} carries Iceberg field ids of its own"
        if sorted(arrow.names) != sorted(want):
            return f"{name}'s columns are not the table's"
        try:
            got = pyarrow_to_schema(arrow, name_mapping=mapping)
        except Exception as e:  # noqa: BLE001 - PyIceberg refuses an unmappable type with several error types
            return f"{name} has a type Iceberg does not map ({str(e).splitlines()[0][:120]})"
        for f in got.fields:
            t = want[f.name]
            if not isinstance(f.field_type, PrimitiveType) or (
                f.field_type != t.field_type and (type(f.field_type), type(t.field_type)) not in promoted
            ):
                return f"column {f.name!r} of {name} is {f.field_type}, the table's is {t.field_type}"
            if t.required and not f.required:
                return f"column {f.name!r} is required in the table and optional in {name}"
        values = partition_of(footer.metadata, table, spec) if spec.fields else []
        if isinstance(values, str):
            return f"{name}: {values}"
        partitions.append(values)
    return Adoptable(spec_id, partitions)


def partition_of(metadata: Any, schema: Any, spec: Any) -> list[str | None] | str:
    """The one partition a parquet file's rows are in, from its footer's statistics (`metadata`: pyarrow's
    FileMetaData; `schema`, `spec`: PyIceberg's, of the table), as Iceberg's partition strings; or why it is
    not known to be one. PyIceberg infers the value (what its add_files does); the policy here is what it leaves
    open: a column with some nulls, or without statistics, is not one partition (PyIceberg ignores its nulls,
    and takes a column without statistics as null)."""
    from pyiceberg.io.pyarrow import compute_statistics_plan, data_file_statistics_from_parquet_metadata
    from pyiceberg.types import BooleanType, DateType, IntegerType, LongType, StringType

    # Full metrics: bounds not truncated, so a string's bounds are its own values.
    plan = compute_statistics_plan(schema, {METRICS_DEFAULT_PROP: "full"})
    try:
        stats = data_file_statistics_from_parquet_metadata(metadata, plan, {f.name: f.field_id for f in schema.fields})
    except ValueError as e:  # statistics of a physical type PyIceberg does not read for the column's type
        return f"its footer's statistics do not read as the table's types ({str(e).splitlines()[0][:120]})"
    for pf in spec.fields:
        column = schema.find_field(pf.source_id).name
        if not pf.transform.preserves_order:
            return f"partitioned by {pf.transform}({column}), whose values a file's bounds do not give"
        nulls, count = stats.null_value_counts.get(pf.source_id), stats.value_counts.get(pf.source_id)
        if nulls is None or count is None:
            return f"no null count for column {column!r} in the footer"
        if 0 < nulls < count:
            return f"column {column!r} has nulls and values: rows of several partitions"
        if nulls == 0 and pf.source_id not in stats.column_aggregates:
            return f"no statistics for column {column!r} in the footer"
    try:
        record = stats.partition(spec, schema)  # None where the column is all nulls
    except ValueError:
        return "its rows are in several partitions"
    values: list[str | None] = []
    for i, rf in enumerate(spec.partition_type(schema).fields):
        value = record[i]
        if value is None:
            values.append(None)
        elif isinstance(rf.field_type, BooleanType):
            values.append("true" if value else "false")
        elif isinstance(rf.field_type, IntegerType | LongType):
            values.append(str(int(value)))
        elif isinstance(rf.field_type, StringType) and value != _HIVE_NULL:
            values.append(str(value))
        elif isinstance(rf.field_type, DateType):
            values.append((_EPOCH + timedelta(days=int(value))).isoformat())
        else:
            # Iceberg's partition strings do not carry these exactly (a timestamp, a decimal's scale, bytes).
            return f"partitioned by a {rf.field_type} value, which adoption does not carry"
    return values
