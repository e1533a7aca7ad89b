"""The one loop over a run's steps. Every way of running a run goes through `drive`: the CLI and
`run_wap`/`WapRun.run`, the Python API, `wap ingest`/`watch`, the durable workflow and user DBOS workflows
(each step a DBOS step, by `run_step`), Prefect tasks (a part of the steps each) and multi-table runs.

What the loop decides, and only here: steps run in order, a step already done is not run again (a
resumed or replayed run continues where it stopped), and the first failed step ends the run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from wapflow.faults import crash_point
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline.result import RunResult
from wapflow.pipeline.state import STEPS, RunState, Step
from wapflow.pipeline.steps import STEP_FUNCTIONS, new_state, result

# How one step is applied: in this process by default; a DBOS step, or any executor's task, instead.
RunStep = Callable[[Step, RunState], RunState]


def drive(
    lakehouse: Lakehouse,
    state: RunState,
    *,
    run_step: RunStep | None = None,
    steps: Sequence[Step] = STEPS,
) -> RunState:
    """Every step of `steps` the state has not done yet, in order, stopping at the first failure."""
    apply = run_step or in_process(lakehouse)
    for name in steps:
        if name in state.done:
            continue
        state = apply(name, state)
        if state.status == "failed":
            return state
    if state.status == "published":
        crash_point("publish:recorded")
    return state


def in_process(lakehouse: Lakehouse) -> RunStep:
    """Steps applied in this process, on this lakehouse."""

    def apply(name: Step, state: RunState) -> RunState:
        return STEP_FUNCTIONS[name](lakehouse, state)

    return apply


def run_state(lakehouse: Lakehouse, state: RunState) -> RunState:
    """Every step not yet done, in this process."""
    return drive(lakehouse, state)


def run_wap(lakehouse: Lakehouse, table: str, sources: list[str], **kw: Any) -> RunResult:
    """Write, audit and publish `sources` into `table`; never raises for a failed run, see .status."""
    return result(lakehouse, drive(lakehouse, new_state(table, sources, **kw)))
