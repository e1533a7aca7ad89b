"""Local and S3 bytes of a run's file: its local path, its compression, and the head the checks read."""

from __future__ import annotations

import bz2
import gzip
import io

from wapflow.errors import InputError
from wapflow.storage import Storage, is_s3_uri
from wapflow.storage.files import FileIdentity
from wapflow.storage.settings import parse_s3_uri

# Compression Spark (Hadoop's codecs) undoes by file extension for CSV and JSON.
COMPRESSION = (".gz", ".bz2", ".deflate", ".lz4", ".snappy", ".zst")
HEAD_BYTES = 64 * 1024  # how much of a text file is checked in Python before Spark reads it
LOCATE_LIMIT = 256 * 1024 * 1024  # on failure, files up to this size are scanned for the bad line


def is_uri(text: str) -> bool:
    """A URI other than file:// (s3://, hdfs://, ...): not a local path."""
    return "://" in text and not text.startswith("file://")


def local_path(s: FileIdentity) -> str | None:
    if is_s3_uri(s.uri) or is_uri(s.uri):
        return None
    return s.uri[len("file://") :] if s.uri.startswith("file://") else s.uri


def unreadable(path: str, what: str = "file") -> InputError:
    """A source file (or folder) the user running wap may not read: the run's own error, and the engine's
    client's for a file its caller may not read (wapflow.files.readable)."""
    return InputError(
        f"{path} cannot be read: permission denied",
        hint=f"give the user running wap read access to the {what}, or run as a user that has it",
    )


def compression(uri: str) -> str | None:
    low = uri.lower()
    return next((c for c in COMPRESSION if low.endswith(c)), None)


def open_local(path: str) -> io.BufferedIOBase | None:
    comp = compression(path)
    if comp is None:
        return open(path, "rb")
    if comp == ".gz":
        return gzip.open(path, "rb")
    if comp == ".bz2":
        return bz2.open(path, "rb")
    return None  # other codecs: Spark can read them, Python does not check them


def read_head(s: FileIdentity, storage: Storage | None) -> tuple[bytes, bool] | None:
    """The first HEAD_BYTES (decompressed) and whether that is the whole file; None when not checkable."""
    local = local_path(s)
    if local is not None:
        try:
            f = open_local(local)
            if f is None:
                return None
            with f:
                data = f.read(HEAD_BYTES + 1)
        except PermissionError:
            # Known here to be the source file, not the warehouse: an input this user cannot read.
            raise unreadable(s.uri) from None
        return data[:HEAD_BYTES], len(data) <= HEAD_BYTES
    if not is_s3_uri(s.uri) or compression(s.uri) not in (None, ".gz"):
        return None
    store = (storage or Storage()).s3
    loc = parse_s3_uri(s.uri)
    try:
        raw = store.client.get_object(Bucket=loc.bucket, Key=loc.key, Range=f"bytes=0-{HEAD_BYTES}")["Body"].read()
    except Exception as e:  # noqa: BLE001 - boto3/botocore raise many types; error_for names the S3 condition
        raise store.error_for(e, action="read", bucket=loc.bucket, key=loc.key) from None
    if compression(s.uri) == ".gz":
        import zlib

        d = zlib.decompressobj(wbits=31)
        try:
            data = d.decompress(raw, HEAD_BYTES + 1)
        except zlib.error:
            raise InputError(f"{s.uri} is not a valid gzip file", hint="re-export or re-upload the file") from None
        return data[:HEAD_BYTES], len(data) <= HEAD_BYTES and s.size is not None and s.size <= HEAD_BYTES
    return raw[:HEAD_BYTES], len(raw) <= HEAD_BYTES
