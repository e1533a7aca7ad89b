"""The custom_sql check: a read-only query over the new rows (the view `batch`) that must return no rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator

from wapflow.audit import sqlguard
from wapflow.audit.checktype import (
    Against,
    CheckType,
    Evidence,
    Rule,
    first_line,
    read_only,
)
from wapflow.errors import ConfigError
from wapflow.spark.shared_session import session_change

# wapflow.sql.identifiers is imported where it is used: wap.toml holds these models, and reading it (or the
# run store) must not load the lakehouse (tests/test_layers.py).
if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wapflow.audit.checktype import AuditContext, Compiled
    from wapflow.sql.identifiers import TableName


class CustomSqlCheck(CheckType):
    """A query over the batch (a view named `batch`) that must return no rows."""

    check: Literal["custom_sql"]
    sql: str = Field(min_length=1, description="one read-only query over the view `batch` (the new rows)")

    description: ClassVar[str] = "Fails when the query over the new rows (the view `batch`) returns any row."
    example: ClassVar[str] = (
        '[[tables."nyc.trips".checks]]\ncheck = "custom_sql"\nsql = "SELECT * FROM batch WHERE fare_amount < 0"\n'
    )
    computed: ClassVar[tuple[Evidence, ...]] = ("scan",)

    @field_validator("sql")
    @classmethod
    def _sql_is_read_only(cls, v: str) -> str:
        return read_only(sqlguard.check_query_text, v, "custom_sql")

    def default_name(self) -> str:
        return "custom_sql"

    def sql_texts(self) -> list[tuple[str, str, bool]]:
        return [*super().sql_texts(), ("custom_sql", self.sql, True)]

    def validate_on(self, on: Against) -> None:
        spark = on.df.sparkSession
        with session_change():  # the view `batch` is the session's
            on.df.limit(0).createOrReplaceTempView("batch")
            try:
                _ = spark.sql(self.sql).schema  # analysis only: the guard let only a pure read through
            except Exception as e:  # noqa: BLE001 - AnalysisException / ParseException: the user's query is wrong
                raise ConfigError(
                    f"{on.where}: its query is not valid: {first_line(e)}",
                    hint="the new rows are the view `batch`, e.g. SELECT * FROM batch WHERE amount < 0",
                ) from None

    def compile(self, mapping: dict[str, str]) -> Rule:
        return Rule(None, None, "no rows returned")

    def _rows(self, added: DataFrame, c: Compiled) -> DataFrame:
        spark = added.sparkSession
        # spark.sql runs commands at once: only SQL both guard layers accept gets there, checked again right here
        # (a resumed run audits without validate_checks).
        self.guard_sql(spark, self.where(None))
        with session_change():  # the view `batch` is the session's; the analysed plan keeps these rows
            added.where(c.applies).createOrReplaceTempView("batch")
            return spark.sql(self.sql)

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        return {f"{c.key}_f": self._rows(added, c).count()}, "scan"

    def reproduce_sql(self, c: Compiled, src: str) -> str | None:
        return f"-- with the new rows as view `batch`:\n{self.sql}"

    def offending(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> DataFrame | None:
        return self._rows(added, c)

    def main_tables(self, this: TableName, tables_in_sql: Callable[[str], set[TableName]]) -> set[TableName]:
        return tables_in_sql(self.sql)
