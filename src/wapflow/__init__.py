"""wapflow: Write-Audit-Publish ingestion for Apache Iceberg lakehouses on Apache Spark."""

from wapflow.errors import WapError

__version__ = "0.1.0"
__all__ = ["WapError", "__version__"]
