"""Landed parquet files that already hold the table's rows are adopted: validated by one Spark scan, copied byte
for byte into the table's data location and committed to the run's branch, instead of decoded, encoded and
compressed again by a Spark write (at 100M rows, most of a run's time).

A file is adopted only when nothing about its rows would change in a rewrite: an append (no merge, replace,
quarantine or staged new columns) to an unpartitioned, unsorted table on table branches (not Nessie), of local
files or S3 objects into a local table or one on S3, read without reader options (one file, or several
of 64 MiB and more: small ones are better packed by a rewrite), whose parquet columns are exactly the table's
(names, Iceberg types, a required column only where the file's is too), with no nested types and no Iceberg
field ids of their own. Anything else is rewritten as before; `adopt_parquet = false` always rewrites.

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
from typing import TYPE_CHECKING, Any, Literal

from wapflow.errors import InputError
from wapflow.files.access import local_path
from wapflow.files.parquet_checks import parquet_schema
from wapflow.lakehouse.tables import local_location
from wapflow.spark import errors as spark_errors
from wapflow.storage import Storage, is_s3_uri
from wapflow.storage.files import FileIdentity, local_identity

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wapflow.pipeline.steps.context import Run
    from wapflow.write.modes import WriteMode

_FIELD_ID_KEY = b"PARQUET:field_id"
# A batch of several files is adopted only when each is at least this big: small files are better packed by a
# rewrite into fewer data files (one file alone becomes one data file either way).
MIN_FILE_BYTES = 64 * 2**20
_COMMIT_STATE_UNKNOWN = "org.apache.iceberg.exceptions.CommitStateUnknownException"
# A local batch up to this size whose checks need no row observed is decoded by Arrow here, not by a Spark job.
SMALL_BATCH_BYTES = 8 * 2**20


def why_not(run: Run, mode: WriteMode, df: DataFrame) -> str | None:
    """Why the run's files must be rewritten; None when they can be adopted as they are."""
    from wapflow.lakehouse.branches import IcebergTableBranches
    from wapflow.spark.kind import is_connect

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
    if not isinstance(run.lh.branches, IcebergTableBranches):
        return "branches are the catalog's (Nessie)"
    if is_connect(run.lh.spark):
        return "Spark Connect has no gateway to Iceberg's Java API"
    if len(run.files) > 1 and any((f.size or 0) < MIN_FILE_BYTES for f in run.files):
        return "several files, some small (a rewrite packs them into fewer data files)"
    meta = run.wt().metadata(run.target)
    if meta is None:
        return "the table's metadata is not readable here"
    if not unpartitioned_unsorted(meta):
        return "the table is partitioned or sorted"
    props = meta.get("properties") or {}
    data = props.get("write.data.path") or f"{meta.get('location', '')}/data"
    if local_location(data) is None and not is_s3_uri(data):
        return f"the table's data location {data} is neither local nor on S3"
    if not all(local_path(f) is not None or (is_s3_uri(f.uri) and f.version) for f in run.files):
        return "a file is neither local nor an S3 object with an ETag"
    return columns_differ(meta, run.files, run.lh.storage, list(df.columns))


def adopt(run: Run, df: DataFrame, observation: Any) -> Literal["scanned", "decoded"] | None:
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
    locations = run.lh.tables.data_locations(run.target, names)
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
        run.lh.tables.append_parquet(run.target, run.ref(), locations, run.snapshot_properties())
    except Exception as e:
        # A commit that failed references none of the copies; one whose outcome Iceberg does not know may, so
        # its copies stay (`wap maintain` removes them if they are orphans). A stop signal leaves them too.
        if not spark_errors.raised(e, _COMMIT_STATE_UNKNOWN):
            _remove(run, copied)
        raise
    if observed is None:
        return "scanned"
    run.observed = observed
    return "decoded"


def _decoded_here(run: Run) -> dict[str, Any] | None:
    """A small local batch whose only observed metric is its row count: every page decoded by Arrow here (what
    the Spark scan would do), and the count it observed; None when the Spark scan must run (something to
    observe, a large batch, an object store)."""
    if run.plan is not None and not run.plan.counts_only:
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


def unpartitioned_unsorted(meta: dict[str, Any]) -> bool:
    spec_id = meta.get("default-spec-id", 0)
    specs = [s for s in meta.get("partition-specs", []) if s.get("spec-id") == spec_id]
    order_id = meta.get("default-sort-order-id", 0)
    orders = [o for o in meta.get("sort-orders", []) if o.get("order-id") == order_id]
    return bool(specs) and not specs[0].get("fields") and not (orders and orders[0].get("fields"))


def columns_differ(meta: dict[str, Any], files: list[FileIdentity], storage: Storage, columns: list[str]) -> str | None:
    """Why the files' columns are not exactly the table's (`meta`: its Iceberg metadata JSON), as an Iceberg
    reader sees them; None when they are. `columns`: the batch's, as the write step read them."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.schema import Schema
    from pyiceberg.table.name_mapping import create_mapping_from_schema, parse_mapping_from_json
    from pyiceberg.types import PrimitiveType

    from wapflow.lakehouse.tables import NAME_MAPPING_PROP

    schema_id = meta.get("current-schema-id", 0)
    found = [s for s in meta.get("schemas", []) if s.get("schema-id") == schema_id]
    if not found:
        return "the table's schema is not in its metadata"
    table = Schema.model_validate(found[0])
    mapping_json = (meta.get("properties") or {}).get(NAME_MAPPING_PROP)
    mapping = parse_mapping_from_json(mapping_json) if mapping_json else create_mapping_from_schema(table)
    if columns != [f.name for f in table.fields]:
        return "the batch's columns are not the table's, in its order"
    want = {f.name: f for f in table.fields}
    for file in files:
        arrow = parquet_schema(file, storage)
        if arrow is None:
            return f"the footer of {file.uri} is not readable here"
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
            if not isinstance(f.field_type, PrimitiveType) or f.field_type != t.field_type:
                return f"column {f.name!r} of {name} is {f.field_type}, the table's is {t.field_type}"
            if t.required and not f.required:
                return f"column {f.name!r} is required in the table and optional in {name}"
    return None
