"""Land a file, WAP it, alert on failure: a Prefect flow, the three steps in one Prefect transaction.

python examples/prefect_flow.py wap.toml landing/trips/2026-11-22.parquet
"""

import sys

from prefect import flow, get_run_logger
from prefect.transactions import transaction

from wapflow.integrations.prefect import RunNotPublished, audit_task, lakehouse, publish_task, start, write_task


@flow(persist_result=False)
def land(config: str, path: str) -> str:
    lh = lakehouse(config)
    state = start("nyc.trips", [path])
    try:
        with transaction():  # blocked or failed: rolled back (the branch kept or dropped per on_failure)
            state = write_task(lh, state)
            state = audit_task(lh, state)
            state = publish_task(lh, state)
    except RunNotPublished as e:
        get_run_logger().error(f"ALERT: WAP {e.result.status} on {e.result.table}: {e.result.message}")
        raise
    return f"{state.status} {state.run_id}"


if __name__ == "__main__":
    final = land(sys.argv[1], sys.argv[2], return_state=True)
    print(final.result(raise_on_failure=False) if final.is_completed() else f"failed: {final.message}")
    sys.exit(0 if final.is_completed() else 1)
