"""Which kind of SparkSession a caller holds, asked without importing the session's configuration.

A leaf module (it imports nothing of wapflow), so the SQL guard, the JVM side of S3 and the tables can ask
it without pulling the session builder, and with it wap.toml's whole model, into their imports.
"""

from __future__ import annotations

from typing import Any


def is_connect(spark: Any) -> bool:
    """A Spark Connect client session: no JVM, gateway or SparkContext on this side."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


CONNECT_SCHEME = "sc://"


def is_connect_url(url: str) -> bool:
    """A Spark Connect server's URL (`sc://host:port/;params`), as wap.toml's `master` or `engine` names one."""
    return url.startswith(CONNECT_SCHEME)
