"""The one loop over a run's steps, and the contract every step keeps.

Every way of running a run goes through `drive`: the CLI and `run_wap`/`WapRun.run`, the Python API,
`wap ingest`/`watch`, the durable workflow and user DBOS workflows (each step a DBOS step, by `run_step`),
Prefect tasks (a part of the steps each), and runs over several tables (wapflow.pipeline.group). What the loop
decides, and only here: steps run in order, a step already done is not run again (a resumed or replayed run
continues where it stopped), and the first failed step ends the run.

A run's state is a GroupState (every run is a group) or, for a run of one table, its one RunState: the steps
(`prepare`, `write`, `audit`, `publish_step`: RunState -> RunState) are the group's one step function
(wapflow.pipeline.group.apply) over that group of one. A step needs the steps before it done; on a run that has
ended it changes nothing; it never raises for what happens to the run: a failure is recorded (run store,
state.record["error"] with its kind and whether a retry can help).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, cast

from wapflow.faults import crash_point
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import group
from wapflow.pipeline.group import DOING
from wapflow.pipeline.result import MultiRunResult, RunResult
from wapflow.pipeline.state import STEPS, GroupState, RunState, Step, new_state
from wapflow.pipeline.steps.publish import MAX_REAPPLY
from wapflow.pipeline.steps.record import result

# How one step is applied: in this process by default; a DBOS step, or any executor's task, instead.
RunStep = Callable[[Step, RunState], RunState]


class Driven(Protocol):
    """What the loop reads of a run: the steps it has done and whether it is still running (a GroupState, or
    a RunState: a run of one table)."""

    @property
    def status(self) -> str: ...

    @property
    def done(self) -> list[str]: ...


S = TypeVar("S", bound=Driven)


def drive(
    lakehouse: Lakehouse,
    state: S,
    *,
    run_step: Callable[[Step, S], S] | None = None,
    steps: Sequence[Step] = STEPS,
) -> S:
    """Every step of `steps` the state has not done yet, in order, until the run ends (a failed step;
    blocked, published or held for review: publish). A
    publish may send a merge or replace back to write (main moved: the change is applied again on a fresh
    branch); the loop then goes on from there, as many times as publish allows (steps.publish.MAX_REAPPLY).
    Lineage events are sent by the steps (wapflow.pipeline.group: START once prepare ran, COMPLETE or FAIL when
    a step ended the run)."""
    apply = run_step or cast(Callable[[Step, S], S], in_process(lakehouse))
    budget = len(steps) * (MAX_REAPPLY + 2)  # a bound even if a step ever neither ended nor advanced the run
    while state.status == "running" and budget > 0:
        name = next((n for n in steps if n not in state.done), None)
        if name is None:
            break
        state = apply(name, state)
        budget -= 1
    if state.status == "published":
        crash_point("publish:recorded")
    return state


def in_process(lakehouse: Lakehouse) -> Callable[[Step, Any], Any]:
    """Steps applied in this process, on this lakehouse, to a RunState (a run of one table) or a GroupState."""

    def apply(name: Step, state: Any) -> Any:
        one = isinstance(state, RunState)
        if name in ("write", "audit"):  # the steps with Spark jobs long enough for a bar
            what = state.table if one else ", ".join(m.table for m in state.members)
            with lakehouse.tracked(f"{DOING[name]} {what}"):
                return STEP_FUNCTIONS[name](lakehouse, state) if one else group.apply(lakehouse, state, name)
        return STEP_FUNCTIONS[name](lakehouse, state) if one else group.apply(lakehouse, state, name)

    return apply


def run_state(lakehouse: Lakehouse, state: RunState) -> RunState:
    """Every step not yet done, in this process."""
    return drive(lakehouse, state)


def run_wap(lakehouse: Lakehouse, table: str, files: list[str], **kw: Any) -> RunResult:
    """Write, audit and publish `files` into `table`; never raises for a failed run, see .status."""
    return result(lakehouse, drive(lakehouse, new_state(table, files, **kw)))


def run_group(lakehouse: Lakehouse, specs: list[tuple[str, list[str]]], **kw: Any) -> MultiRunResult:
    """Write, audit and publish several tables, each from its files, in one commit or none (`branch`, `run_id`,
    `no_checks` as for one table); never raises for a failed run, see .status."""
    return group.group_result(lakehouse, drive(lakehouse, group.tables_group(lakehouse, specs, **kw)))


def _step(name: Step) -> Callable[[Lakehouse, RunState], RunState]:
    def step(lakehouse: Lakehouse, state: RunState) -> RunState:
        return group.apply(lakehouse, GroupState.of(state), name).members[0]

    step.__name__ = name
    step.__doc__ = f"The {name} step: RunState -> RunState (a failure is recorded in the returned state)."
    return step


prepare = _step("prepare")
write = _step("write")
audit = _step("audit")
publish_step = _step("publish")
STEP_FUNCTIONS: dict[Step, Callable[[Lakehouse, RunState], RunState]] = {
    "prepare": prepare,
    "write": write,
    "audit": audit,
    "publish": publish_step,
}
