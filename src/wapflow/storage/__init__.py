"""Where files live: local folders and S3 buckets, listed and checked through one interface.

- settings: the [s3] section (endpoint, region, path style, credentials, landing location)
- files: FileIdentity (uri, size, version: ETag or mtime-based id), which listed files are data, the local store
- s3: the S3 store (boto3): listing, access checks, bucket creation
- core: Storage, which picks the store by scheme

This package imports nothing of wapflow but errors, so wap.toml's model (wapflow.config) can hold its [s3]
section. The JVM side of S3 is wapflow.lakehouse.spark_s3, `wap storage init` wapflow.service.storage, the
local S3 server wapflow._dev.s3_server.
"""

from wapflow.storage.core import Storage
from wapflow.storage.errors import StorageError, StorageUnavailable
from wapflow.storage.files import FileIdentity, Listing, LocalStore, SkippedFile
from wapflow.storage.s3 import S3Store
from wapflow.storage.settings import S3Config, is_s3_uri, parse_s3_uri

__all__ = [
    "FileIdentity",
    "Listing",
    "LocalStore",
    "S3Config",
    "S3Store",
    "SkippedFile",
    "Storage",
    "StorageError",
    "StorageUnavailable",
    "is_s3_uri",
    "parse_s3_uri",
]
