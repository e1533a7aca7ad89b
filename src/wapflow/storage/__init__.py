"""Where files live: local folders and S3 buckets, listed and checked through one interface.

- settings: the [s3] section (endpoint, region, path style, credentials, landing location)
- files: FileIdentity (uri, key, size, ETag or mtime-based id) and the local-folder store
- s3: the S3 store (boto3): listing, source resolution, access checks, bucket creation
- core: Storage, which picks the store by scheme
- spark: the JVM side (jars, Hadoop S3A settings, Iceberg S3FileIO properties)
- init: `wap storage init`; server: the local S3 server used by tests and `wap demo --s3`
"""

from wapflow.storage.core import Storage
from wapflow.storage.errors import StorageError, StorageUnavailable
from wapflow.storage.files import FileIdentity, LocalStore
from wapflow.storage.s3 import S3Store
from wapflow.storage.settings import S3Config, is_s3_uri, parse_s3_uri

__all__ = [
    "FileIdentity",
    "LocalStore",
    "S3Config",
    "S3Store",
    "Storage",
    "StorageError",
    "StorageUnavailable",
    "is_s3_uri",
    "parse_s3_uri",
]
