"""wapflow: Write-Audit-Publish ingestion for Apache Iceberg lakehouses on Apache Spark.

The public face, for scripts and orchestrators (see wapflow.api for a tour):

    import wapflow
    lh = wapflow.connect("wap.toml")
    res = wapflow.run(lh, "nyc.trips", ["landing/a.parquet"], checks=[wapflow.checks.not_null("passenger_count")])

Importing wapflow is cheap: the names below load on first use, and no JVM starts until a step needs Spark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it (loaded on first access)
_EXPORTS = {
    "connect": "wapflow.api",
    "run": "wapflow.api",
    "write": "wapflow.api",
    "transaction": "wapflow.api",
    "stream_to": "wapflow.streams",
    "start_stream": "wapflow.streams",
    "StreamStopped": "wapflow.streams",
    "run_tables": "wapflow.api",
    "run_models": "wapflow.api",
    "run_pipeline": "wapflow.api",
    "expect": "wapflow.sdp.expectations",
    "start": "wapflow.api",
    "result": "wapflow.api",
    "report": "wapflow.api",
    "metrics": "wapflow.api",
    "diff": "wapflow.api",
    "read": "wapflow.api",
    "ingest": "wapflow.api",
    "backfill": "wapflow.api",
    "approve": "wapflow.api",
    "reject": "wapflow.api",
    "steps": "wapflow.steps:",
    "Lakehouse": "wapflow.lakehouse.lakehouse",
    "WapConfig": "wapflow.config",
    "RunState": "wapflow.pipeline.state",
    "RunResult": "wapflow.pipeline.result",
    "IngestResult": "wapflow.outer.ingest",
    "checks": "wapflow.checks:",
    "WapError": "wapflow.errors",
    "TerminalError": "wapflow.errors",
    "TransientError": "wapflow.errors",
    "ConfigError": "wapflow.errors",
    "UsageError": "wapflow.errors",
    "NotFound": "wapflow.errors",
    "InputError": "wapflow.errors",
    "SchemaMismatch": "wapflow.errors",
    "EnvironmentProblem": "wapflow.errors",
    "CommitConflict": "wapflow.errors",
    "PublishConflict": "wapflow.errors",
    "BugError": "wapflow.errors",
    "AlreadyDecided": "wapflow.errors",
}
__all__ = [
    "AlreadyDecided",
    "BugError",
    "CommitConflict",
    "ConfigError",
    "EnvironmentProblem",
    "IngestResult",
    "InputError",
    "Lakehouse",
    "NotFound",
    "PublishConflict",
    "RunResult",
    "RunState",
    "SchemaMismatch",
    "StreamStopped",
    "TerminalError",
    "TransientError",
    "UsageError",
    "WapConfig",
    "WapError",
    "__version__",
    "approve",
    "backfill",
    "checks",
    "connect",
    "diff",
    "expect",
    "ingest",
    "metrics",
    "read",
    "reject",
    "report",
    "result",
    "run",
    "run_models",
    "run_pipeline",
    "run_tables",
    "start",
    "start_stream",
    "steps",
    "stream_to",
    "transaction",
    "write",
]

if TYPE_CHECKING:
    from wapflow import checks, steps
    from wapflow.api import (
        approve,
        backfill,
        connect,
        diff,
        ingest,
        metrics,
        read,
        reject,
        report,
        result,
        run,
        run_models,
        run_pipeline,
        run_tables,
        start,
        transaction,
        write,
    )
    from wapflow.config import WapConfig
    from wapflow.errors import (
        AlreadyDecided,
        BugError,
        CommitConflict,
        ConfigError,
        EnvironmentProblem,
        InputError,
        NotFound,
        PublishConflict,
        SchemaMismatch,
        TerminalError,
        TransientError,
        UsageError,
        WapError,
    )
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.outer.ingest import IngestResult
    from wapflow.pipeline.result import RunResult
    from wapflow.pipeline.state import RunState
    from wapflow.sdp.expectations import expect
    from wapflow.streams import StreamStopped, start_stream, stream_to


assert set(__all__) == {"__version__", *_EXPORTS}


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'wapflow' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    mod = importlib.import_module(module)
    value = mod if target.endswith(":") else getattr(mod, attr or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
