"""A run's four steps, for orchestrators that want one task per step: each is (Lakehouse, RunState) -> RunState.

    from wapflow import steps
    state = wapflow.start("nyc.trips", files)
    for step in steps.ALL:                      # prepare, write, audit, publish
        state = step(lh, state)
        if state.status == "failed":
            break

A step never raises for what happens to the run: a failure is recorded in the returned state
(`state.status == "failed"`, `state.record["error"]` with `retryable`). A step replayed on a state it
already advanced changes nothing, so a retried or resumed task is safe.
"""

from wapflow.pipeline.driver import audit, prepare, write
from wapflow.pipeline.driver import publish_step as publish

ALL = (prepare, write, audit, publish)
__all__ = ["ALL", "audit", "prepare", "publish", "write"]
