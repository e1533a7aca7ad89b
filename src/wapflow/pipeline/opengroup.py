"""A run filled as it goes: each table prepared and written to the run's branch when it comes (so what comes after
it reads it staged), then every table audited and published together by the one publish (wapflow.pipeline.group).
What `wapflow.transaction`, models and a source's batch with its models run on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from wapflow.errors import UsageError, WapError
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import frames
from wapflow.pipeline.driver import drive
from wapflow.pipeline.group import Group, group_result, refuse_together, refuse_unknown_tables
from wapflow.pipeline.result import MultiRunResult
from wapflow.pipeline.state import GroupState, RunState, new_run_id, new_state, validate_run_id
from wapflow.sql.identifiers import TableName
from wapflow.vocabulary import run_branch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wapflow.config import Check


class OpenGroup:
    """A run whose tables come one by one, each prepared and written to the run's branch when it comes (so what
    comes after it reads it staged), then audited and published together by `finish`. A failure of any table
    fails the whole run at once (`outcome`); nothing is published."""

    def __init__(self, lakehouse: Lakehouse, *, run_id: str | None = None, no_checks: bool = False) -> None:
        refuse_together(lakehouse)
        self.lh = lakehouse
        rid = validate_run_id(run_id) if run_id else new_run_id()
        self.state = GroupState(run_id=rid, branch=run_branch(rid))
        self.no_checks = no_checks
        self.outcome: MultiRunResult | None = None

    @property
    def run_id(self) -> str:
        return self.state.run_id

    @property
    def branch(self) -> str:
        return self.state.branch

    @property
    def members(self) -> list[RunState]:
        return self.state.members

    def member(self, table: str) -> RunState | None:
        name = TableName.parse(table).dotted
        return next((m for m in self.state.members if TableName.parse(m.table).dotted == name), None)

    def add(
        self,
        table: str,
        df: DataFrame,
        write_settings: Mapping[str, Any] | None = None,
        *,
        checks: Sequence[Check] = (),
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """A table computed as a DataFrame: prepared and written to the run's branch now."""
        rid = self._member_id(table)
        frames.hold(rid, df)
        self._write(
            new_state(
                table,
                [],
                branch=self.branch,
                run_id=rid,
                no_checks=self.no_checks,
                frame=True,
                write_settings=dict(write_settings or {}),
                extra_checks=list(checks),
                properties=dict(properties or {}),
            )
        )

    def add_written(self, table: str, *, base: int | None, engine: str, checks: Sequence[Check] = ()) -> None:
        """A table an engine wrote on the run's branch already, on top of main's `base` (wapflow.sdp): recorded
        as this run's write (its commits, as they are), then audited and published with the rest."""
        rid = self._member_id(table)
        name = TableName.parse(table)
        tables = self.lh.tables
        tables.refresh(name)
        head = tables.head(name, self.branch)
        frames.hold(rid, tables.read(name, self.branch if head is not None else None))
        state = new_state(
            table, [], branch=self.branch, run_id=rid, no_checks=self.no_checks, frame=True, extra_checks=list(checks)
        )
        self._write(state.evolve(written_by=engine, base=base))

    def add_files(self, table: str, uris: Sequence[str], *, source: str | None = None) -> None:
        """A table read from files (a source's landed batch, with the source's write settings): prepared and
        written now, like `add`."""
        self._write(
            new_state(
                table,
                list(uris),
                branch=self.branch,
                run_id=self._member_id(table),
                source=source,
                no_checks=self.no_checks,
            )
        )

    def _member_id(self, table: str) -> str:
        if self.member(table) is not None:
            raise UsageError(
                f"{TableName.parse(table).dotted} is written twice in transaction {self.run_id}",
                hint="write each table once",
            )
        return f"{self.run_id}-{len(self.state.members) + 1}"

    def _write(self, state: RunState) -> None:
        group = Group(self.lh, self.state.evolve(members=[*self.state.members, state]))
        new = group.members[-1:]
        err = group.step("prepare", only=new) or group.step("write", only=new)
        self.state = group.freeze()
        if err is not None:
            self._ended()
            raise err

    def finish(self) -> MultiRunResult:
        """Every table written is audited, then all are published in one commit (or none)."""
        if self.outcome is not None:
            return self.outcome
        if not self.state.members:
            self.state = self.state.evolve(empty_status="published", message="nothing was written")
            return self._ended()
        group = Group(self.lh, self.state)
        try:
            refuse_unknown_tables(self.lh, [TableName.parse(m.table).dotted for m in self.state.members])
        except WapError as e:
            group.fail(e.at(run_id=self.run_id, step="audit"), "audit", None)
            self.state = group.freeze()
            return self._ended()
        self.state = drive(self.lh, self.state)
        return self._ended()

    def fail_table(self, table: str, error: WapError, step: str = "write") -> MultiRunResult:
        """A table that failed before it was written (its model did not run): recorded failed with `error`, and
        the whole run with it; nothing published."""
        if self.outcome is None:
            rid = f"{self.run_id}-{len(self.state.members) + 1}"
            group = Group(
                self.lh,
                self.state.evolve(
                    members=[*self.state.members, new_state(table, [], branch=self.branch, run_id=rid, frame=True)]
                ),
            )
            failed = group.members[-1]
            failed.derive()
            failed.record.group_id = self.run_id
            group.fail(error.at(run_id=self.run_id, step=step), step, failed)
            self.state = group.freeze()
        return self._ended()

    def abandon(self, error: BaseException) -> MultiRunResult:
        """The block raised: nothing is published, every table's run is failed with the error (a WapError as it
        is: what it says and its exit code)."""
        if self.outcome is None:
            if isinstance(error, WapError):
                err = error
            else:
                why = f"the transaction's code raised {type(error).__name__}: {error}"
                err = UsageError(why, hint="fix the job and run it again (the same run id never publishes twice)")
            group = Group(self.lh, self.state)
            if group.members:
                group.fail(err.at(run_id=self.run_id, step="write"), "write", None)
                self.state = group.freeze()
            else:
                self.state = self.state.evolve(empty_status="failed", message=str(err))
        return self._ended()

    def _ended(self) -> MultiRunResult:
        for m in self.state.members:
            frames.release(m.run_id)
        self.outcome = group_result(self.lh, self.state)
        return self.outcome
