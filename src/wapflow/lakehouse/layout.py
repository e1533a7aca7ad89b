"""A table's layout applied: partition spec, sort order and write distribution, as wap.toml declares them.

The declared layout (`wapflow.sql.layout`, parsed at config load) is checked against the batch's columns
before anything is written, a new table is created with it, and an existing table is evolved to it
(ALTER TABLE ... ADD/DROP PARTITION FIELD, WRITE ORDERED BY / UNORDERED, write.distribution-mode) before
the run writes. Iceberg keeps each data file under the spec it was written with, so evolution rewrites
nothing. The table's current layout is read back through SQL (`DESCRIBE TABLE`, the `sort-order` and
`write.distribution-mode` table properties), which a classic session and Spark Connect both answer.

Where evolution commits: a partition spec and a sort order belong to the table, not to a branch, so on
Iceberg table branches they commit to the table itself, before the run's branch is written; main's readers
see a new spec at once, and no row changes. On a catalog-level branch (Nessie) the statements run on the
run's branch and reach main with its merge. Evolution is a diff of declared against current, re-read before
each statement, so a resumed run, or a second run of the same table, changes nothing twice; a commit that
meets another writer's is retried on the refreshed table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from wapflow.errors import CommitConflict, ConfigError, WapError
from wapflow.lakehouse.conflicts import retry_on_conflict
from wapflow.lakehouse.model import DISTRIBUTION_MODE_PROP
from wapflow.spark import errors as spark_errors
from wapflow.sql.identifiers import TableName, sql_string
from wapflow.sql.layout import (
    Layout,
    PartitionField,
    SortField,
    check_types,
    parse_partition_field,
    parse_sort_field,
    split_top_level,
)

if TYPE_CHECKING:
    from pyspark.sql.types import StructField, StructType

    from wapflow.lakehouse.tables import Tables

_ROUNDS = 24  # statements (each replanned after another writer's change) in one evolution: far more than needed


@dataclass(frozen=True)
class Current:
    """A table's layout as Iceberg holds it now."""

    partition_by: tuple[PartitionField, ...]
    sort_by: tuple[SortField, ...]
    distribution: str | None
    # Fields wap.toml's syntax cannot express (a sort on a transform, a name that needs quoting, made by
    # another tool): they matter only when wap.toml declares that part of the layout.
    foreign_partitions: tuple[str, ...] = ()
    foreign_sort: str | None = None


def distribution_for(partitioned: bool, sorted_: bool) -> str | None:
    """range with a sort order (Iceberg's own choice for WRITE ORDERED BY), hash for a partitioned table (one
    task writes each partition: no file per task per partition), else the table's default."""
    if sorted_:
        return "range"
    if partitioned:
        return "hash"
    return None


def table_properties(layout: Layout) -> dict[str, str]:
    """What a new table gets beside its spec (its sort order is set right after creation)."""
    mode = distribution_for(bool(layout.partition_by), bool(layout.sort_by))
    return {DISTRIBUTION_MODE_PROP: mode} if mode else {}


def creation(layout: Layout) -> tuple[list[str], dict[str, str]]:
    """Tables.create_like's partition fields (DDL) and table properties for a new table of this layout."""
    return [f.sql() for f in layout.partition_by or ()], table_properties(layout)


def for_batch(
    layout: Layout,
    schema: StructType,
    table: TableName,
    new_columns: Sequence[StructField] = (),
    progress: Callable[[str], None] = lambda _: None,
) -> Layout:
    """The declared layout checked against the batch's columns and types (one ConfigError naming each
    problem), before anything is written; names as the batch spells them.

    A field on a column the batch adds to an existing table (schema = "add_columns") waits: the column
    reaches the table only when the run publishes, so the next run adds that field (a sort order naming
    such a column waits whole: half of it would be another order)."""
    if not layout.declared:
        return layout
    checked = check_types(layout, {f.name: f.dataType.simpleString() for f in schema.fields}, table=table.dotted)
    pending = {f.name.lower() for f in new_columns}
    if not pending or not any(c.lower() in pending for c in checked.columns()):
        return checked
    parts = checked.partition_by
    if parts is not None:
        parts = tuple(f for f in parts if f.column.lower() not in pending)
    sorts = checked.sort_by
    if sorts is not None and any(s.column.lower() in pending for s in sorts):
        sorts = None
    waiting = [c for c in checked.columns() if c.lower() in pending]
    progress(f"layout of {table}: waits for new column(s) {', '.join(waiting)} to reach the table (next run)")
    return Layout(parts, sorts)


def current(tables: Tables, table: TableName) -> Current:
    """The table's partition fields (DESCRIBE TABLE's '# Partitioning'), sort order and distribution mode
    (its table properties), parsed as wap.toml's own values are."""
    ident = tables.ident(table)
    parts: list[PartitionField] = []
    foreign: list[str] = []
    in_partitioning = identity_only = False
    for row in tables.spark.sql(f"DESCRIBE TABLE {ident}").collect():
        name, text = str(row[0] or "").strip(), str(row[1] or "").strip()
        if name in ("# Partitioning", "# Partition Information"):
            # Spark lists identity-only partitioning as "# Partition Information" (a header row, then one
            # column per row), any transform as "# Partitioning" ("Part 0 | days(ts)").
            in_partitioning, identity_only = True, name == "# Partition Information"
            continue
        if in_partitioning and identity_only:
            if name == "# col_name":
                continue
            if not name or name.startswith("#"):
                break
            text = name
        elif in_partitioning:
            if not name or name.startswith("#"):
                break
            if not name.startswith("Part ") or not text:
                continue  # "Part 0 | days(ts)"; anything else (a "Not partitioned" line) names no field
        if in_partitioning:
            try:
                f = parse_partition_field(text, allow_void=True)
            except ConfigError:
                foreign.append(text)
                continue
            if f is not None:
                parts.append(f)
    props = {str(r[0]): str(r[1]) for r in tables.spark.sql(f"SHOW TBLPROPERTIES {ident}").collect()}
    order = props.get("sort-order", "").strip()
    try:
        sorts = [parse_sort_field(t) for t in split_top_level(order)] if order else []
    except ConfigError:
        return Current(tuple(parts), (), props.get(DISTRIBUTION_MODE_PROP), tuple(foreign), order)
    return Current(tuple(parts), tuple(sorts), props.get(DISTRIBUTION_MODE_PROP), tuple(foreign))


def keyed(cur: Current, key: list[str]) -> bool:
    """The table's partitions are a function of these key columns (bucket, truncate or identity of key
    columns only): rows of one key always lie in one partition, so a join on the key can use them as they lie."""
    names = {k.lower() for k in key}
    return bool(cur.partition_by) and all(
        f.transform in ("bucket", "truncate", "identity") and f.column.lower() in names for f in cur.partition_by
    )


def plan(cur: Current, layout: Layout, ident: str) -> list[tuple[str, str]]:
    """(statement, what it changes) to go from the current layout to the declared one, in order: partition
    fields dropped, then added (a finer time unit replaces a coarser one without both at once), the sort
    order, then the distribution mode the result needs."""
    steps: list[tuple[str, str]] = []
    parts = cur.partition_by
    if layout.partition_by is not None and cur.foreign_partitions:
        raise _foreign(ident, ", ".join(cur.foreign_partitions), "partition_by")
    if layout.partition_by is not None:
        for f in cur.partition_by:
            if not any(f.same(w) for w in layout.partition_by):
                steps.append(
                    (f"ALTER TABLE {ident} DROP PARTITION FIELD {f.sql()}", f"partition field {f.text()} dropped")
                )
        for w in layout.partition_by:
            if not any(w.same(f) for f in cur.partition_by):
                steps.append(
                    (f"ALTER TABLE {ident} ADD PARTITION FIELD {w.sql()}", f"partition field {w.text()} added")
                )
        parts = layout.partition_by
    sorts = cur.sort_by
    sort_step = False
    if layout.sort_by is not None:
        same = (
            cur.foreign_sort is None
            and len(cur.sort_by) == len(layout.sort_by)
            and all(a.same(b) for a, b in zip(cur.sort_by, layout.sort_by, strict=True))
        )
        if not same:
            sort_step = True
            if layout.sort_by:
                order = ", ".join(s.sql() for s in layout.sort_by)
                steps.append((f"ALTER TABLE {ident} WRITE ORDERED BY {order}", f"sort order set to {_sorts(layout)}"))
            else:
                steps.append((f"ALTER TABLE {ident} WRITE UNORDERED", "sort order removed"))
        sorts = layout.sort_by
    mode = distribution_for(bool(parts), bool(sorts) or (cur.foreign_sort is not None and not sort_step))
    # A sort order statement sets the distribution mode itself (WRITE ORDERED BY: range): re-planned after it.
    if mode is not None and mode != cur.distribution and not sort_step:
        steps.append(
            (
                f"ALTER TABLE {ident} SET TBLPROPERTIES ({sql_string(DISTRIBUTION_MODE_PROP)} = {sql_string(mode)})",
                f"{DISTRIBUTION_MODE_PROP} set to {mode}",
            )
        )
    return steps


def _foreign(ident: str, text: str, key: str) -> ConfigError:
    return ConfigError(
        f"the current layout of {ident} ({text}) is not one wap.toml's {key} can express, so wapflow cannot evolve it",
        hint=f"remove {key} from the table's section in wap.toml and manage that part of its layout by hand",
    )


def _sorts(layout: Layout) -> str:
    return ", ".join(s.text() for s in layout.sort_by or ())


def evolve(tables: Tables, table: TableName, layout: Layout, progress: Callable[[str], None]) -> list[str]:
    """Bring an existing table's layout to the declared one; returns what changed (nothing when it matches).

    One statement at a time, each planned from the table as it is now: one that met a concurrent commit is
    tried again on the refreshed table (wapflow.lakehouse.conflicts), and a statement another writer made
    unnecessary is skipped."""
    if not layout.declared:
        return []
    ident = tables.ident(table)
    changed: list[str] = []
    for _ in range(_ROUNDS):
        steps = plan(current(tables, table), layout, ident)
        if not steps:
            return changed
        statement, note = steps[0]
        try:
            retry_on_conflict(
                partial(tables.spark.sql, statement),
                what=f"changing the layout of {table} ({note})",
                on_conflict=lambda: tables.refresh(table),
                hint="retry the run; nothing was written",
            )
        except Exception as e:
            tables.refresh(table)
            if all(s != statement for s, _ in plan(current(tables, table), layout, ident)):
                continue  # another writer made the same change meanwhile
            if isinstance(e, WapError):  # a commit conflict on every attempt
                raise
            named = spark_errors.classify(e, doing=f"changing the layout of {table}")
            if named is not None:
                raise named from e
            raise ConfigError(
                f"Iceberg refused to change the layout of {table} ({note}): {spark_errors.describe(e)}",
                hint=f'fix partition_by / sort_by of [tables."{table.dotted}"] in wap.toml; nothing was written',
            ) from e
        tables.refresh(table)
        changed.append(note)
        progress(f"layout of {table}: {note}")
    raise CommitConflict(
        f"the layout of {table} kept changing under this run", hint="retry the run; nothing was written"
    )
