"""The Spark Connect session a pipeline runs in: SDP's graph lives in a Connect server.

On a classic session (local, standalone), the lakehouse's own JVM serves Spark Connect on a free port of
127.0.0.1 (Spark's SparkConnectService, started once per JVM): the pipeline's session shares its SparkContext,
its jars and its catalog, with no second JVM. A lakehouse that is itself a Spark Connect client opens a new
session on the same server. Each pipeline run gets a fresh session, so its settings (the run's branch) are its own.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from wapflow.errors import EnvironmentProblem

if TYPE_CHECKING:
    from wapflow.lakehouse.lakehouse import Lakehouse

HOST = "127.0.0.1"
_SERVED: dict[str, int] = {}  # the SparkContext's application id -> the port its Connect service listens on


def require_client() -> None:
    """SDP's client is Spark Connect's: its libraries (grpc, protobuf, pandas) are an extra of wapflow's."""
    try:
        import pyspark.pipelines.cli  # noqa: F401 - imports Spark Connect's client and what it needs
    except ImportError as e:
        raise EnvironmentProblem(
            f"wap pipelines run needs Spark Connect's client libraries, and {e.name or e} is not installed",
            hint='pip install "wapflow[pipelines]"',
        ) from None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def endpoint(lh: Lakehouse) -> str:
    """The Connect URL the pipeline's session connects to (the service started here when needed)."""
    if lh.connect_client:
        return str(lh.config.lakehouse.master)
    spark: Any = lh.spark
    app = str(spark.sparkContext.applicationId)
    if app not in _SERVED:
        port = _free_port()
        sc = spark._jsc.sc()
        sc.conf().set("spark.connect.grpc.binding.address", HOST)
        sc.conf().set("spark.connect.grpc.binding.port", str(port))
        try:
            spark._jvm.org.apache.spark.sql.connect.service.SparkConnectService.start(sc)
        except Exception as e:  # noqa: BLE001 - no Connect server classes, or the port: said as an environment problem
            raise EnvironmentProblem(
                f"could not serve Spark Connect from this Spark session for the pipeline: {str(e).splitlines()[0]}",
                hint="pyspark 4.1's jars/ must hold spark-connect_2.13 and spark-pipelines_2.13 (reinstall pyspark)",
            ) from None
        _SERVED[app] = port
    return f"sc://{HOST}:{_SERVED[app]}"


def session(lh: Lakehouse, confs: dict[str, str]) -> Any:
    """A new Spark Connect session for one pipeline run, with these session settings."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from wapflow.lakehouse.session import catalog_confs

    cs = ConnectSession.builder.remote(endpoint(lh)).create()
    # The lakehouse's catalog as its own session has it (registered at run time, so not in a new session's
    # defaults), then the run's settings.
    for k, v in (catalog_confs(lh.config) | confs).items():
        cs.conf.set(k, v)
    return cs


def close(cs: Any) -> None:
    """Stop a pipeline run's Connect session, and keep its garbage collection from closing anything again.
    PySpark's `__del__` closes the client once more, and that shuts down the release thread pool every Connect
    session of the process shares, from whichever thread collects the session. From one of the pool's own
    threads, the shutdown waits for itself while holding the lock every next query takes: the next run hangs
    (seen in the test suite on 2026-12-04, in PySpark 4.1)."""
    try:
        cs.stop()
    finally:
        cs.client.close = _closed_already


def _closed_already() -> None:
    """What a stopped pipeline session's client does when asked to close again: nothing."""


@contextmanager
def as_active(url: str) -> Iterator[None]:
    """While a pipeline's files are imported, `SparkSession.active()` and `builder.getOrCreate()` in them give
    the pipeline's Connect session (as under `spark-pipelines run`), not the lakehouse's classic one."""
    saved = {k: os.environ.get(k) for k in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    os.environ["SPARK_REMOTE"] = url
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
