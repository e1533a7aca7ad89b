"""Land a file, WAP it, alert on failure: a DBOS durable workflow. Killed at any point, run it again: it
resumes at the step it was in, and the file's rows land on main once.

    python examples/dbos_workflow.py wap.toml landing/trips/2026-11-22.parquet
"""

import hashlib
import sys

from dbos import DBOS, SetWorkflowID

import wapflow
from wapflow.integrations import dbos as wap


@DBOS.step()
def alert(res: dict) -> None:
    print(f"ALERT: WAP {res['status']} on {res['table']}, run {res['run_id']}: {res['message']}", file=sys.stderr)


@DBOS.workflow()
def land(path: str) -> dict:
    res = wap.run_steps("nyc.trips", [path])
    if res["status"] != "published":
        alert(res)
    return res


if __name__ == "__main__":
    config, path = sys.argv[1], sys.argv[2]
    lh = wapflow.connect(config)
    lh.config.state_dir().mkdir(parents=True, exist_ok=True)  # DBOS's own database goes beside wapflow's
    db = f"sqlite:///{lh.config.state_dir() / 'example-dbos.sqlite'}"
    DBOS(config={"name": "wap-example", "system_database_url": db, "application_version": "1"})
    wap.use(lh)
    DBOS.launch()  # resumes, in the background, a workflow a killed run of this script left behind
    wid = "land-" + hashlib.sha256(path.encode()).hexdigest()[:16]  # one workflow per file
    if DBOS.get_workflow_status(wid) is None:
        with SetWorkflowID(wid):
            res = land(path)
    else:  # resumed by launch() above, or done before: its result
        res = DBOS.retrieve_workflow(wid).get_result()
    print(f"{res['status']} {res['run_id']} snapshot={res['snapshot_id']}")
    DBOS.destroy()
    sys.exit(0 if res["status"] == "published" else 1)
