"""`wap storage ...`: create and check the buckets, list file identities.

Registered on the main `wap` app by wapflow.cli; output helpers are taken from there at call time
so that the two modules do not import each other at load time.
"""

from __future__ import annotations

from typing import Annotated

import typer

storage_app = typer.Typer(help="Buckets and folders: create and check the S3 buckets, list file identities.")

ConfigOpt = Annotated[
    str | None, typer.Option("--config", "-c", help="wap.toml to use (default: $WAP_CONFIG, then ./wap.toml).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of tables.")]


@storage_app.command("init")
def storage_init(config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Create the lake bucket (the s3:// warehouse) and the landing bucket if missing; check access."""
    from wapflow.cli import _emit_json, _fail, _progress, _table, out
    from wapflow.config import load_config
    from wapflow.errors import WapError
    from wapflow.storage.init import init_storage
    from wapflow.storage.spark import s3_settings

    try:
        cfg = load_config(config)
        rows = init_storage(cfg, progress=_progress(as_json))
    except WapError as e:
        _fail(e, as_json)
    endpoint = s3_settings(cfg).describe_endpoint()
    if as_json:
        _emit_json({"endpoint": endpoint, "buckets": [r.to_dict() for r in rows]})
        return
    table_rows = [
        {
            "role": r.role,
            "location": r.location,
            "bucket": "created" if r.created else "existed",
            "access": "read, list: ok" if r.checked == "read" else "write, read, delete: ok",
        }
        for r in rows
    ]
    out.print(_table(f"storage at {endpoint}", table_rows, ["role", "location", "bucket", "access"]))


@storage_app.command("ls")
def storage_ls(
    location: Annotated[str, typer.Argument(help="A folder, an s3://bucket/prefix/, a glob, or one file.")],
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List file identities (key, size, ETag or mtime-based id): what exactly-once ingestion keys on."""
    from wapflow.cli import _emit_json, _fail, _table, out
    from wapflow.config import load_config
    from wapflow.errors import WapError
    from wapflow.storage.core import Storage
    from wapflow.storage.spark import s3_settings

    try:
        cfg = load_config(config)
        files = Storage(s3_settings(cfg)).list(location)
    except WapError as e:
        _fail(e, as_json)
    if as_json:
        _emit_json({"location": location, "files": [f.to_dict() for f in files]})
        return
    rows = [
        {"uri": f.uri, "size": f.size, "etag": f.etag, "modified": f.modified.isoformat(sep=" ", timespec="seconds")}
        for f in files
    ]
    out.print(_table(f"{len(files)} file(s) at {location}", rows, ["uri", "size", "etag", "modified"]))
