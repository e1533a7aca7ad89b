"""Checks written next to a dataset in a pipeline's Python code:

    @dp.materialized_view
    @wapflow.expect("positive_amount", "amount > 0")
    def orders(): ...

`expect(NAME, CONDITION)` is an `expression` check (a row passes when the condition is true);
`expect(wapflow.checks.unique("id"))` takes any check `wapflow.checks` builds. They add to the dataset's
checks in wap.toml.
Nothing here needs Spark: the decorators only mark the function, `wap pipelines run` reads the marks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

from wapflow.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])
CHECKS_ATTR = "__wapflow_checks__"
_ORDER_HINT = "put @wapflow.expect below @dp.materialized_view / @dp.table / @dp.append_flow, right above the function"


def expect(
    check: Any, condition: str | None = None, *, severity: Literal["error", "warn"] = "error"
) -> Callable[[F], F]:
    """A check on this dataset: `expect(NAME, CONDITION)`, rows must make CONDITION (Spark SQL over the columns)
    true, NULL failing as in SQL; or `expect(wapflow.checks.unique("id"))`, any check `wapflow.checks` builds."""
    if isinstance(check, str):
        if not condition:
            raise UsageError(
                f"wapflow.expect({check!r}) needs a condition", hint='e.g. wapflow.expect("positive", "amount > 0")'
            )
        fields: dict[str, Any] = {"check": "expression", "name": check, "sql": condition, "severity": severity}
    elif hasattr(check, "model_dump"):
        fields = check.model_dump(mode="json", by_alias=True, exclude_defaults=True) | {"check": check.check}
        if severity != "error":
            fields["severity"] = severity
    else:
        raise UsageError(
            f"wapflow.expect takes a name and a condition, or a check from wapflow.checks; got {check!r}",
            hint='e.g. wapflow.expect("positive", "amount > 0") or wapflow.expect(wapflow.checks.unique("id"))',
        )

    def mark(func: F) -> F:
        if not callable(func):
            raise UsageError(
                f"wapflow.expect({fields.get('name') or fields['check']!r}) was applied to {func!r}, not a function",
                hint=_ORDER_HINT,
            )
        marks = list(getattr(func, CHECKS_ATTR, []))
        setattr(func, CHECKS_ATTR, [fields, *marks])  # decorators apply bottom-up: keep the written order
        return func

    return mark


def checks_of(func: object) -> list[dict[str, Any]]:
    """The checks marked on a dataset's function, in the order written."""
    return list(getattr(func, CHECKS_ATTR, []))
