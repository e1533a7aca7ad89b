"""wapflow's steps as DBOS steps, for durable workflows of your own (DBOS Transact is a core dependency).

    from dbos import DBOS
    from wapflow.integrations import dbos as wap

    @DBOS.workflow()
    def land(path: str) -> dict:
        res = wap.run_steps("nyc.trips", [path])     # start, prepare, write, audit, publish: one DBOS step each
        if res["status"] != "published":
            alert(res)                               # a @DBOS.step of yours
        return res

    wap.use(wapflow.connect("wap.toml"))             # before DBOS.launch(), in every process that runs them
    DBOS.launch()

A workflow killed in the middle resumes, when DBOS recovers it, at the step it was in: the steps before
it are not run again (their outputs are in DBOS's database) and the interrupted one is run again, which
is safe: every step is idempotent (a run's snapshots are found on its branch or on main before anything
is written again). The run id is made inside a step, so a recovered workflow continues the same run.
wapflow's own `wap watch` workflow is built from these steps.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dbos import DBOS

from wapflow import api
from wapflow.errors import BugError
from wapflow.pipeline.driver import STEP_FUNCTIONS, drive
from wapflow.pipeline.state import RunState, Step

if TYPE_CHECKING:
    from wapflow.lakehouse.lakehouse import Lakehouse

__all__ = ["as_dbos_step", "lakehouse", "result_step", "run_steps", "start_step", "use", "wap_step"]

_lock = threading.Lock()
_current: Lakehouse | None = None


def use(lh: Lakehouse | None) -> None:
    """The lakehouse this process's wapflow steps run on (None: forget it)."""
    global _current
    with _lock:
        _current = lh


def lakehouse() -> Lakehouse:
    if _current is None:
        raise BugError("a wapflow DBOS step ran before wapflow.integrations.dbos.use(lakehouse) in this process")
    return _current


@DBOS.step()
def start_step(table: str, sources: list[str], run_id: str | None = None) -> str:
    """A new run's state (JSON): made in a step, so a recovered workflow continues the same run id."""
    return api.start(table, sources, run_id=run_id).to_json()


@DBOS.step()
def wap_step(name: Step, state: str) -> str:
    """One core step (prepare / write / audit / publish) on a run's state; a failure is in the state."""
    lh = lakehouse()
    lh.on_this_thread()
    return STEP_FUNCTIONS[name](lh, RunState.from_json(state)).to_json()


def as_dbos_step(name: Step, state: RunState) -> RunState:
    """The driver's run_step inside a DBOS workflow: each step is one DBOS step (its JSON output recorded)."""
    return RunState.from_json(wap_step(name, state.to_json()))


@DBOS.step()
def result_step(state: str) -> dict[str, Any]:
    """The run's result as JSON data: status, snapshot id, checks, error, message, timings."""
    return api.result(lakehouse(), RunState.from_json(state)).to_dict()


def run_steps(table: str, sources: Sequence[str], *, run_id: str | None = None) -> dict[str, Any]:
    """Inside a DBOS workflow: a WAP run as DBOS steps, stopping at the first failed step; its result."""
    state = RunState.from_json(start_step(table, list(sources), run_id))
    return result_step(drive(lakehouse(), state, run_step=as_dbos_step).to_json())
