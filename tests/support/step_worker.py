"""Run steps of runs in this (fresh) process, the way a durable executor's worker does: the only
input of a step is its run's state as JSON on disk, the only output the next state as JSON on disk.

    python step_worker.py CONFIG step NAME STATE_IN STATE_OUT [NAME STATE_IN STATE_OUT ...]
    python step_worker.py CONFIG run SPECS_JSON OUT_DIR     (whole runs in this one process)

One process may run the same step of several runs (as a worker serving a queue does); a run's next
step always runs in another process than its previous one, so nothing but the JSON crosses between them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from wapflow.config import load_config
from wapflow.lakehouse.lakehouse import Lakehouse
from wapflow.pipeline import RunState, audit, new_state, prepare, publish_step, run_state, write

STEPS = {"prepare": prepare, "write": write, "audit": audit, "publish": publish_step}


def main(argv: list[str]) -> None:
    config, cmd, *rest = argv
    lh = Lakehouse(load_config(config))
    if cmd == "step":
        if len(rest) % 3:
            raise SystemExit("step takes NAME STATE_IN STATE_OUT triples")
        for i in range(0, len(rest), 3):
            name, src, dst = rest[i : i + 3]
            state = RunState.from_json(Path(src).read_text())
            Path(dst).write_text(STEPS[name](lh, state).to_json())
    elif cmd == "run":
        specs, out = json.loads(rest[0]), Path(rest[1])
        for spec in specs:
            state = run_state(lh, new_state(spec["table"], spec["files"], run_id=spec["run_id"]))
            (out / f"{spec['run_id']}.json").write_text(state.to_json())
    else:
        raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv[1:])
