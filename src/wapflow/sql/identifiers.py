"""Names that reach SQL are validated here and only ever quoted, never spliced from raw user text."""

from __future__ import annotations

import re
from dataclasses import dataclass

from wapflow.errors import InvalidIdentifier

_PART = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_BRANCH = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$")
RESERVED_BRANCHES = {"main"}
_MAX = 128

# The validators take `object`: names come from wap.toml, the CLI and library callers, and anything that is
# not a str is rejected with the same clear error rather than an AttributeError.


def _too_long(name: object, what: str) -> None:
    if isinstance(name, str) and len(name) > _MAX:
        raise InvalidIdentifier(
            f"{what} is too long ({len(name)} characters; at most {_MAX}): {name[:40]}...",
            hint="use a shorter name",
        )


def validate_part(name: object, *, what: str = "name") -> str:
    _too_long(name, what)
    if not isinstance(name, str) or not _PART.match(name):
        raise InvalidIdentifier(
            f"{what} {name!r} is not allowed: use letters, digits and underscores, starting with a letter or _",
            hint="quotes, backticks, dots, spaces and semicolons are rejected so names are always safe in SQL",
        )
    return name


def quote(name: str) -> str:
    """Backtick-quote an identifier that has already been validated."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(value: str) -> str:
    """A SQL string literal for an already validated value (procedure arguments)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def validate_branch(name: object) -> str:
    _too_long(name, "branch name")
    if not isinstance(name, str) or not _BRANCH.match(name):
        raise InvalidIdentifier(
            f"branch name {name!r} is not allowed: use letters, digits, '_' and '-' (at most 128)",
            hint="e.g. --branch wap_fix_2026_11_21; quotes, backticks, dots and semicolons are rejected",
        )
    if name in RESERVED_BRANCHES:
        raise InvalidIdentifier(f"branch name {name!r} is reserved", hint="pick another --branch name")
    return name


@dataclass(frozen=True)
class TableName:
    """A table identifier 'namespace.name' (namespaces may nest: 'a.b.name')."""

    namespace: tuple[str, ...]
    name: str

    @classmethod
    def parse(cls, text: object) -> TableName:
        if not isinstance(text, str) or not text:
            raise InvalidIdentifier("table name is empty", hint="name tables as namespace.table, e.g. nyc.trips")
        parts = text.split(".")
        if len(parts) < 2:
            raise InvalidIdentifier(
                f"table name {text!r} needs a namespace",
                hint=f"use namespace.table, e.g. default.{text}",
            )
        for p in parts:
            validate_part(p, what=f"table name {text!r}: part")
        return cls(tuple(parts[:-1]), parts[-1])

    @property
    def dotted(self) -> str:
        return ".".join((*self.namespace, self.name))

    def sql(self, catalog: str) -> str:
        return ".".join(quote(p) for p in (catalog, *self.namespace, self.name))

    def procedure_arg(self, catalog: str) -> str:
        """The table as an Iceberg procedure's `table` argument: catalog-qualified, so Iceberg does not first try
        its namespace as a catalog (Spark3Util logs a WARN with a 90-line stack trace for that on every call)."""
        return sql_string(self.sql(catalog))

    def namespace_sql(self, catalog: str) -> str:
        return ".".join(quote(p) for p in (catalog, *self.namespace))

    def branch_sql(self, catalog: str, branch: str) -> str:
        validate_branch(branch)
        return f"{self.sql(catalog)}.{quote('branch_' + branch)}"

    def metadata_sql(self, catalog: str, table: str) -> str:
        validate_part(table, what="metadata table")
        return f"{self.sql(catalog)}.{quote(table)}"

    def __str__(self) -> str:
        return self.dotted
