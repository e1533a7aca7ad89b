"""A WAP run: state (a JSON value), steps (functions of it), and the drivers over them.

state.py   RunState (one table of a run) and GroupState (a run): everything a step, a replay or another process needs
steps/     the work of each step (prepare, write, audit, publish, record) over a shared context
driver.py  prepare / write / audit / publish_step: RunState -> RunState, and drive: the one loop over them
group.py   every run is a group: the one step over its tables (publish: one for all); runs over named tables
opengroup.py  a group filled as it goes (transactions, models, a batch with its models)
retry.py   RetryPolicy: what a failed run's retry is, for every loop that retries
run.py     WapRun: one run driven step by step in one process
result.py  RunResult / MultiRunResult and exit codes
"""

from wapflow.lakehouse.lineage import files_fingerprint
from wapflow.pipeline.driver import audit, drive, prepare, publish_step, run_group, run_state, run_wap, write
from wapflow.pipeline.group import group_result, tables_group
from wapflow.pipeline.opengroup import OpenGroup
from wapflow.pipeline.result import MultiRunResult, RunResult, exit_code_for
from wapflow.pipeline.run import WapRun
from wapflow.pipeline.state import GroupState, RunState, new_run_id, new_state, validate_run_id
from wapflow.pipeline.steps.context import quarantine_of
from wapflow.pipeline.steps.record import result

__all__ = [
    "GroupState",
    "MultiRunResult",
    "OpenGroup",
    "RunResult",
    "RunState",
    "WapRun",
    "audit",
    "drive",
    "exit_code_for",
    "files_fingerprint",
    "group_result",
    "new_run_id",
    "new_state",
    "prepare",
    "publish_step",
    "quarantine_of",
    "result",
    "run_group",
    "run_state",
    "run_wap",
    "tables_group",
    "validate_run_id",
    "write",
]
