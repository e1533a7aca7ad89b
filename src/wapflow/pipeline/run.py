"""WapRun: one run driven step by step in this process (tests, interleaved runs), over the same
step functions a durable executor calls with the JSON state between processes."""

from __future__ import annotations

from wapflow.audit.report import AuditReport
from wapflow.config import Check
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline.driver import audit, drive, prepare, publish_step, write
from wapflow.pipeline.result import RunResult
from wapflow.pipeline.state import RunState, new_state, record_from_data, report_from_data
from wapflow.pipeline.steps.record import result
from wapflow.runs.store import RunRecord
from wapflow.sql.identifiers import TableName


class WapRun:
    """A run's state plus the lakehouse it runs on; each method applies one step to the state."""

    def __init__(
        self,
        lakehouse: Lakehouse,
        table: str,
        files: list[str],
        *,
        branch: str | None = None,
        run_id: str | None = None,
        extra_checks: list[Check] | None = None,
        not_null: list[str] | None = None,
        no_checks: bool = False,
    ) -> None:
        self.lh = lakehouse
        self.state: RunState = new_state(
            table,
            files,
            branch=branch,
            run_id=run_id,
            extra_checks=extra_checks,
            not_null=not_null,
            no_checks=no_checks,
        )

    def prepare(self) -> RunState:
        self.state = prepare(self.lh, self.state)
        return self.state

    def write(self) -> RunState:
        self.state = write(self.lh, self.state)
        return self.state

    def audit(self) -> RunState:
        self.state = audit(self.lh, self.state)
        return self.state

    def publish(self) -> RunState:
        self.state = publish_step(self.lh, self.state)
        return self.state

    def run(self) -> RunResult:
        self.state = drive(self.lh, self.state)
        return self.result()

    def result(self) -> RunResult:
        return result(self.lh, self.state)

    # What callers look at between steps.
    @property
    def run_id(self) -> str:
        return self.state.run_id

    @property
    def branch(self) -> str | None:
        return self.state.branch

    @property
    def table(self) -> TableName:
        return TableName.parse(self.state.table)

    @property
    def rec(self) -> RunRecord:
        return record_from_data(self.state.record)

    @property
    def report(self) -> AuditReport | None:
        return report_from_data(self.state.report) if self.state.report is not None else None

    @property
    def message(self) -> str:
        return self.result().message
