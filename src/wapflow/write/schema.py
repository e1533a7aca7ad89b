"""Batch schema vs table schema: what may be written without changing the table.

Until schema-evolution policies exist, the contract is strict: same columns (by name, case-
insensitive), same types, except safe widening (int -> long, float -> double), which is cast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wapflow.errors import SchemaMismatch, did_you_mean

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

# (batch type, table type) pairs that lose nothing when cast.
_WIDENINGS = {
    ("tinyint", "smallint"), ("tinyint", "int"), ("tinyint", "bigint"),
    ("smallint", "int"), ("smallint", "bigint"),
    ("int", "bigint"),
    ("float", "double"),
}  # fmt: skip


@dataclass
class Alignment:
    widened: list[str] = field(default_factory=list)


def _tname(t: "DataType") -> str:
    return t.simpleString()


def align_to_table(
    df: "DataFrame", table_schema: "StructType", *, table: str, files: list[str] | None = None
) -> tuple["DataFrame", Alignment]:
    """Select the table's columns in its order, casting safe widenings; anything else is an error."""
    from pyspark.sql import functions as F

    batch = {f.name.lower(): f for f in df.schema.fields}
    target = {f.name.lower(): f for f in table_schema.fields}
    problems: list[str] = []
    for name, f in target.items():
        if name not in batch:
            problems.append(f"missing column '{f.name}' ({_tname(f.dataType)}){did_you_mean(f.name, [b.name for b in batch.values() if b.name.lower() not in target])}")
    for name, f in batch.items():
        if name not in target:
            problems.append(
                f"extra column '{f.name}' ({_tname(f.dataType)}) that {table} does not have"
                f"{did_you_mean(f.name, [t.name for t in target.values() if t.name.lower() not in batch])}"
            )
    info = Alignment()
    cols = []
    for name, tf in target.items():
        bf = batch.get(name)
        if bf is None:
            continue
        bt, tt = _tname(bf.dataType), _tname(tf.dataType)
        if bt == tt:
            cols.append(F.col(bf.name).alias(tf.name))
        elif (bt, tt) in _WIDENINGS:
            info.widened.append(f"{tf.name}: {bt} -> {tt}")
            cols.append(F.col(bf.name).cast(tf.dataType).alias(tf.name))
        else:
            problems.append(f"column '{tf.name}' is {bt} in the batch but {tt} in {table} (not a safe widening)")
    if problems:
        raise SchemaMismatch(
            f"the schema of {', '.join(files or ['the batch'])} does not match {table}:\n    " + "\n    ".join(problems),
            hint="fix the file, or write it to a new table; schema evolution policies are not supported yet",
        )
    return df.select(*cols), info
