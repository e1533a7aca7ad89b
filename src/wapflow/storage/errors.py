"""Storage failures: both exit 3 (runtime), split by whether retrying can help."""

from __future__ import annotations

from wapflow.errors import EXIT_RUNTIME, TerminalError, TransientError


class StorageError(TerminalError):
    """A bucket is missing, credentials are rejected, or they lack a permission wapflow needs."""

    exit_code = EXIT_RUNTIME
    kind = "storage"


class StorageUnavailable(TransientError):
    """The S3 endpoint could not be reached (wrong endpoint, server down, network)."""

    exit_code = EXIT_RUNTIME
    kind = "storage_unavailable"


class MissingDependency(TerminalError):
    """An optional Python package (boto3, moto) that this feature needs is not installed."""

    exit_code = EXIT_RUNTIME
    kind = "environment"
