"""The one loop over a run's steps, and the contract every step keeps.

Every way of running a run goes through `drive`: the CLI and `run_wap`/`WapRun.run`, the Python API,
`wap ingest`/`watch`, the durable workflow and user DBOS workflows (each step a DBOS step, by `run_step`),
Prefect tasks (a part of the steps each) and multi-table runs (one step over every table, by `run_step`).
What the loop decides, and only here: steps run in order, a step already done is not run again (a resumed
or replayed run continues where it stopped), and the first failed step ends the run.

What a step decides (`prepare`, `write`, `audit`, `publish_step`: RunState -> RunState): it needs the steps
before it done; on a run that has ended it changes nothing; it never raises for what happens to the run:
a failure is recorded (run store, state.record["error"] with its kind and whether a retry can help).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, cast

from wapflow.errors import UsageError, WapError
from wapflow.faults import crash_point
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import lineage
from wapflow.pipeline.result import RunResult
from wapflow.pipeline.state import HALTED, STEPS, RunState, Step, new_state, record_from_data
from wapflow.pipeline.steps import audit as audit_step
from wapflow.pipeline.steps import prepare as prepare_step
from wapflow.pipeline.steps import publish as publish_module
from wapflow.pipeline.steps import write as write_step
from wapflow.pipeline.steps.context import Run
from wapflow.pipeline.steps.publish import MAX_REAPPLY
from wapflow.pipeline.steps.record import fail, result, unexpected
from wapflow.runs.store import RunRecord, current_owner

# How one step is applied: in this process by default; a DBOS step, or any executor's task, instead.
RunStep = Callable[[Step, RunState], RunState]


class Driven(Protocol):
    """What the loop reads of a run: the steps it has done and whether it is still running (a RunState, or
    a multi-table run's group)."""

    @property
    def status(self) -> str: ...

    @property
    def done(self) -> list[str]: ...


S = TypeVar("S", bound=Driven)

_DOING = {"prepare": "preparing the run into", "write": "writing", "audit": "auditing", "publish": "publishing"}


def drive(
    lakehouse: Lakehouse,
    state: S,
    *,
    run_step: Callable[[Step, S], S] | None = None,
    steps: Sequence[Step] = STEPS,
) -> S:
    """Every step of `steps` the state has not done yet, in order, until the run ends (a failed step;
    blocked, published or held for review: publish, or a multi-table run found published by prepare). A
    publish may send a merge or replace back to write (main moved: the change is applied again on a fresh
    branch); the loop then goes on from there, as many times as publish allows (steps.publish.MAX_REAPPLY).

    Lineage ([lineage]) is sent here, for every run of one table: START once prepare ran, COMPLETE or FAIL
    when a step of this call ended the run (wapflow.pipeline.lineage; never raises)."""
    apply = run_step or cast(Callable[[Step, S], S], in_process(lakehouse))
    budget = len(steps) * (MAX_REAPPLY + 2)  # a bound even if a step ever neither ended nor advanced the run
    applied = False
    while state.status == "running" and budget > 0:
        name = next((n for n in steps if n not in state.done), None)
        if name is None:
            break
        state = apply(name, state)
        applied = True
        budget -= 1
        if name == "prepare" and isinstance(state, RunState) and state.already_published is None:
            _lineage(lakehouse, "START", state)
    if state.status == "published":
        crash_point("publish:recorded")
    if applied and isinstance(state, RunState) and (ended := lineage.ENDS.get(state.status)) is not None:
        _lineage(lakehouse, ended, state)
    return state


def _lineage(lakehouse: Lakehouse, event_type: lineage.EventType, state: RunState) -> None:
    if lakehouse.config.lineage is None:
        return
    rec = record_from_data(state.record) if state.record else None
    if rec is None:  # prepare failed before the run had a record: what the caller named
        rec = RunRecord(run_id=state.run_id, table_name=state.table, status=state.status)
    lineage.emit(lakehouse.config, event_type, rec, progress=lakehouse.progress)


def in_process(lakehouse: Lakehouse) -> RunStep:
    """Steps applied in this process, on this lakehouse."""

    def apply(name: Step, state: RunState) -> RunState:
        if name in ("write", "audit"):  # the steps with Spark jobs long enough for a bar
            with lakehouse.tracked(f"{_DOING[name]} {state.table}"):
                return STEP_FUNCTIONS[name](lakehouse, state)
        return STEP_FUNCTIONS[name](lakehouse, state)

    return apply


def run_state(lakehouse: Lakehouse, state: RunState) -> RunState:
    """Every step not yet done, in this process."""
    return drive(lakehouse, state)


def run_wap(lakehouse: Lakehouse, table: str, files: list[str], **kw: Any) -> RunResult:
    """Write, audit and publish `files` into `table`; never raises for a failed run, see .status."""
    return result(lakehouse, drive(lakehouse, new_state(table, files, **kw)))


def _step(name: Step, body: Callable[[Run], object]) -> Callable[[Lakehouse, RunState], RunState]:
    def step(lakehouse: Lakehouse, state: RunState) -> RunState:
        needs = STEPS[: STEPS.index(name)]
        missing = [n for n in needs if n not in state.done]
        if missing:
            raise UsageError(f"step {name} of run {state.run_id} needs step {missing[0]} first")
        if state.status in HALTED and name != "prepare":
            return state  # the run has ended: a replayed later step changes nothing
        lakehouse.on_this_thread()
        run = Run(lakehouse, state)
        if name != "prepare":
            run.record.owner = current_owner()  # this process runs the run now (prepare checks who did before)
        try:
            body(run)
        except WapError as e:
            fail(run, e.at(run_id=run.run_id, step=name), name)
        except Exception as e:  # noqa: BLE001 - named conditions are classified, anything else is a bug
            fail(run, unexpected(e, run.run_id, name, f"{_DOING[name]} {run.table}"), name)
        else:
            if name not in run.done and not run.rewound:
                run.done.append(name)
        return run.freeze()

    step.__name__ = name
    step.__doc__ = f"The {name} step: RunState -> RunState (a failure is recorded in the returned state)."
    return step


prepare = _step("prepare", prepare_step.prepare)
write = _step("write", write_step.write)
audit = _step("audit", audit_step.audit)
publish_step = _step("publish", publish_module.publish)
STEP_FUNCTIONS: dict[Step, Callable[[Lakehouse, RunState], RunState]] = {
    "prepare": prepare,
    "write": write,
    "audit": audit,
    "publish": publish_step,
}
