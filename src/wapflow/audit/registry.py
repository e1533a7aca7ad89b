"""The reference of check types, as data and as Markdown, read from the check classes (audit.spec).

The docs render this instead of a hand-written list, so the reference cannot drift from the code: names,
parameters (types, defaults, required) come from the pydantic models, descriptions and examples from the
classes, and how each is computed from the same attribute the audit engine plans with.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from wapflow.audit.checktype import CheckType, Evidence
from wapflow.audit.spec import CHECK_MODELS

# What each kind of evidence means, for people choosing checks by cost.
EVIDENCE: dict[Evidence, str] = {
    "metadata": "Iceberg metadata (file statistics where they answer exactly, or the table's published runs), "
    "without reading rows",
    "write": "observed while the branch is written, at no extra scan (one aggregation over the new rows "
    "when the audit resumes)",
    "scan": "its own query over the new rows",
    "join": "a join of the new rows with a table: its main (or, for `unique` on a merge, the table after the "
    "merge on the run's branch)",
}

# Options every check accepts (declared on the base class), and `mostly` of row-level checks.
_COMMON = {*CheckType.model_fields, "mostly"} - {"check"}


@dataclass(frozen=True)
class Parameter:
    name: str  # the wap.toml key
    type: str
    required: bool
    default: Any  # None when required or when the default is None
    description: str
    common: bool  # accepted by every check (or every row-level check), not this type's own


@dataclass(frozen=True)
class CheckReference:
    name: str  # the `check` key's value
    description: str
    computed: list[Evidence]  # cheapest first
    row_level: bool
    parameters: list[Parameter]
    example: str  # wap.toml


def _type_name(t: Any) -> str:
    if t is type(None):
        return "None"
    origin = get_origin(t)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(t))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(t))
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in get_args(t))}]"
    return getattr(t, "__name__", str(t))


def _parameter(key: str, field: FieldInfo) -> Parameter:
    required = field.is_required()
    default = None if required or field.default is PydanticUndefined else field.default
    return Parameter(
        name=field.alias or key,
        type=_type_name(field.annotation),
        required=required,
        default=default,
        description=field.description or "",
        common=key in _COMMON,
    )


def reference_of(model: type[CheckType]) -> CheckReference:
    return CheckReference(
        name=model.type_name(),
        description=model.description,
        computed=list(model.computed),
        row_level=model.row_level,
        parameters=[_parameter(k, f) for k, f in model.model_fields.items() if k != "check"],
        example=model.example,
    )


def check_reference() -> list[CheckReference]:
    """Every built-in check type, in registry order."""
    return [reference_of(m) for m in CHECK_MODELS.values()]


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)


def _cell(text: str) -> str:
    """Text for a table cell: `|` escaped outside code spans (a code span keeps its `|` as it is)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("|", "\\|")
    return "`".join(parts)


def check_reference_markdown() -> str:
    """The check types as Markdown: a summary table, then one `## ` part per type (the page title is the caller's)."""
    refs = check_reference()
    lines = ["| check | fails when | computed from |", "|---|---|---|"]
    lines += [f"| [`{r.name}`](#{r.name}) | {_cell(r.description)} | {', '.join(r.computed)} |" for r in refs]
    for r in refs:
        lines += ["", f"## `{r.name}`", "", r.description, ""]
        lines.append(
            "Row-level: `mostly`, quarantine and samples of failing rows apply."
            if r.row_level
            else "Batch-level: one verdict for the whole batch."
        )
        lines += ["", f"Computed from: {'; else '.join(EVIDENCE[e] for e in r.computed)}.", ""]
        lines += ["| parameter | type | default | meaning |", "|---|---|---|---|"]
        own = [p for p in r.parameters if not p.common]
        shared = [p for p in r.parameters if p.common]
        lines += [
            f"| `{p.name}` | {_cell('`' + p.type + '`')} | {_default(p)} | {_cell(p.description)} |"
            for p in own + shared
        ]
        lines += ["", "```toml", r.example.rstrip("\n"), "```"]
    return "\n".join(lines) + "\n"


def _default(p: Parameter) -> str:
    if p.required:
        return "required"
    return "-" if p.default is None else f"`{_toml(p.default)}`"
