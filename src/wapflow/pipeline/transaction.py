"""`wapflow.transaction`: a Spark job's writes to several tables, audited and published together or not at all.

    with wapflow.transaction(lh, name="nightly") as tx:
        silver = clean(tx.read("raw.trips"))
        tx.write("silver.trips", silver)
        tx.write("gold.daily", aggregate(tx.read("silver.trips")))   # silver as staged, not main
    tx.result.status   # published | blocked | awaiting_review | failed

Each `write` goes to the run's branch at once (a multi-table run, wapflow.pipeline.multi, one table at a time),
so a later `read` sees it staged. Leaving the block audits every table and publishes all in one commit; an
exception inside it publishes nothing, records every table's run as failed and propagates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from wapflow.config import write_settings
from wapflow.sql.identifiers import TableName

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wapflow.config import Check
    from wapflow.errors import WapError
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.lakehouse.tables import Tables
    from wapflow.pipeline.multi import MultiWapRun
    from wapflow.pipeline.result import MultiRunResult


class Transaction:
    """The tables a `with wapflow.transaction(...)` block writes, and what it reads."""

    def __init__(self, group: MultiWapRun) -> None:
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

    def has_written(self, table: str) -> bool:
        name = TableName.parse(table).dotted
        return any(TableName.parse(r.table).dotted == name for r in self._group.runs)

    def view_of(self, table: str) -> tuple[Tables, str]:
        """Where this transaction reads `table` and at which ref: the run's sandbox for a table it wrote, else
        main of the catalog."""
        if self.has_written(table):
            branches = self.lh.branches
            return branches.tables_for(self._group.branch), branches.iceberg_ref(self._group.branch)
        return self.lh.tables, "main"

    def read(self, table: str) -> DataFrame:
        """The table as this transaction sees it: a table it wrote, staged (main plus what it wrote); any other,
        its main."""
        tables, ref = self.view_of(table)
        return tables.read(TableName.parse(table), None if ref == "main" else ref)
