"""The work of each step of a run, one module per step, over what they share (context.Run).

context.py  Run: the state hydrated for one step; names, checks, the sandbox, snapshot properties, save
prepare.py  names, files, the run id's idempotence
write.py    the batch prepared, its plan decided once (writing.plan), one strategy per case; resume; undo
audit.py    the checks over the added rows; main pinned and re-checked
publish.py  main moves to the run's rows, or the run is blocked
record.py   a failure recorded; the run's result

Each step is a function of a Run; wapflow.pipeline.driver turns them into RunState -> RunState and drives them.
"""
