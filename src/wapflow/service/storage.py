"""`wap storage init`: create the lake and landing buckets if missing, and prove the access each needs.

The lake (the s3:// warehouse) must be writable: a probe object is written, read back and deleted.
The landing location ([s3].landing) must be readable: it is listed and its first object read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from wapflow.errors import ConfigError
from wapflow.lakehouse.spark_s3 import s3_settings, warehouse_on_s3
from wapflow.storage.s3 import S3Store
from wapflow.storage.settings import parse_s3_uri

if TYPE_CHECKING:
    from wapflow.config import WapConfig


@dataclass
class BucketStatus:
    role: str  # lake | landing
    location: str
    bucket: str
    created: bool
    checked: str  # what was proven: "write" (write, read back, delete) or "read" (list and read)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def init_storage(cfg: WapConfig, progress: Callable[[str], None] | None = None) -> list[BucketStatus]:
    """Create missing buckets and check access; the first failure raises (exit 3) naming bucket and permission."""
    settings = s3_settings(cfg)
    targets: list[tuple[str, str]] = []
    if warehouse_on_s3(cfg):
        targets.append(("lake", cfg.warehouse_location()))
    if settings.landing:
        targets.append(("landing", settings.landing))
    if not targets:
        raise ConfigError(
            "nothing to set up: the warehouse is not on S3 and [s3].landing is not set",
            hint='set [lakehouse] warehouse = "s3://lake-bucket/warehouse" and/or [s3] landing = "s3://landing-bucket/incoming"',
        )
    store = S3Store(settings)
    say = progress or (lambda _m: None)
    out: list[BucketStatus] = []
    for role, location in targets:
        loc = parse_s3_uri(location, what=f"{role} location")
        created = False
        if not store.bucket_exists(loc.bucket):
            say(f"creating bucket {loc.bucket} at {settings.describe_endpoint()}")
            store.create_bucket(loc.bucket)
            created = True
        if role == "lake":
            say(f"checking that {location} is writable")
            store.check_write(location)
            checked = "write"
        else:
            say(f"checking that {location} is readable")
            store.check_read(location)
            checked = "read"
        out.append(BucketStatus(role, location, loc.bucket, created, checked))
    return out
