"""Landed parquet files that already hold the table's rows are adopted: validated by one Spark scan, copied byte
for byte into the table's data location and committed to the run's branch, instead of decoded, encoded and
compressed again by a Spark write (at 100M rows, most of a run's time).

A file is adopted only when nothing about its rows would change in a rewrite: an append (no merge, replace,
quarantine or staged new columns) to an unpartitioned, unsorted table on table branches (not Nessie) with a
local data location, from local files read without reader options (one file, or several of 64 MiB and more:
small ones are better packed by a rewrite), whose parquet columns are exactly the table's (names, Iceberg types,
a required column only where the file's is too), with no nested types and no Iceberg field ids of their own.
Anything else is rewritten as before; `adopt_parquet = false` in a table's section always rewrites.

What a rewrite would have checked still is: the scan decodes every value (a corrupt page fails the run
before anything is copied, naming the file), and it observes the row-level checks as the write would. The
copy keeps the file's codec, row groups and size; `wap maintain`'s compaction rewrites files far from the
table's target size.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from wapflow.files.access import local_path
from wapflow.lakehouse.tables import local_location

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wapflow.pipeline.steps.context import Run
    from wapflow.write.modes import WriteMode

_FIELD_ID_KEY = b"PARQUET:field_id"
# A batch of several files is adopted only when each is at least this big: small files are better packed by a
# rewrite into fewer data files (one file alone becomes one data file either way).
MIN_FILE_BYTES = 64 * 2**20


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
    if any(local_path(f) is None for f in run.files):
        return "a file is not local"
    if len(run.files) > 1 and any((f.size or 0) < MIN_FILE_BYTES for f in run.files):
        return "several files, some small (a rewrite packs them into fewer data files)"
    meta = run.wt().metadata(run.target)
    if meta is None:
        return "the table's metadata is not readable here"
    if not _unpartitioned_unsorted(meta):
        return "the table is partitioned or sorted"
    props = meta.get("properties") or {}
    if local_location(props.get("write.data.path") or f"{meta.get('location', '')}/data") is None:
        return "the table's data location is not local"
    return _columns_differ(meta, [Path(str(local_path(f))) for f in run.files], df)


def adopt(run: Run, df: DataFrame, observation: Any) -> bool:
    """Scan the batch (observing the row-level checks), then copy its files into the table and commit them to
    the run's branch. False (nothing committed) when the table's data location is not local or a file changed
    while it was scanned: the caller rewrites the rows then, observing again."""
    sources = [Path(str(local_path(f))) for f in run.files]
    run.lh.progress(f"adopting {len(sources)} parquet file(s) as they are: their columns are the table's")
    out = df.observe(observation, *run.plan.observable(counted=True)) if observation is not None and run.plan else df
    # Every value decoded once (the noop sink reads all columns): what the write's read would have found.
    out.write.format("noop").mode("overwrite").save()
    if any(_version(p) != f.version for p, f in zip(sources, run.files, strict=True)):
        run.lh.progress("a file changed while it was read: rewriting the batch instead")
        return False
    locations = run.lh.tables.append_local_parquet(
        run.target, run.ref(), sources, f"{run.run_id}-adopted", run.snapshot_properties()
    )
    if locations is None:
        run.lh.progress("the table's data location is not local: rewriting the batch instead")
        return False
    return True


def _version(path: Path) -> str | None:
    """The file's identity as the ledger records it (wapflow.storage.files: mtime and size of one stat)."""
    from wapflow.storage.files import local_identity

    try:
        return local_identity(str(path)).version
    except OSError:
        return None


def _unpartitioned_unsorted(meta: dict[str, Any]) -> bool:
    spec_id = meta.get("default-spec-id", 0)
    specs = [s for s in meta.get("partition-specs", []) if s.get("spec-id") == spec_id]
    order_id = meta.get("default-sort-order-id", 0)
    orders = [o for o in meta.get("sort-orders", []) if o.get("order-id") == order_id]
    return bool(specs) and not specs[0].get("fields") and not (orders and orders[0].get("fields"))


def _columns_differ(meta: dict[str, Any], paths: list[Path], df: DataFrame) -> str | None:
    """Why the files' columns are not exactly the table's, as an Iceberg reader sees them; None when they are."""
    import pyarrow.parquet as pq
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
    if [f.name for f in df.schema.fields] != [f.name for f in table.fields]:
        return "the batch's columns are not the table's, in its order"
    want = {f.name: f for f in table.fields}
    for path in paths:
        arrow = pq.read_schema(path)
        if any(f.metadata and _FIELD_ID_KEY in f.metadata for f in arrow):
            return f"{path.name} carries Iceberg field ids of its own"
        if sorted(arrow.names) != sorted(want):
            return f"{path.name}'s columns are not the table's"
        try:
            got = pyarrow_to_schema(arrow, name_mapping=mapping)
        except Exception as e:  # noqa: BLE001 - PyIceberg refuses an unmappable type with several error types
            return f"{path.name} has a type Iceberg does not map ({str(e).splitlines()[0][:120]})"
        for f in got.fields:
            t = want[f.name]
            if not isinstance(f.field_type, PrimitiveType) or f.field_type != t.field_type:
                return f"column {f.name!r} of {path.name} is {f.field_type}, the table's is {t.field_type}"
            if t.required and not f.required:
                return f"column {f.name!r} is required in the table and optional in {path.name}"
    return None
