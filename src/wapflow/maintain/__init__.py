"""Table maintenance (`wap maintain`, and `wap watch` every [maintenance] `every`): the policy, not the algorithm.

Iceberg's own Spark procedures do the work (rewrite_data_files, rewrite_manifests, expire_snapshots,
remove_orphan_files); this package decides what they may touch so that nothing wapflow still needs goes
(wapflow.maintain.plan), runs them one table at a time, records each action in the run store
(wapflow.runs.maintenance) and alerts on failure.
"""

from wapflow.maintain.run import MaintenanceResult, TableOutcome, maintain

__all__ = ["MaintenanceResult", "TableOutcome", "maintain"]
