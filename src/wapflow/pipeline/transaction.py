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

from typing import TYPE_CHECKING, Any

from wapflow.sql.identifiers import TableName

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wapflow.lakehouse.lakehouse import Lakehouse
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
    ) -> None:
        """Write `df` to `table` on the run's branch (mode and keys: the table's section unless given here).
        Nothing is published until the block ends."""
        settings: dict[str, Any] = {
            "mode": mode,
            "key": key,
            "delete_when": delete_when,
            "order_by": order_by,
            "replace_where": replace_where,
        }
        self._group.add(table, df, {k: v for k, v in settings.items() if v is not None})

    def finish(self) -> MultiRunResult:
        """The block ended: audit every table written, then publish them all in one commit, or none."""
        self.result = self._group.finish()
        return self.result

    def abandon(self, error: BaseException) -> MultiRunResult:
        """The block raised: nothing is published, every table's run is recorded failed with the error."""
        self.result = self._group.abandon(error)
        return self.result

    def read(self, table: str) -> DataFrame:
        """The table as this transaction sees it: a table it wrote, staged (main plus what it wrote); any other,
        its main."""
        name = TableName.parse(table)
        written = {TableName.parse(r.table).dotted for r in self._group.runs}
        branches = self.lh.branches
        if name.dotted in written:
            ref = branches.iceberg_ref(self._group.branch)
            return branches.tables_for(self._group.branch).read(name, None if ref == "main" else ref)
        return self.lh.tables.read(name)
