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

from collections.abc import Sequence
from typing import Any

from dbos import DBOS

from wapflow import api
from wapflow.deprecation import renamed
from wapflow.outer.dbos_steps import as_dbos_step, lakehouse, use, wap_step
from wapflow.pipeline.driver import drive
from wapflow.pipeline.state import RunState

# use, lakehouse, wap_step and as_dbos_step are defined in wapflow.outer.dbos_steps (wap watch runs them too,
# and the outer loop sits below this module); they are part of the API a DBOS workflow of your own calls.
__all__ = ["as_dbos_step", "lakehouse", "result_step", "run_steps", "start_step", "use", "wap_step"]


@DBOS.step()
def start_step(table: str, files: list[str], run_id: str | None = None) -> str:
    """A new run's state (JSON): made in a step, so a recovered workflow continues the same run id."""
    return api.start(table, files, run_id=run_id).to_json()


@DBOS.step()
def result_step(state: str) -> dict[str, Any]:
    """The run's result as JSON data: status, snapshot id, checks, error, message, timings."""
    return api.result(lakehouse(), RunState.from_json(state)).to_dict()


def run_steps(
    table: str, files: Sequence[str] | None = None, *, run_id: str | None = None, sources: Sequence[str] | None = None
) -> dict[str, Any]:
    """Inside a DBOS workflow: a WAP run as DBOS steps, stopping at the first failed step; its result.
    `sources=` is the deprecated name of `files=`."""
    named = renamed(files, sources, old_name="sources", new_name="files", where="wapflow.integrations.dbos.run_steps()")
    if named is None:
        raise TypeError("run_steps(): files= is required (the paths, globs or URIs to ingest)")
    state = RunState.from_json(start_step(table, list(named), run_id))
    return result_step(drive(lakehouse(), state, run_step=as_dbos_step).to_json())
