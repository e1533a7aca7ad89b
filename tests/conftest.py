"""The tests by layer: tests/unit (pure Python, no JVM: `make test-fast`), tests/spark (the one shared
SparkSession, runs in this process), tests/process (`wap` processes, servers, killed processes, a browser).

Fixtures live in tests/support and are declared here as pytest plugins, so a test asks for one by name and
no test module imports another.
"""

pytest_plugins = [
    "support.data",
    "support.jars",
    "support.spark",
    "support.servers",
    "support.ingest",
    "support.receiver",
    "support.s3_server",
    "support.pg_server",
    "support.rest_server",
    "support.spark_cluster",
]
