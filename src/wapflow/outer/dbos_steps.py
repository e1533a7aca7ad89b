"""The core steps as one DBOS step, and the lakehouse this process runs them on.

Shared by `wap watch`'s workflow (wapflow.outer.durable) and users' own workflows
(wapflow.integrations.dbos, which builds on the outer loop and so imports this, never the other way).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from dbos import DBOS

from wapflow.errors import BugError
from wapflow.pipeline.driver import STEP_FUNCTIONS
from wapflow.pipeline.state import RunState, Step

if TYPE_CHECKING:
    from wapflow.lakehouse.lakehouse import Lakehouse

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
def wap_step(name: Step, state: str) -> str:
    """One core step (prepare / write / audit / publish) on a run's state; a failure is in the state."""
    lh = lakehouse()
    lh.on_this_thread()
    return STEP_FUNCTIONS[name](lh, RunState.from_json(state)).to_json()


def as_dbos_step(name: Step, state: RunState) -> RunState:
    """The driver's run_step inside a DBOS workflow: each step is one DBOS step (its JSON output recorded)."""
    return RunState.from_json(wap_step(name, state.to_json()))
