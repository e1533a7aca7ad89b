"""Write-Audit-Publish around a Spark Declarative Pipelines project (`wap pipelines run`), unchanged.

Spark's own engine runs the project (its Python and SQL files, materialized views, tables, temporary views,
streaming tables and flows, its checkpoints in the spec's `storage`), through a Spark Connect session on the
lakehouse's own JVM. Every table it writes is written on the run's branch (Iceberg's `spark.wap.branch`), so
what comes downstream reads the upstream as staged and `main` does not move. Then every dataset the run wrote
is recorded as one member of one group (wapflow.pipeline.opengroup: an `engine` write), audited with its checks
(wap.toml's and `wapflow.expect` in the code) and published by the one publish: all in one commit, or none.
"""
