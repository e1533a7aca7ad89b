"""The write as a plan: which case a run's write is, decided once from what the run and its table say
(WriteFacts -> WritePlan, no side effect), and what the write did (WriteOutcome, kept in the run's state).

A batch from files, a DataFrame, a model or a stream is written by the same plan. Each case has one strategy
(wapflow.pipeline.steps.write.STRATEGIES). The audit and publish read the outcome (a change or an append,
its mode, its rows, where it waits), never the write mode again.

| case             | when                                                      | the batch goes                |
|------------------|-----------------------------------------------------------|-------------------------------|
| staged           | new columns main's schema cannot hold before publish     | a staging table               |
| change           | mode merge or replace (re-applied when main moved)        | one MERGE / overwrite commit  |
| quarantine_split | an append whose failing rows go to the quarantine table   | two branches, failing first   |
| adopt            | landed parquet files that are the table's rows as they are | copied, committed as they are |
| append           | anything else                                             | a Spark append                |
| engine           | a pipeline engine (Spark Declarative Pipelines) wrote it  | recorded as it is on the branch |

A change with a quarantine splits its failing changes off within the change case (WritePlan.quarantine).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, get_args

from wapflow.writing.modes import Changes, write_mode

if TYPE_CHECKING:
    from wapflow.config import TableConfig
    from wapflow.writing.modes import WriteMode

WriteCase = Literal["staged", "change", "quarantine_split", "adopt", "append", "engine"]
# What a write step ended in: one of the cases, or a write that found its rows already on the run's branch
# (resumed after a crash, or a state stored by a wapflow that did not record outcomes), or none written
# (blocked before writing: the schema contract, a merge's keys, replace_where).
Written = Literal["staged", "change", "quarantine_split", "adopt", "append", "engine", "resumed", "blocked"]
CASES: tuple[WriteCase, ...] = get_args(WriteCase)


@dataclass(frozen=True)
class WriteFacts:
    """What the plan is decided from: the table's write mode and settings, and the batch as prepared (read,
    under the table's schema contract, on a table that exists by then)."""

    mode: str  # the table's write mode: append | merge | replace
    change: bool  # the mode changes rows in place and runs again on a moved main (WriteMode.reapplies)
    keys_after_write: bool = False  # `unique` looks the batch's keys up in the table after the write
    new_columns: tuple[str, ...] = ()  # the batch's columns main lacks, which the run's sandbox could not take
    quarantine: bool = False  # failing rows go to the quarantine table, and the row checks can divert them
    adoptable: bool = False  # the landed files can be committed as they are (adopt.check)
    not_adopted: str | None = None  # why they cannot (adopt.check's reason), if not
    checks: bool = False  # the run has checks
    counts_only: bool = False  # what the write would observe of the checks, Iceberg's file counts answer
    fmt: str | None = None  # the files' format ("dataframe": a DataFrame)
    adopt_parquet: bool = True
    reapplied: int = 0  # times publish found main moved and sent this change back to write
    # The rows are on the run's branch already, written by a pipeline engine (wapflow.sdp): nothing to write.
    engine_wrote: bool = False


@dataclass(frozen=True)
class WritePlan:
    """How the write goes: its case, and what its strategy needs to know besides the batch."""

    case: WriteCase
    mode: str
    change: bool
    keys_after_write: bool = False
    quarantine: bool = False  # failing rows (a change: its failing changes) split off to the quarantine table
    observe: bool = False  # the write job observes the row-level checks (the audit then scans nothing for them)
    reapplied: int = 0  # > 0: a change applied again on a fresh branch of a main that moved
    note: str | None = None  # said before writing (why landed parquet files are rewritten, not adopted)
    # adopt: the append it falls back to when a file changed since it was listed (its rows are rewritten)
    fallback: WritePlan | None = None


def plan_write(f: WriteFacts) -> WritePlan:
    """The one decision of the write: which case, from the facts alone."""
    base = WritePlan("append", f.mode, f.change, keys_after_write=f.keys_after_write, reapplied=f.reapplied)
    if f.engine_wrote:
        return replace(base, case="engine")
    if f.new_columns:
        return replace(base, case="staged", observe=f.checks)
    if f.change:
        return replace(base, case="change", quarantine=f.quarantine)
    if f.quarantine:
        return replace(base, case="quarantine_split", quarantine=True, observe=f.checks)
    if f.adoptable:
        return replace(base, case="adopt", observe=f.checks, fallback=plan_write(replace(f, adoptable=False)))
    note = None
    if f.not_adopted and f.fmt == "parquet" and f.adopt_parquet and f.mode == "append":
        note = f"rewriting the rows (the files are not adopted as they are: {f.not_adopted})"
    # Iceberg measures the files Spark writes (counts, bounds and NaN counts): checks they answer are not observed.
    return replace(base, observe=f.checks and not f.counts_only, note=note)


@dataclass(frozen=True)
class WriteOutcome:
    """What the write did, as the audit and publish read it (plain JSON data in the run's state)."""

    case: Written
    mode: str  # the write mode it applied: append | merge | replace
    change: bool  # a change (merge, replace): audited as its batch applied, re-run on a moved main
    keys_after_write: bool = False  # `unique` looks the keys up in the table after the write
    snapshot_id: int | None = None  # its last commit on the run's branch, or the staging table's head
    rows_added: int = 0  # records its commits added (a copy-on-write change: copied ones too), or staged
    rows_deleted: int = 0  # records its commits removed (a copy-on-write change: rewritten ones too)
    rows_quarantined: int = 0  # records added to the quarantine table's branch
    changes: dict[str, int] | None = None  # a change: rows inserted, updated, deleted, replaced (modes.Changes)
    staged_columns: tuple[str, ...] = ()  # new columns waiting in the staging table until publish
    staged: bool = False  # the batch waits in a staging table

    @property
    def change_counts(self) -> Changes | None:
        return Changes.from_dict(self.changes) if self.changes is not None else None

    @property
    def rows_written(self) -> int:
        """Rows the run wrote: a change's inserted and updated ones (not the unchanged rows its copy-on-write
        files copied), else every record it added."""
        counts = self.change_counts
        return counts.written if self.change and counts is not None else self.rows_added

    def applied_mode(self, cfg: TableConfig) -> WriteMode:
        """How the mode applied reads its change back (the batch as applied, its sample keys), with the
        table's settings: the mode written, even if wap.toml names another since."""
        return write_mode(cfg if cfg.mode == self.mode else cfg.model_copy(update={"mode": self.mode}))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["staged_columns"] = list(self.staged_columns)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WriteOutcome:
        names = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in d.items() if k in names}
        kw["staged_columns"] = tuple(kw.get("staged_columns") or ())
        return cls(**kw)
