"""The registry of built-in check types: the `check` key's value -> its class, and the wap.toml union of them.

Each type is one class (audit.row_checks, audit.batch_checks; what they all are: audit.checktype), and
audit.registry renders the reference of them. Adding a check type means one class, its entry in `_BUILTIN`
and its tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Union

from pydantic import Field

from wapflow.audit.batch_checks import (
    AnomalyCheck,
    ControlTotalsCheck,
    CustomSqlCheck,
    ForeignKeyCheck,
    FreshnessCheck,
    MaxChangeCheck,
    NullRateCheck,
    ReconcileCheck,
    RowCountCheck,
    SchemaChangeCheck,
    UniqueCheck,
    UniqueInTableCheck,
    VolumeCheck,
)
from wapflow.audit.checktype import CheckType
from wapflow.audit.row_checks import (
    AcceptedValuesCheck,
    BetweenCheck,
    ExpressionCheck,
    MaxLengthCheck,
    NotNullCheck,
    RegexCheck,
)

# The per-type classes are exported from here too: callers name a check type by the registry's module.
__all__ = [
    "CHECK_MODELS",
    "CHECK_TYPES",
    "AcceptedValuesCheck",
    "AnomalyCheck",
    "BetweenCheck",
    "Check",
    "ControlTotalsCheck",
    "CustomSqlCheck",
    "ExpressionCheck",
    "ForeignKeyCheck",
    "FreshnessCheck",
    "MaxChangeCheck",
    "MaxLengthCheck",
    "NotNullCheck",
    "NullRateCheck",
    "ReconcileCheck",
    "RegexCheck",
    "RowCountCheck",
    "SchemaChangeCheck",
    "UniqueCheck",
    "UniqueInTableCheck",
    "VolumeCheck",
]

# Every built-in check type, in the order the reference lists them. The one list: the wap.toml union and
# CHECK_MODELS below are made from it.
_BUILTIN: tuple[type[CheckType], ...] = (
    NotNullCheck,
    BetweenCheck,
    AcceptedValuesCheck,
    RegexCheck,
    MaxLengthCheck,
    ExpressionCheck,
    NullRateCheck,
    RowCountCheck,
    UniqueCheck,
    UniqueInTableCheck,
    ForeignKeyCheck,
    ReconcileCheck,
    ControlTotalsCheck,
    FreshnessCheck,
    VolumeCheck,
    AnomalyCheck,
    SchemaChangeCheck,
    MaxChangeCheck,
    CustomSqlCheck,
)

if TYPE_CHECKING:
    Check = CheckType
else:
    # pydantic picks the model by the `check` key (a discriminated union of every built-in type).
    Check = Annotated[Union[_BUILTIN], Field(discriminator="check")]  # noqa: UP007 - a union built from a tuple

# check type (the `check` key's value) -> its class: the registry of check types
CHECK_MODELS: dict[str, type[CheckType]] = {m.type_name(): m for m in _BUILTIN}
CHECK_TYPES = list(CHECK_MODELS)
