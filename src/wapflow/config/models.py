"""[models."ns.table"]: a table wap.toml derives from others with SQL or a Python function, and their order.

A model is its table's transformation only: the table's checks, partitioning and policies stay in its
[tables."ns.table"] section, as for any table (a model may add checks and set its write mode here too). What a
model reads is `depends_on`, or, for SQL, the tables its query names (read-only, checked without Spark when
wap.toml loads). The models form a graph run upstream first; a cycle is refused at load.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from wapflow.audit import sqlguard
from wapflow.audit.spec import Check
from wapflow.errors import ConfigError

# The table keys a source, a model or one run may set for itself: the write mode and the keys that go with it.
WRITE_KEYS = ("mode", "key", "delete_when", "order_by", "replace_where")
_PYTHON_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
MODEL_SQL_HINT = 'a model\'s sql is one SELECT over other tables, e.g. sql = "SELECT * FROM raw.trips WHERE fare > 0"'


class ModelConfig(BaseModel):
    """One [models."ns.table"] section."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    sql: str | None = Field(default=None, description="one read-only SELECT over other tables")
    python: str | None = Field(
        default=None,
        description='"package.module:function", called as function(spark, inputs) with inputs a dict of '
        "table name -> DataFrame; returns a DataFrame",
    )
    depends_on: list[str] | None = Field(
        default=None, description="the tables it reads (inferred from sql; required for python)"
    )
    incremental: bool = Field(
        default=False,
        description="read only the rows each input gained since this model last read it (its snapshot recorded "
        "on the model's own commits), not the whole table",
    )
    mode: Literal["append", "merge", "replace"] | None = None
    key: list[str] | None = None
    delete_when: str | None = None
    order_by: list[str] | None = None
    replace_where: str | None = None
    checks: list[Check] = Field(default_factory=list, description="checks besides the table's own")

    @model_validator(mode="after")
    def _one_body(self) -> ModelConfig:
        if (self.sql is None) == (self.python is None):
            raise ValueError('a model has exactly one of sql = "SELECT ..." or python = "package.module:function"')
        if self.python is not None:
            if not _PYTHON_REF.match(self.python):
                raise ValueError(f'python = "{self.python}" is not "package.module:function"')
            if self.depends_on is None:
                raise ValueError('a python model names the tables it reads: depends_on = ["raw.trips", ...]')
        if self.sql is not None:
            self.sql_inputs()  # read-only and parseable, or refused here
        return self

    def sql_inputs(self) -> list[str]:
        """The tables the model's SQL reads, as ns.table (a catalog prefix dropped)."""
        assert self.sql is not None
        try:
            parts = sqlguard.query_tables(self.sql, "the model's sql", hint=MODEL_SQL_HINT)
        except ConfigError as e:
            raise ValueError(f"{e.message} ({e.hint})" if e.hint else e.message) from None
        return [".".join(p[-2:]) for p in parts]

    def inputs(self) -> list[str]:
        """What the model reads: depends_on, else the tables its SQL names."""
        if self.depends_on is not None:
            return list(self.depends_on)
        return self.sql_inputs()

    def write_settings(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in WRITE_KEYS if getattr(self, k) is not None}


def model_order(models: dict[str, ModelConfig], names: list[str] | None = None) -> list[str]:
    """The models to run, upstream first: `names` (every model when None) and every model downstream of them.
    Raises ConfigError (exit 2) on a cycle, naming it, or on an unknown model name."""
    from wapflow.errors import did_you_mean

    for n in names or []:
        if n not in models:
            raise ConfigError(
                f'no [models."{n}"] section{did_you_mean(n, models)}',
                hint=f"known models: {', '.join(models) or 'none'}",
            )
    wanted = set(models) if not names else _downstream(models, set(names))
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            loop = [*path[path.index(name) :], name]
            raise ConfigError(
                f"the models form a cycle: {' -> '.join(loop)}",
                hint="a model cannot read itself, directly or through others: break the cycle in depends_on or sql",
            )
        state[name] = "visiting"
        for upstream in models[name].inputs():
            if upstream in models:
                visit(upstream, [*path, name])
        state[name] = "done"
        if name in wanted:
            order.append(name)

    for name in sorted(models):
        visit(name, [])
    return order


def downstream_models(models: dict[str, ModelConfig], table: str) -> list[str]:
    """The models that read `table`, and every model downstream of them, upstream first (none: [])."""
    dotted = ".".join(table.split(".")[-2:])
    readers = [name for name, m in models.items() if dotted in m.inputs() and name != dotted]
    return model_order(models, readers) if readers else []


def _downstream(models: dict[str, ModelConfig], start: set[str]) -> set[str]:
    found = set(start)
    changed = True
    while changed:
        changed = False
        for name, m in models.items():
            if name not in found and found & set(m.inputs()):
                found.add(name)
                changed = True
    return found
