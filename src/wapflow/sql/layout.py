"""A table's physical layout as wap.toml declares it: Iceberg partition transforms and a sort order.

`partition_by = ["day(ts)", "bucket(16, id)", "region"]` and `sort_by = ["ts", "id DESC NULLS LAST"]`
are parsed here into typed values, without Spark: wap.toml's model validates them at load, and the
lakehouse renders them into DDL (`wapflow.lakehouse.layout`). Column names go through
`wapflow.sql.identifiers` (validated, then only ever quoted). Parsing also reads a table's current layout
back from Spark's own text (`DESCRIBE TABLE`: `days(ts)`, `truncate(4, s)`; the `sort-order` table
property), so the declared and the current layout compare as the same values.

Whether a transform fits its column's type is decided here too (`check_types`), from Spark's type
names, so a `day()` on a string is a config error before anything is written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from wapflow.errors import ConfigError, InvalidIdentifier, did_you_mean
from wapflow.sql.identifiers import quote, validate_part

# Transform names as wap.toml writes them; Spark's plural spellings (and identity(col)) are accepted too.
TRANSFORMS = ("identity", "year", "month", "day", "hour", "bucket", "truncate")
_ALIASES = {"years": "year", "months": "month", "days": "day", "hours": "hour"}
_TIME = ("year", "month", "day", "hour")
_WITH_WIDTH = ("bucket", "truncate")
# How Spark's DDL names each transform (PARTITIONED BY, ADD/DROP PARTITION FIELD).
_SQL_NAME = {"year": "years", "month": "months", "day": "days", "hour": "hours"}

PARTITION_HINT = (
    'e.g. partition_by = ["day(ts)", "bucket(16, id)", "region"]; transforms: a bare column (identity), '
    "year(col), month(col), day(col), hour(col), bucket(N, col), truncate(N, col)"
)
SORT_HINT = 'e.g. sort_by = ["ts", "id DESC", "name ASC NULLS LAST"]: a column, then ASC or DESC, then NULLS FIRST|LAST'

# Which Spark column types (DataFrame.schema simpleString, reduced to a kind) each transform accepts, per
# Iceberg's spec (bucket: no float, double or boolean; truncate: numbers, strings and binary).
# Spark's integer types (simpleString), also the audit's: an integer column's bounds settle accepted_values.
INTEGER_TYPES = frozenset({"tinyint", "smallint", "int", "bigint"})
_ACCEPTS: dict[str, set[str]] = {
    "year": {"date", "timestamp", "timestamp_ntz"},
    "month": {"date", "timestamp", "timestamp_ntz"},
    "day": {"date", "timestamp", "timestamp_ntz"},
    "hour": {"timestamp", "timestamp_ntz"},
    "bucket": set(INTEGER_TYPES) | {"decimal", "date", "timestamp", "timestamp_ntz", "string", "binary"},
    "truncate": set(INTEGER_TYPES) | {"decimal", "string", "binary"},
}
_NOT_PRIMITIVE = {"struct", "array", "map", "variant", "void", "null", "interval"}
_WHAT_FITS = {
    "year": "a date or timestamp column",
    "month": "a date or timestamp column",
    "day": "a date or timestamp column",
    "hour": "a timestamp column",
    "bucket": "an integer, decimal, date, timestamp, string or binary column",
    "truncate": "an integer, decimal, string or binary column",
    "identity": "a column of a primitive type (not a struct, array or map)",
}


@dataclass(frozen=True)
class PartitionField:
    """One partition transform of one (top-level) column."""

    transform: str  # one of TRANSFORMS
    column: str
    width: int | None = None  # N of bucket(N, col) / truncate(N, col)

    def text(self) -> str:
        """The canonical wap.toml spelling: `region`, `day(ts)`, `bucket(16, id)`."""
        if self.transform == "identity":
            return self.column
        if self.width is not None:
            return f"{self.transform}({self.width}, {self.column})"
        return f"{self.transform}({self.column})"

    def sql(self) -> str:
        """Spark/Iceberg DDL for the field, the column quoted: `region`, days(`ts`), bucket(16, `id`)."""
        col = quote(self.column)
        if self.transform == "identity":
            return col
        if self.width is not None:
            return f"{self.transform}({self.width}, {col})"
        return f"{_SQL_NAME[self.transform]}({col})"

    def same(self, other: PartitionField) -> bool:
        """The same field (column names compare as Spark does: case-insensitively)."""
        return (self.transform, self.column.lower(), self.width) == (other.transform, other.column.lower(), other.width)


@dataclass(frozen=True)
class SortField:
    """One column of a sort order; NULLS FIRST for ascending and NULLS LAST for descending unless given."""

    column: str
    descending: bool = False
    nulls_first: bool = True

    def text(self) -> str:
        return f"{self.column} {self.sql_tail()}"

    def sql(self) -> str:
        return f"{quote(self.column)} {self.sql_tail()}"

    def sql_tail(self) -> str:
        return f"{'DESC' if self.descending else 'ASC'} NULLS {'FIRST' if self.nulls_first else 'LAST'}"

    def same(self, other: SortField) -> bool:
        return (self.column.lower(), self.descending, self.nulls_first) == (
            other.column.lower(),
            other.descending,
            other.nulls_first,
        )


@dataclass(frozen=True)
class Layout:
    """A table's layout. None for either part: wap.toml does not say, and the table's own is left as it is;
    an empty tuple: unpartitioned / unsorted, declared."""

    partition_by: tuple[PartitionField, ...] | None = None
    sort_by: tuple[SortField, ...] | None = None

    @property
    def declared(self) -> bool:
        return self.partition_by is not None or self.sort_by is not None

    def columns(self) -> list[str]:
        """The columns the layout names, in order, each once."""
        names = [f.column for f in self.partition_by or ()] + [s.column for s in self.sort_by or ()]
        return list(dict.fromkeys(names))

    def describe(self) -> str:
        """For progress lines: 'partitioned by day(ts), sorted by ts ASC NULLS FIRST'."""
        parts = []
        if self.partition_by:
            parts.append("partitioned by " + ", ".join(f.text() for f in self.partition_by))
        if self.sort_by:
            parts.append("sorted by " + ", ".join(s.text() for s in self.sort_by))
        return ", ".join(parts)


def _column(text: str, what: str) -> str:
    name = text.strip()
    if len(name) >= 2 and name.startswith("`") and name.endswith("`"):
        name = name[1:-1].replace("``", "`")
    try:
        return validate_part(name, what=what)
    except InvalidIdentifier as e:
        raise ConfigError(
            f"{what} {name!r} is not a column name (letters, digits and underscores; top-level columns only)",
            hint=e.hint,
        ) from None


def _width(text: str, transform: str, spec: str) -> int:
    try:
        n = int(text.strip())
    except ValueError:
        n = 0
    if n <= 0 or n > 2**31 - 1:
        raise ConfigError(
            f"{spec!r}: {transform}(N, col) needs a positive whole number N, not {text.strip()!r}",
            hint=PARTITION_HINT,
        )
    return n


_CALL = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*\((?P<args>[^()]*)\)$")


def parse_partition_field(spec: object, *, allow_void: bool = False) -> PartitionField | None:
    """`day(ts)`, `days(ts)`, `bucket(16, id)`, `truncate(4, name)`, `identity(region)` or `region`.

    None only for Iceberg's `void(col)` (a dropped field of a v1 table) when reading a table back."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"{spec!r} is not a partition transform", hint=PARTITION_HINT)
    text = spec.strip()
    m = _CALL.match(text)
    if m is None:
        if "(" in text or ")" in text:
            raise ConfigError(f"{text!r} is not a partition transform", hint=PARTITION_HINT)
        return PartitionField("identity", _column(text, "column"))
    name = m.group("name").lower()
    name = _ALIASES.get(name, name)
    args = [a.strip() for a in m.group("args").split(",")]
    if name == "void" and allow_void:
        return None
    if name not in TRANSFORMS:
        raise ConfigError(
            f"{text!r}: unknown partition transform '{m.group('name')}'{did_you_mean(name, TRANSFORMS)}",
            hint=PARTITION_HINT,
        )
    if name in _WITH_WIDTH:
        if len(args) != 2:
            raise ConfigError(f"{text!r}: {name} takes a number and a column, {name}(N, col)", hint=PARTITION_HINT)
        return PartitionField(name, _column(args[1], f"{text!r}: column"), _width(args[0], name, text))
    if len(args) != 1 or not args[0]:
        raise ConfigError(f"{text!r}: {name} takes one column, {name}(col)", hint=PARTITION_HINT)
    return PartitionField(name, _column(args[0], f"{text!r}: column"))


_SORT = re.compile(
    r"^(?P<col>`[^`]+`|[^\s`]+)(?:\s+(?P<dir>ASC|DESC))?(?:\s+NULLS\s+(?P<nulls>FIRST|LAST))?$", re.IGNORECASE
)


def parse_sort_field(spec: object) -> SortField:
    """`ts`, `id DESC`, `name ASC NULLS LAST` (keywords in any case)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"{spec!r} is not a sort column", hint=SORT_HINT)
    text = " ".join(spec.split())
    m = _SORT.match(text)
    if m is None:
        raise ConfigError(f"{text!r} is not a sort column", hint=SORT_HINT)
    col = m.group("col")
    if "(" in col:
        raise ConfigError(f"{text!r}: sort_by takes columns, not transforms", hint=SORT_HINT)
    desc = (m.group("dir") or "ASC").upper() == "DESC"
    nulls = m.group("nulls")
    first = (not desc) if nulls is None else nulls.upper() == "FIRST"
    return SortField(_column(col, "column" if col == text else f"{text!r}: column"), desc, first)


def parse_partition_by(specs: Iterable[object]) -> tuple[PartitionField, ...]:
    """Every field parsed; a field twice, or two time transforms of one column, is refused (Iceberg would)."""
    fields: list[PartitionField] = []
    for spec in specs:
        f = parse_partition_field(spec)
        assert f is not None
        for prior in fields:
            if f.same(prior):
                raise ConfigError(f"{f.text()!r} is listed twice", hint="list each partition field once")
            if f.transform in _TIME and prior.transform in _TIME and f.column.lower() == prior.column.lower():
                raise ConfigError(
                    f"{prior.text()!r} and {f.text()!r} partition one column by two time units",
                    hint="keep the finer one (Iceberg refuses redundant time partitions)",
                )
        fields.append(f)
    return tuple(fields)


def parse_sort_by(specs: Iterable[object]) -> tuple[SortField, ...]:
    fields: list[SortField] = []
    for spec in specs:
        s = parse_sort_field(spec)
        if any(s.column.lower() == prior.column.lower() for prior in fields):
            raise ConfigError(f"column {s.column!r} is sorted on twice", hint="list each sort column once")
        fields.append(s)
    return tuple(fields)


def layout_of(partition_by: Sequence[str] | None, sort_by: Sequence[str] | None) -> Layout:
    return Layout(
        None if partition_by is None else parse_partition_by(partition_by),
        None if sort_by is None else parse_sort_by(sort_by),
    )


def split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses (Spark's `sort-order` property: 'bucket(16, id) ASC, ts DESC')."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def type_kind(simple: str) -> str:
    """Spark's type name (`decimal(10,2)`, `varchar(8)`, `struct<a:int>`) reduced to what transforms care about."""
    t = simple.strip().lower()
    base = re.split(r"[(<]", t, maxsplit=1)[0].strip()
    if base in ("varchar", "char"):
        return "string"
    if base.startswith("interval"):
        return "interval"
    return base


def check_types(layout: Layout, columns: Mapping[str, str], *, table: str) -> Layout:
    """The layout against the batch's columns (name -> Spark type name): every named column exists and
    every transform fits its type, else one ConfigError listing each problem. Returns the layout with the
    columns spelled as the batch spells them (Spark matches names case-insensitively)."""
    by_lower = {name.lower(): name for name in columns}
    problems: list[str] = []

    def resolve(col: str, key: str, spec: str, transform: str) -> str:
        actual = by_lower.get(col.lower())
        if actual is None:
            problems.append(f"{key} {spec!r}: no column {col!r} in the batch{did_you_mean(col, columns)}")
            return col
        kind = type_kind(columns[actual])
        fits = kind not in _NOT_PRIMITIVE if transform == "identity" else kind in _ACCEPTS[transform]
        if not fits:
            what = "sort_by" if key == "sort_by" else f"{transform}()" if transform != "identity" else "identity"
            problems.append(
                f"{key} {spec!r}: column {actual} is {columns[actual]}; {what} needs {_WHAT_FITS[transform]}"
            )
        return actual

    parts = None
    if layout.partition_by is not None:
        parts = tuple(
            replace(f, column=resolve(f.column, "partition_by", f.text(), f.transform)) for f in layout.partition_by
        )
    sorts = None
    if layout.sort_by is not None:
        sorts = tuple(replace(s, column=resolve(s.column, "sort_by", s.text(), "identity")) for s in layout.sort_by)
    if problems:
        raise ConfigError(
            f'[tables."{table}"]: the layout does not fit the batch: ' + "; ".join(problems),
            hint="fix partition_by / sort_by in wap.toml (or the files' columns); nothing was written",
        )
    return Layout(parts, sorts)
