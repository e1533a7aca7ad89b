"""Storage failures, by what someone has to do about them.

Credentials, permissions and missing buckets are the environment (exit 3: someone must act);
an endpoint that cannot be reached is transient (exit 5: a retry may help).
"""

from __future__ import annotations

from wapflow.errors import EnvironmentProblem, Unreachable


class StorageError(EnvironmentProblem):
    """A bucket is missing, credentials are rejected, or they lack a permission wapflow needs."""


class StorageUnavailable(Unreachable):
    """The S3 endpoint could not be reached (wrong endpoint, server down, network)."""


class MissingDependency(EnvironmentProblem):
    """An optional Python package (boto3, moto) that this feature needs is not installed."""
