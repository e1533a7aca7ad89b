"""`wapflow.transaction`: a Spark job's writes to several tables, audited and published together or not at all.

    with wapflow.transaction(lh, name="nightly") as tx:
        silver = clean(tx.read("raw.trips"))
        tx.write("silver.trips", silver)
        tx.write("gold.daily", aggregate(tx.read("silver.trips")))   # silver as staged, not main
        tx.sql("SELECT day, count(*) FROM silver.trips GROUP BY day")  # read-only SQL, the same view
    tx.result.status   # published | blocked | awaiting_review | failed

Each `write` goes to the run's branch at once (a run that fills as it goes, wapflow.pipeline.opengroup),
so a later `read` or `sql` sees it staged. Leaving the block audits every table and publishes all in one commit;
an exception inside it publishes nothing, records every table's run as failed and propagates.

A run id given again (after a crash, or a job run twice) resumes that run: each table's write finds its rows
already on the branch, a run already published publishes nothing again and ends with its earlier outcome (its
tables then read at main, which holds what it wrote).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from wapflow.audit import sqlguard
from wapflow.config import write_settings
from wapflow.errors import ConfigError, UsageError
from wapflow.sql.identifiers import TableName

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from wapflow.config import Check
    from wapflow.errors import WapError
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.lakehouse.tables import Tables
    from wapflow.pipeline.opengroup import OpenGroup
    from wapflow.pipeline.result import MultiRunResult
    from wapflow.pipeline.state import RunState

SQL_HINT = (
    "tx.sql only reads: write one SELECT over the tables, e.g. SELECT day, count(*) FROM silver.trips GROUP BY day"
)


class Transaction:
    """The tables a `with wapflow.transaction(...)` block writes, and what it reads."""

    def __init__(self, group: OpenGroup) -> None:
        self._group = group
        self.result: MultiRunResult | None = None  # set when the block ends

    @property
    def run_id(self) -> str:
        return self._group.run_id

    @property
    def ended(self) -> MultiRunResult | None:
        """The run's outcome once it ended (a write that failed ends it at once)."""
        return self._group.outcome

    @property
    def lh(self) -> Lakehouse:
        return self._group.lh

    def write(
        self,
        table: str,
        df: DataFrame,
        *,
        mode: str | None = None,
        key: list[str] | None = None,
        delete_when: str | None = None,
        order_by: list[str] | None = None,
        replace_where: str | None = None,
        checks: Sequence[Check] = (),
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """Write `df` to `table` on the run's branch (mode and keys: the table's section unless given here;
        `checks` besides the table's own). Nothing is published until the block ends."""
        self._refuse_if_ended(f"tx.write({table!r})")
        self._group.add(
            table,
            df,
            write_settings(mode, key, delete_when, order_by, replace_where),
            checks=checks,
            properties=properties,
        )

    def finish(self) -> MultiRunResult:
        """The block ended: audit every table written, then publish them all in one commit, or none."""
        self.result = self._group.finish()
        return self.result

    def fail_table(self, table: str, error: WapError) -> MultiRunResult:
        """`table` could not be computed (e.g. its model failed): the run ends failed, naming it; nothing published."""
        self.result = self._group.fail_table(table, error)
        return self.result

    def abandon(self, error: BaseException) -> MultiRunResult:
        """The block raised: nothing is published, every table's run is recorded failed with the error."""
        self.result = self._group.abandon(error)
        return self.result

    def _refuse_if_ended(self, call: str) -> None:
        """A write, read or query once the block ended has no run to join: refused, naming the run's outcome."""
        ended = self.ended
        if ended is not None:
            raise UsageError(
                f"{call} after transaction {self.run_id} ended ({ended.status}); nothing was done",
                hint="write and query the tables inside the `with wapflow.transaction(...)` block (after it, "
                "wapflow.read reads main), or start a new transaction",
            )

    def _run_of(self, table: str) -> RunState | None:
        return self._group.member(table)

    def has_written(self, table: str) -> bool:
        return self._run_of(table) is not None

    def view_of(self, table: str) -> tuple[Tables, str]:
        """Where this transaction reads `table` and at which ref: the run's sandbox for a table it wrote, else
        main of the catalog (also for a table this run id published before: its rows are on main, no branch)."""
        run = self._run_of(table)
        if run is not None and run.already_published is None:
            branches = self.lh.iceberg
            return branches.tables_for(self._group.branch), branches.iceberg_ref(self._group.branch)
        return self.lh.tables, "main"

    def read(self, table: str) -> DataFrame:
        """The table as this transaction sees it: a table it wrote, staged (main plus what it wrote); any other,
        its main."""
        self._refuse_if_ended(f"tx.read({table!r})")
        tables, ref = self.view_of(table)
        return tables.read(TableName.parse(table), None if ref == "main" else ref)

    def sql(self, query: str) -> DataFrame:
        """A read-only query (one SELECT, checked by the SQL guard) over the tables as this transaction sees them:
        a table it wrote, staged; any other, its main. A statement that writes, or a table neither written here
        nor in the catalog, raises a ConfigError (exit 2); raised inside the block, nothing is published."""
        what = f"the sql of transaction {self.run_id}"
        self._refuse_if_ended("tx.sql(...)")

        def table_frame(parts: tuple[str, ...]) -> DataFrame:
            if len(parts) > 2 and parts[0] == self.lh.catalog:
                parts = parts[1:]  # catalog.ns.table: this catalog's table
            name = ".".join(parts)
            try:
                table = TableName.parse(name)
            except ConfigError as e:
                raise ConfigError(f"{what} reads {name}: {e}", hint="name tables as namespace.table") from None
            if not self.has_written(name) and not self.lh.tables.exists(table):
                raise ConfigError(
                    f"{what} reads {table.dotted}, which is neither written by the transaction nor a table of "
                    "the catalog",
                    hint="write it first in the block (tx.write), or fix the name",
                )
            return self.read(table.dotted)

        return query_over(self.lh.spark, query, what, table_frame, hint=SQL_HINT)


def query_over(
    spark: SparkSession,
    query: str,
    what: str,
    frame_of: Callable[[tuple[str, ...]], DataFrame],
    *,
    hint: str = SQL_HINT,
) -> DataFrame:
    """A read-only query run with each table it names (as written: ns.table) swapped for a temporary view of
    `frame_of(parts)`, checked by the SQL guard before (its text) and after (Spark's parse of what runs), and
    analysed here, so an unknown column fails naming `what` (Spark's line and position are the query's own)."""
    from wapflow.spark import errors as spark_errors

    tag = uuid.uuid4().hex[:8]
    views: dict[tuple[str, ...], str] = {}
    for parts in sqlguard.query_tables(query, what, hint=hint):
        view = f"wap_tx_{tag}_{len(views)}"
        frame_of(parts).createOrReplaceTempView(view)
        views[parts] = view
    text = sqlguard.with_tables_renamed(query, what, views)
    sqlguard.check_query_plan(spark, text, what, hint=hint)
    try:
        df = spark.sql(text)
        df.schema  # noqa: B018 - analysed here: an unknown column fails now, naming the query
    except Exception as e:
        raise ConfigError(f"{what} does not run: {spark_errors.describe(e)}", hint=hint) from e
    return df
