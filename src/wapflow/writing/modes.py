"""Write modes: how a batch changes its table (`mode` in [tables.X]): append, merge or replace.

One seam, one class per mode. The write step asks the table's mode, never which mode it is:
- what is wrong with the declaration against the batch and the table (ConfigError, exit 2, nothing written);
- the rows the write applies (merge: the latest change per key with `order_by`);
- what blocks the batch before anything is written (an audit failure naming sample keys or rows): NULL keys and
  duplicate keys of a merge, batch rows outside a replace's `replace_where`;
- the write itself onto the run's branch, its commit carrying the run's snapshot properties (so a resumed
  write finds it and never applies the change twice);
- the rows the row-level checks audit (merge: the batch's inserted and updated rows, not the files a
  copy-on-write merge rewrote);
- the change, from the commit's snapshot summary: rows inserted, updated, deleted, replaced (audit metrics,
  `max_change`), and (merge) a few sample keys of each kind, for `wap diff`;
- whether publishing on a moved main may re-apply the commit as it is (appends: cherry-pick) or must run
  the change again on a fresh branch of the new main (merge, replace).
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from wapflow.audit import sqlguard
from wapflow.audit.checks import boolean_condition
from wapflow.audit.report import CheckResult
from wapflow.errors import ConfigError, did_you_mean
from wapflow.lakehouse.model import ADDED_RECORDS, DELETED_RECORDS, snapshot_property_confs
from wapflow.spark.shared_session import sql_with_confs
from wapflow.sql.identifiers import quote

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from pyspark.sql import Column, DataFrame, SparkSession

    from wapflow.config import TableConfig

SAMPLES = 20
KEY_SAMPLES = 5  # sample keys per kind of change (inserted, updated, deleted) a merge records for `wap diff`
CHANGE_KINDS = ("inserted", "updated", "deleted")
DELETE_FLAG = "_wap_delete"  # the merge source's column: delete_when evaluated once per batch row
# Iceberg 1.11's Spark MERGE writes its row counts into the commit's summary.
_MERGE_SUMMARY = {
    "rows_inserted": "spark.merge-into.num-target-rows-inserted",
    "rows_updated": "spark.merge-into.num-target-rows-matched-updated",
    "rows_deleted": "spark.merge-into.num-target-rows-matched-deleted",
}


@dataclass(frozen=True)
class Changes:
    """What a run changes on its table, from its commits' summaries (main_rows: main's rows it started from)."""

    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    rows_replaced: int = 0
    main_rows: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Changes:
        return cls(**{k: int(d.get(k) or 0) for k in cls.__dataclass_fields__})

    @property
    def written(self) -> int:
        """Rows the run wrote (inserted, updated, or in place of replaced ones)."""
        return self.rows_inserted + self.rows_updated

    def describe(self) -> str:
        parts = [f"{k.removeprefix('rows_')} {v}" for k, v in self.to_dict().items() if k != "main_rows" and v]
        return ", ".join(parts) or "no change"


def _summed(summaries: Sequence[Mapping[str, str]], key: str) -> int | None:
    values = [s.get(key) for s in summaries]
    if any(v is None for v in values):
        return None
    return sum(int(v or 0) for v in values)


def _added(summaries: Sequence[Mapping[str, str]]) -> int:
    return sum(int(s.get(ADDED_RECORDS, "0") or 0) for s in summaries)


def _deleted(summaries: Sequence[Mapping[str, str]]) -> int:
    return sum(int(s.get(DELETED_RECORDS, "0") or 0) for s in summaries)


class WriteMode:
    """Append (the base: every hook is the plain append's)."""

    name: ClassVar[str] = "append"
    reapplies: ClassVar[bool] = False  # True: a moved main means running the change again, never a cherry-pick
    # True: the write changes rows already in the table, so a batch row can collide with one of them: `unique`
    # looks its keys up in the table after the write (on the run's branch), not only within the batch.
    keys_after_write: ClassVar[bool] = False

    def __init__(self, cfg: TableConfig) -> None:
        self.cfg = cfg

    def where(self, table: str) -> str:
        return f'[tables."{table}"] mode = "{self.name}"'

    def validate_table(self, table: str, table_columns: list[str]) -> None:
        """What is wrong with the mode's keys against an existing table's columns, before the batch is read
        against its schema (a key the table lacks is the declaration's mistake, not the file's)."""

    def validate(self, df: DataFrame, table: str) -> None:
        """What is wrong with the mode's keys against the batch, before writing."""

    def check_table(self, spark: SparkSession, ident: str, table: str) -> None:
        """What is wrong with the mode against the table as it is (its partition spec), before writing."""

    def source(self, df: DataFrame) -> DataFrame:
        """The rows the write applies."""
        return df

    def problems(self, batch: DataFrame) -> list[CheckResult]:
        """Failures that block the batch (as read, before `source`) before anything is written."""
        return []

    def write(self, spark: SparkSession, source: DataFrame, target: str, properties: Mapping[str, str]) -> None:
        from wapflow.lakehouse.lineage import with_properties

        with_properties(source.writeTo(target), properties).append()

    def judged(self) -> Column:
        """Which rows of `source` the row-level checks judge (the rows a quarantine may divert)."""
        from pyspark.sql import functions as F

        return F.lit(True)

    def audited(self, source: DataFrame) -> DataFrame:
        """The rows the row-level checks audit."""
        return source.where(self.judged())

    def changes(self, summaries: Sequence[Mapping[str, str]], main_rows: int) -> Changes:
        return Changes(rows_inserted=_added(summaries), main_rows=main_rows)

    def change_keys(
        self, applied: Callable[[], DataFrame], before: Callable[[], DataFrame | None]
    ) -> list[dict[str, Any]]:
        """Sample keys of the rows the write inserted, updated, deleted: none for a mode without a key (nothing
        read: the batch and the table come as callables)."""
        return []


class MergeMode(WriteMode):
    """Upsert by `key`; `delete_when` rows delete their key; `order_by` picks the latest change per key."""

    name: ClassVar[str] = "merge"
    reapplies: ClassVar[bool] = True
    keys_after_write: ClassVar[bool] = True

    def __init__(self, cfg: TableConfig) -> None:
        super().__init__(cfg)
        # Some key has several rows in the batch (order_by picks one); unknown until problems() looked: True.
        self.several_per_key = True
        # Spark settings for the MERGE (the write step's choice: a storage-partitioned join where the table's
        # partitions are a function of the key, shared_session.CO_PARTITIONED_JOIN).
        self.join_confs: dict[str, str] = {}

    @property
    def key(self) -> list[str]:
        return list(self.cfg.key)

    def validate_table(self, table: str, table_columns: list[str]) -> None:
        for k in self.key:
            if k not in table_columns:
                raise ConfigError(
                    f"{self.where(table)}: key column '{k}' is not a column of {table}{did_you_mean(k, table_columns)}",
                    hint=f"the table's columns are: {', '.join(table_columns)}",
                )

    def validate(self, df: DataFrame, table: str) -> None:
        where = self.where(table)
        cols = df.columns
        for what, names in (("key", self.key), ("order_by", list(self.cfg.order_by))):
            for k in names:
                if k not in cols:
                    raise ConfigError(
                        f"{where}: {what} column '{k}' is not a column of the batch{did_you_mean(k, cols)}",
                        hint=f"the batch's columns are: {', '.join(cols)}",
                    )
        if DELETE_FLAG in cols:
            raise ConfigError(f"{where}: the batch has a column named {DELETE_FLAG}, which wapflow uses itself")
        if self.cfg.delete_when:
            _guard(df.sparkSession, self.cfg.delete_when, "delete_when", where)
            boolean_condition(df, self.cfg.delete_when, f"{where}: delete_when", example="e.g. op = 'D'")

    def source(self, df: DataFrame) -> DataFrame:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        flag = F.coalesce(F.expr(self.cfg.delete_when), F.lit(False)) if self.cfg.delete_when else F.lit(False)
        out = df.withColumn(DELETE_FLAG, flag)
        if not self.cfg.order_by or not self.several_per_key:
            return out  # one row per key (problems() found no key twice): nothing to pick
        w = Window.partitionBy(*[F.col(quote(k)) for k in self.key]).orderBy(
            *[F.col(quote(c)).desc_nulls_last() for c in self.cfg.order_by]
        )
        return out.withColumn("_wap_rank", F.row_number().over(w)).where("_wap_rank = 1").drop("_wap_rank")

    def problems(self, batch: DataFrame) -> list[CheckResult]:
        """NULL keys and duplicate keys, from one aggregation of the batch by key (before order_by picks a
        row: two changes of one key with equal order_by values are duplicates too)."""
        return _key_problems(self, batch)

    def write(self, spark: SparkSession, source: DataFrame, target: str, properties: Mapping[str, str]) -> None:
        cols = [c for c in source.columns if c != DELETE_FLAG]
        on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in self.key)
        sets = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in cols)
        names = ", ".join(quote(c) for c in cols)
        values = ", ".join(f"s.{quote(c)}" for c in cols)
        flag = f"s.{quote(DELETE_FLAG)}"
        view = f"wap_merge_{uuid.uuid4().hex}"  # temp views are the session's, shared by the engine's commands
        source.createOrReplaceTempView(view)
        sql = (
            f"MERGE INTO {target} t USING {quote(view)} s ON {on} "
            + (f"WHEN MATCHED AND {flag} THEN DELETE " if self.cfg.delete_when else "")
            + f"WHEN MATCHED THEN UPDATE SET {sets} "
            + f"WHEN NOT MATCHED AND NOT {flag} THEN INSERT ({names}) VALUES ({values})"
        )
        try:
            sql_with_confs(spark, sql, snapshot_property_confs(properties) | dict(self.join_confs))
        finally:
            spark.catalog.dropTempView(view)

    def judged(self) -> Column:
        """The inserted and updated rows: a delete is judged by nothing (its row is gone)."""
        from pyspark.sql import functions as F

        return ~F.col(DELETE_FLAG)

    def audited(self, source: DataFrame) -> DataFrame:
        return source.where(self.judged()).drop(DELETE_FLAG)

    def changes(self, summaries: Sequence[Mapping[str, str]], main_rows: int) -> Changes:
        got = {k: _summed(summaries, v) for k, v in _MERGE_SUMMARY.items()}
        if any(v is None for v in got.values()):
            # Not written by Iceberg's Spark MERGE (another engine's summary): the net change only.
            net = _added(summaries) - _deleted(summaries)
            return Changes(rows_inserted=max(net, 0), rows_deleted=max(-net, 0), main_rows=main_rows)
        return Changes(
            rows_inserted=got["rows_inserted"] or 0,
            rows_updated=got["rows_updated"] or 0,
            rows_deleted=got["rows_deleted"] or 0,
            main_rows=main_rows,
        )

    def change_keys(
        self, applied: Callable[[], DataFrame], before: Callable[[], DataFrame | None]
    ) -> list[dict[str, Any]]:
        """Up to KEY_SAMPLES keys per kind of change, smallest first: [{"change": "inserted", "key": {col: value}}].

        `applied`: the merge's source as the write applied it (`source`, without quarantined changes);
        `before`: the table the MERGE ran against (its branch's base; None: no rows yet). The counts come from
        the MERGE commit's summary, written by Iceberg's own Spark job, which wapflow cannot tap; so the samples
        cost one more, bounded job: the batch's keys semi/anti-joined with the key columns of `before` (Iceberg
        reads those columns only), each kind's first keys by a top-k (Spark's TakeOrderedAndProject), one
        collect. It classifies as the MERGE does: a matched key is deleted (its delete flag) or updated, an
        unmatched one is inserted unless it is a delete."""
        from pyspark.sql import functions as F

        cols = [F.col(quote(k)) for k in self.key]
        flag = F.col(DELETE_FLAG)
        batch = applied().select(*cols, flag)
        table = before()
        if table is None:
            matched, unmatched = batch.limit(0), batch
        else:
            on = table.select(*cols)
            matched, unmatched = batch.join(on, self.key, "left_semi"), batch.join(on, self.key, "left_anti")
        kinds = zip(CHANGE_KINDS, (unmatched.where(~flag), matched.where(~flag), matched.where(flag)), strict=True)
        tops = [
            df.select(F.lit(kind).alias("_wap_change"), *cols).orderBy(*[c.asc() for c in cols]).limit(KEY_SAMPLES)
            for kind, df in kinds
        ]
        union = tops[0].unionByName(tops[1]).unionByName(tops[2])
        out: list[dict[str, Any]] = [
            {"change": r["_wap_change"], "key": _jsonable_row({k: r[k] for k in self.key})} for r in union.collect()
        ]
        order = {kind: i for i, kind in enumerate(CHANGE_KINDS)}
        return sorted(out, key=lambda d: order[d["change"]])  # stable: each kind's keys keep their order


class ReplaceMode(WriteMode):
    """The partitions the batch touches (dynamic overwrite), or the rows matching `replace_where`, are
    replaced by the batch."""

    name: ClassVar[str] = "replace"
    reapplies: ClassVar[bool] = True

    def validate(self, df: DataFrame, table: str) -> None:
        cond = self.cfg.replace_where
        if not cond:
            return
        where = self.where(table)
        _guard(df.sparkSession, cond, "replace_where", where)
        boolean_condition(df, cond, f"{where}: replace_where", example="e.g. day = DATE '2026-11-24'")

    def check_table(self, spark: SparkSession, ident: str, table: str) -> None:
        if self.cfg.replace_where or partitioned(spark, ident):
            return
        raise ConfigError(
            f"{self.where(table)}: {table} is not partitioned, so the partitions a batch touches are the whole table",
            hint='set replace_where = "<condition>" (the rows the batch replaces), or partition the table',
        )

    def problems(self, batch: DataFrame) -> list[CheckResult]:
        """Batch rows outside replace_where would be added while nothing of theirs is replaced: blocked."""
        from pyspark.sql import functions as F

        cond = self.cfg.replace_where
        if not cond:
            return []
        outside = batch.where(~F.coalesce(F.expr(cond), F.lit(False)))
        rows = outside.limit(SAMPLES).collect()
        if not rows:
            return []
        n = outside.count()
        return [
            CheckResult(
                name=f"replace_where({cond})",
                check="replace_where",
                severity="error",
                status="failed",
                observed=f"{n} batch row(s) outside replace_where",
                failing_rows=n,
                threshold="every batch row matches replace_where",
                source="scan",
                samples=[_jsonable_row(r.asDict()) for r in rows],
            )
        ]

    def write(self, spark: SparkSession, source: DataFrame, target: str, properties: Mapping[str, str]) -> None:
        from wapflow.lakehouse.lineage import with_properties

        if not self.cfg.replace_where:
            with_properties(source.writeTo(target), properties).overwritePartitions()
            return
        # overwrite(condition) deletes whole files only (Iceberg refuses a file some of whose rows match): a
        # MERGE that matches nothing deletes exactly the target rows matching replace_where (copy-on-write) and
        # inserts the batch, in one commit.
        cols = ", ".join(quote(c) for c in source.columns)
        values = ", ".join(f"s.{quote(c)}" for c in source.columns)
        view = f"wap_replace_{uuid.uuid4().hex}"
        source.createOrReplaceTempView(view)
        try:
            sql_with_confs(
                spark,
                f"MERGE INTO {target} t USING {quote(view)} s ON FALSE "
                f"WHEN NOT MATCHED THEN INSERT ({cols}) VALUES ({values}) "
                f"WHEN NOT MATCHED BY SOURCE AND ({self.cfg.replace_where}) THEN DELETE",
                snapshot_property_confs(properties),
            )
        finally:
            spark.catalog.dropTempView(view)

    def changes(self, summaries: Sequence[Mapping[str, str]], main_rows: int) -> Changes:
        inserted = _summed(summaries, _MERGE_SUMMARY["rows_inserted"])
        replaced = _summed(summaries, "spark.merge-into.num-target-rows-not-matched-by-source-deleted")
        return Changes(
            rows_inserted=_added(summaries) if inserted is None else inserted,
            rows_replaced=_deleted(summaries) if replaced is None else replaced,
            main_rows=main_rows,
        )


_MODES: dict[str, type[WriteMode]] = {m.name: m for m in (WriteMode, MergeMode, ReplaceMode)}


def write_mode(cfg: TableConfig) -> WriteMode:
    """The table's write mode ([tables.X] mode)."""
    return _MODES[cfg.mode](cfg)


def changes_result(mode: WriteMode, changes: Changes, keys: list[dict[str, Any]] | None = None) -> CheckResult:
    """The change as a line of the audit report (always passes; max_change checks judge it). Its samples: a
    merge's sample keys per kind (MergeMode.change_keys), which `wap diff` and `wap report` show."""
    return CheckResult(
        name="changes",
        check="changes",
        severity="warn",
        status="passed",
        observed=changes.to_dict(),
        failing_rows=0,
        threshold=f'mode = "{mode.name}": {changes.describe()} (main had {changes.main_rows} row(s))',
        source="metadata",
        samples=list(keys or []),
    )


def partitioned(spark: SparkSession, ident: str) -> bool:
    """The table's rows are partitioned (Iceberg's `partitions` metadata table has a `partition` column only
    then; reading its schema runs no job)."""
    return "partition" in spark.table(f"{ident}.{quote('partitions')}").columns


def _key_problems(mode: MergeMode, batch: DataFrame) -> list[CheckResult]:
    from pyspark.sql import functions as F

    key = mode.key
    null_key = F.lit(False)
    for k in key:
        null_key = null_key | F.col(quote(k)).isNull()
    per_key = batch.groupBy(*[F.col(quote(k)) for k in key]).agg(F.count(F.lit(1)).alias("_n"))
    found = per_key.where(null_key | (F.col("_n") > 1)).select(null_key.alias("_null")).distinct().collect()
    kinds = {bool(r["_null"]) for r in found}
    mode.several_per_key = False in kinds
    if not found:
        return []  # the usual case: one aggregation, nothing more
    out: list[CheckResult] = []
    keys = ", ".join(key)
    if True in kinds:
        null_rows = batch.where(null_key)
        n = null_rows.count()
        out.append(
            CheckResult(
                name=f"merge key ({keys}) not null",
                check="merge_key",
                severity="error",
                status="failed",
                observed=f"{n} batch row(s) with a NULL key",
                failing_rows=n,
                threshold="no NULL in the key",
                columns=key,
                source="scan",
                samples=[_jsonable_row(r.asDict()) for r in null_rows.limit(SAMPLES).collect()],
            )
        )
    if False not in kinds:
        return out
    # Keys with several rows: duplicates, unless order_by tells their changes apart.
    group = key + [c for c in mode.cfg.order_by if c not in key]
    grouped = batch.where(~null_key).groupBy(*[F.col(quote(c)) for c in group]).agg(F.count(F.lit(1)).alias("_n"))
    dups = grouped.where(F.col("_n") > 1)
    dup_samples = dups.orderBy(F.col("_n").desc()).limit(SAMPLES).collect()
    if dup_samples:
        extra = int(dups.agg(F.sum(F.col("_n") - 1)).collect()[0][0] or 0)
        by = f" and order_by ({', '.join(mode.cfg.order_by)})" if mode.cfg.order_by else ""
        shown = "; ".join(", ".join(f"{k}={r[k]!r}" for k in group) for r in dup_samples[:5])
        many = f"{SAMPLES}+" if len(dup_samples) == SAMPLES else str(len(dup_samples))
        out.append(
            CheckResult(
                name=f"merge key ({keys}) unique in batch",
                check="merge_key",
                severity="error",
                status="failed",
                observed=f"{many} key(s) appear more than once in the batch ({extra} extra row(s)), e.g. {shown}",
                failing_rows=extra,
                threshold=f"one row per key{by}"
                + ("" if mode.cfg.order_by else " (set order_by to apply the latest change per key)"),
                columns=group,
                source="scan",
                samples=[_jsonable_row({**{k: r[k] for k in group}, "rows": r["_n"]}) for r in dup_samples],
            )
        )
    return out


def _guard(spark: SparkSession, text: str, what: str, where: str) -> None:
    """Both layers of the SQL guard over a mode's condition: a pure, read-only expression, or ConfigError."""
    try:
        sqlguard.check_expression_text(text, what)
        sqlguard.check_expression_plan(spark, text, what)
    except sqlguard.UnsafeSql as e:
        raise ConfigError(f"{where}: {e.problem}", hint=e.hint) from None


def _first_line(e: BaseException) -> str:
    from wapflow.spark.errors import describe

    return describe(e)


def _jsonable_row(d: dict[str, Any]) -> dict[str, Any]:
    from datetime import date, datetime
    from decimal import Decimal

    out: dict[str, Any] = {}
    for k, v in d.items():
        if k == DELETE_FLAG:
            continue
        if isinstance(v, (datetime, date)):
            v = v.isoformat()
        elif isinstance(v, Decimal):
            v = str(v)  # exact, as the table holds it
        elif isinstance(v, (bytes, bytearray)):
            v = v.hex()
        out[k] = v
    return out
