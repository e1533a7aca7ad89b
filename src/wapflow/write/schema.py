"""The schema contract: the batch's schema against the table's, under the table's policy.

- strict (default): any new, missing or retyped column blocks the run with a readable diff.
- add_columns: new nullable columns are accepted and added to the table when the run publishes
  (never earlier: branches share the table schema, so adding them before the audit would leak).
- ignore_extra: columns the table does not have are dropped from the batch and reported.
Safe widening (int -> bigint, float -> double, ...) is always cast and reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wapflow.errors import SchemaMismatch, did_you_mean
from wapflow.lakehouse.identifiers import quote, validate_part

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructField, StructType

# (batch type, table type) pairs that lose nothing when cast.
_WIDENINGS = {
    ("tinyint", "smallint"), ("tinyint", "int"), ("tinyint", "bigint"),
    ("smallint", "int"), ("smallint", "bigint"),
    ("int", "bigint"),
    ("float", "double"),
}  # fmt: skip


def _tname(t: "DataType") -> str:
    return t.simpleString()


@dataclass
class SchemaDiff:
    added: list["StructField"] = field(default_factory=list)  # in the batch, not in the table
    missing: list["StructField"] = field(default_factory=list)  # in the table, not in the batch
    retyped: list[tuple[str, str, str]] = field(default_factory=list)  # name, batch type, table type
    widened: list[str] = field(default_factory=list)
    nullability: list[str] = field(default_factory=list)  # required in the table, nullable in the batch

    def lines(self, table: str, policy: str) -> list[str]:
        out = []
        for f in self.missing:
            out.append(f"- missing column '{f.name}' ({_tname(f.dataType)})")
        for f in self.added:
            verb = "+ new column" if policy != "strict" else "+ extra column"
            out.append(f"{verb} '{f.name}' ({_tname(f.dataType)}) that {table} does not have")
        for name, bt, tt in self.retyped:
            out.append(f"~ column '{name}' is {bt} in the batch but {tt} in {table} (not a safe widening)")
        for n in self.nullability:
            out.append(f"~ column '{n}' is required in {table} but nullable in the batch")
        return out

    def notes(self) -> list[str]:
        return [f"widened {w}" for w in self.widened]


def compare(batch: "StructType", table: "StructType") -> SchemaDiff:
    b = {f.name.lower(): f for f in batch.fields}
    t = {f.name.lower(): f for f in table.fields}
    diff = SchemaDiff()
    diff.missing = [f for k, f in t.items() if k not in b]
    diff.added = [f for k, f in b.items() if k not in t]
    for k, tf in t.items():
        bf = b.get(k)
        if bf is None:
            continue
        bt, tt = _tname(bf.dataType), _tname(tf.dataType)
        if bt != tt:
            if (bt, tt) in _WIDENINGS:
                diff.widened.append(f"{tf.name}: {bt} -> {tt}")
            else:
                diff.retyped.append((tf.name, bt, tt))
        if not tf.nullable and bf.nullable:
            diff.nullability.append(tf.name)
    return diff


@dataclass
class Contract:
    df: "DataFrame"
    diff: SchemaDiff
    new_columns: list["StructField"]  # to add at publish time (add_columns)
    dropped_extra: list[str]  # removed from the batch (ignore_extra)

    def report(self) -> list[str]:
        out = self.diff.notes()
        out += [f"new column {f.name} ({_tname(f.dataType)}) added at publish" for f in self.new_columns]
        out += [f"extra column {n} ignored" for n in self.dropped_extra]
        return out


def apply_contract(
    df: "DataFrame",
    table_schema: "StructType",
    *,
    table: str,
    policy: str = "strict",
    files: list[str] | None = None,
) -> Contract:
    """The batch shaped like the table (plus new columns under add_columns), or a SchemaMismatch."""
    from pyspark.sql import functions as F

    diff = compare(df.schema, table_schema)
    blocking = SchemaDiff(missing=diff.missing, retyped=diff.retyped, nullability=diff.nullability)
    if policy == "strict":
        blocking.added = diff.added
    problems = blocking.lines(table, policy)
    if problems:
        near = ""
        if diff.missing and diff.added:
            m = diff.missing[0].name
            near = did_you_mean(m, [f.name for f in diff.added])
            near = f"\n    ('{m}'{near})" if near else ""
        raise SchemaMismatch(
            f"the schema of {', '.join(files or ['the batch'])} does not match {table}:\n    "
            + "\n    ".join(problems)
            + near,
            hint='fix the file; or set schema = "add_columns" / "ignore_extra" for the table in wap.toml '
            "if new columns are expected",
        )
    batch = {f.name.lower(): f for f in df.schema.fields}
    cols = []
    for tf in table_schema.fields:
        bf = batch[tf.name.lower()]
        c = F.col(quote(bf.name))
        cols.append((c.cast(tf.dataType) if _tname(bf.dataType) != _tname(tf.dataType) else c).alias(tf.name))
    new_columns: list[StructField] = []
    dropped: list[str] = []
    if policy == "add_columns":
        for f in diff.added:
            validate_part(f.name, what="new column name")
            new_columns.append(f)
            cols.append(F.col(quote(f.name)))
    elif policy == "ignore_extra":
        dropped = [f.name for f in diff.added]
    return Contract(df.select(*cols), diff, new_columns, dropped)


def add_columns_sql(table_sql: str, columns: list["StructField"]) -> str:
    """ALTER TABLE ... ADD COLUMNS for validated names and Spark's own type strings."""
    parts = []
    for f in columns:
        validate_part(f.name, what="new column name")
        parts.append(f"{quote(f.name)} {f.dataType.simpleString()}")
    return f"ALTER TABLE {table_sql} ADD COLUMNS ({', '.join(parts)})"
