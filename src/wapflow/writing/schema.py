"""The schema contract: the batch's schema against the table's, under the table's policy.

- strict (default): any new, missing or retyped column blocks the run with a readable diff.
- add_columns: new nullable columns are accepted and added to the table when the run publishes
  (never earlier: branches share the table schema, so adding them before the audit would leak).
- ignore_extra: columns the table does not have are dropped from the batch and reported.
Safe widening (int -> bigint, float -> double, ...) is always cast and reported.

The same contract holds for every format: read_batch (wapflow.writing.read) gives a DataFrame
whose column names are exactly those of the files (parquet columns, the CSV header, the keys of the
JSON records), typed like the table where the table has the column (read_type), so extra and
missing columns reach this module instead of being dropped or NULLed by the reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wapflow.errors import SchemaMismatch, did_you_mean
from wapflow.sql.identifiers import quote, validate_part

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructField, StructType


class ContractViolation(SchemaMismatch):
    """The batch's columns break the table's schema contract: the run is blocked by a `schema` check."""

    def __init__(self, message: str, *, hint: str | None = None, problems: list[str]) -> None:
        super().__init__(message, hint=hint)
        self.problems = problems


# (batch type, table type) pairs that lose nothing when cast.
_WIDENINGS = {
    ("tinyint", "smallint"), ("tinyint", "int"), ("tinyint", "bigint"),
    ("smallint", "int"), ("smallint", "bigint"),
    ("int", "bigint"),
    ("float", "double"),
}  # fmt: skip


def _tname(t: DataType) -> str:
    return t.simpleString()


def _complex(t: DataType) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType

    return isinstance(t, (StructType, ArrayType, MapType))


def nested_extras(batch: DataType, table: DataType, path: str = "") -> list[str]:
    """Paths of nested fields the batch's type has and the table's lacks ('user.email', 'items[].sku')."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(batch, StructType) and isinstance(table, StructType):
        t = {f.name.lower(): f for f in table.fields}
        out: list[str] = []
        for f in batch.fields:
            name = f"{path}.{f.name}" if path else f.name
            tf = t.get(f.name.lower())
            out += [name] if tf is None else nested_extras(f.dataType, tf.dataType, name)
        return out
    if isinstance(batch, ArrayType) and isinstance(table, ArrayType):
        return nested_extras(batch.elementType, table.elementType, path + "[]")
    if isinstance(batch, MapType) and isinstance(table, MapType):
        return nested_extras(batch.valueType, table.valueType, path + "{}")
    return []


def read_type(inferred: DataType, table: DataType | None) -> DataType:
    """The type a text format (CSV, JSON) is parsed with for one column.

    The table's type when it has the column, so that a value that does not fit is a parse error
    naming the file, not a guess; the inferred type for a new column. Two exceptions keep the
    inferred type so that the contract reports the column as retyped instead of the reader hiding
    the difference: nested fields the table's struct lacks (the parser would drop them), and an
    object or array where the table has a scalar (the parser would store its JSON text). An
    inferred string where the table has a struct/array/map is parsed with the table's type: Spark
    infers string for a key that is null in every record, and a real string fails the parse.
    """
    if table is None:
        return inferred
    if _complex(inferred) and (type(inferred) is not type(table) or nested_extras(inferred, table)):
        return inferred
    return table


@dataclass
class SchemaDiff:
    added: list[StructField] = field(default_factory=list)  # in the batch, not in the table
    missing: list[StructField] = field(default_factory=list)  # in the table, not in the batch
    retyped: list[tuple[str, str, str]] = field(default_factory=list)  # name, batch type, table type
    widened: list[str] = field(default_factory=list)
    nullability: list[str] = field(default_factory=list)  # required in the table, nullable in the batch
    nested: dict[str, list[str]] = field(default_factory=dict)  # retyped column -> nested fields the table lacks

    def lines(self, table: str, policy: str) -> list[str]:
        out = []
        for f in self.missing:
            out.append(f"- missing column '{f.name}' ({_tname(f.dataType)})")
        for f in self.added:
            verb = "+ new column" if policy != "strict" else "+ extra column"
            out.append(f"{verb} '{f.name}' ({_tname(f.dataType)}) that {table} does not have")
        for name, bt, tt in self.retyped:
            extra = self.nested.get(name.lower())
            if extra:
                out.append(
                    f"~ column '{name}' has nested field(s) {', '.join(repr(e) for e in extra)} "
                    f"that {table} does not have"
                )
            else:
                out.append(f"~ column '{name}' is {bt} in the batch but {tt} in {table} (not a safe widening)")
        for n in self.nullability:
            out.append(f"~ column '{n}' is required in {table} but nullable in the batch")
        return out

    def notes(self) -> list[str]:
        return [f"widened {w}" for w in self.widened]


def compare(batch: StructType, table: StructType) -> SchemaDiff:
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
                extra = nested_extras(bf.dataType, tf.dataType, tf.name)
                if extra:
                    diff.nested[tf.name.lower()] = extra
        if not tf.nullable and bf.nullable:
            diff.nullability.append(tf.name)
    return diff


@dataclass
class Contract:
    df: DataFrame
    diff: SchemaDiff
    new_columns: list[StructField]  # to add at publish time (add_columns)
    dropped_extra: list[str]  # removed from the batch (ignore_extra)

    def report(self) -> list[str]:
        out = self.diff.notes()
        out += [f"new column {f.name} ({_tname(f.dataType)}) added at publish" for f in self.new_columns]
        out += [f"extra column {n} ignored" for n in self.dropped_extra]
        return out


def _same_columns(batch: StructType, table: StructType) -> bool:
    """The batch's columns are the table's: the same names, spelt the same, in the same order, of the same types."""
    return len(batch.fields) == len(table.fields) and all(
        b.name == t.name and _tname(b.dataType) == _tname(t.dataType)
        for b, t in zip(batch.fields, table.fields, strict=False)
    )


def apply_contract(
    df: DataFrame,
    table_schema: StructType,
    *,
    table: str,
    policy: str = "strict",
    files: list[str] | None = None,
) -> Contract:
    """The batch shaped like the table (plus new columns under add_columns), or a SchemaMismatch."""
    from pyspark.sql import functions as F

    diff = compare(df.schema, table_schema)
    blocking = SchemaDiff(missing=diff.missing, retyped=diff.retyped, nullability=diff.nullability, nested=diff.nested)
    if policy == "strict":
        blocking.added = diff.added
    problems = blocking.lines(table, policy)
    if problems:
        near = ""
        if diff.missing and diff.added:
            m = diff.missing[0].name
            near = did_you_mean(m, [f.name for f in diff.added])
            near = f"\n    ('{m}'{near})" if near else ""
        raise ContractViolation(
            f"the schema of {', '.join(files or ['the batch'])} does not match {table}:\n    "
            + "\n    ".join(problems)
            + near,
            hint='fix the file; or set schema = "add_columns" / "ignore_extra" for the table in wap.toml '
            "if new columns are expected",
            problems=problems,
        )
    if not diff.added and _same_columns(df.schema, table_schema):
        return Contract(df, diff, [], [])  # nothing to rename, cast or reorder: no projection to analyse (~20 ms)
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
