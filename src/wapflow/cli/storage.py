"""`wap storage init|ls`: create and check the buckets, list file identities (what exactly-once keys on)."""

from __future__ import annotations

from typing import Annotated

import typer

from wapflow.cli.common import ConfigOpt, JsonOpt
from wapflow.cli.output import Output, out, rows_table
from wapflow.errors import WapError

storage_app = typer.Typer(help="Buckets and folders: create and check the S3 buckets, list file identities.")


@storage_app.command("init")
def storage_init(config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Create the lake bucket (the s3:// warehouse) and the landing bucket if missing; check access."""
    from wapflow.config import load_config
    from wapflow.lakehouse.spark_s3 import s3_settings
    from wapflow.service.storage import init_storage

    o = Output(as_json)
    try:
        cfg = load_config(config)
        buckets = init_storage(cfg, progress=o.progress)
    except WapError as e:
        o.fail(e)
    endpoint = s3_settings(cfg).describe_endpoint()

    def show() -> None:
        rows = [
            {
                "role": b.role,
                "location": b.location,
                "bucket": "created" if b.created else "existed",
                "access": "read, list: ok" if b.checked == "read" else "write, read, delete: ok",
            }
            for b in buckets
        ]
        out.print(rows_table(f"storage at {endpoint}", rows, ["role", "location", "bucket", "access"]))

    o.result({"endpoint": endpoint, "buckets": [b.to_dict() for b in buckets]}, show)


@storage_app.command("ls")
def storage_ls(
    location: Annotated[str, typer.Argument(help="A folder, an s3://bucket/prefix/, a glob, or one file.")],
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List file identities (key, size, ETag or mtime-based id): what exactly-once ingestion keys on."""
    from wapflow.config import load_config
    from wapflow.lakehouse.spark_s3 import s3_settings
    from wapflow.storage.core import Storage

    o = Output(as_json)
    try:
        files = Storage(s3_settings(load_config(config))).list(location)
    except WapError as e:
        o.fail(e)

    def show() -> None:
        rows = [
            {
                "uri": f.uri,
                "size": f.size,
                "etag": f.version,  # the column keeps its name: the version is the ETag on S3
                "modified": f.modified.isoformat(sep=" ", timespec="seconds") if f.modified else None,
            }
            for f in files
        ]
        out.print(rows_table(f"{len(files)} file(s) at {location}", rows, ["uri", "size", "etag", "modified"]))

    o.result({"location": location, "files": [f.to_dict() for f in files]}, show)
