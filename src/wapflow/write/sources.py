"""Source files: resolve paths and globs, detect the format, read them with Spark.

Local files are checked before Spark sees them (exists, not empty, parquet magic bytes), so the
common mistakes get a message naming the file instead of a JVM stack trace.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wapflow.errors import ConfigError, InputError
from wapflow.storage import Storage, is_s3_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

FORMATS = ("parquet", "csv", "json")
_EXTENSIONS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
}
_GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class SourceFile:
    uri: str  # what Spark reads: an absolute local path or a URI
    size: int | None  # bytes, when known without reading
    etag: str | None = None  # S3 objects: the ETag seen when the run resolved its files


def _is_uri(text: str) -> bool:
    return "://" in text and not text.startswith("file://")


def resolve_sources(patterns: list[str], storage: Storage | None = None) -> list[SourceFile]:
    """Expand globs and check each file, locally and on S3 (listed with the Lakehouse's [s3] settings).

    Other URIs (hdfs://, gs://, ...) go to Spark as given. `storage` defaults to the current
    chain with no [s3] settings; callers holding a Lakehouse pass lh.storage.
    """
    if not patterns:
        raise ConfigError("no source files given", hint="e.g. wap run nyc.trips landing/2026-11-21.parquet")
    out: list[SourceFile] = []
    for pat in patterns:
        if is_s3_uri(pat):
            # Listed, checked to exist, be non-empty and readable, before Spark starts writing.
            found = (storage or Storage()).resolve_s3_source(pat)
            out.extend(SourceFile(f.uri, f.size, f.etag) for f in found)
            continue
        if _is_uri(pat):
            out.append(SourceFile(pat, None))
            continue
        local = pat[len("file://"):] if pat.startswith("file://") else pat
        local = os.path.expanduser(local)
        if _GLOB_CHARS & set(local):
            matches = sorted(p for p in glob.glob(local, recursive=True) if os.path.isfile(p))
            if not matches:
                raise InputError(f"no file matches {pat!r}", hint="check the path and the glob pattern")
            paths = matches
        else:
            paths = [local]
        for p in paths:
            path = Path(p)
            if not path.exists():
                near = _nearby(path)
                hint = "check the path" + ("" if path.is_absolute() else f" (relative to {Path.cwd()})")
                raise InputError(f"source file {p} does not exist{near}", hint=hint)
            if path.is_dir():
                raise InputError(
                    f"source {p} is a folder", hint=f"pass the files, e.g. '{p.rstrip('/')}/*.parquet'"
                )
            size = path.stat().st_size
            if size == 0:
                raise InputError(f"source file {p} is empty (0 bytes)", hint="remove it or wait until it is fully written")
            out.append(SourceFile(str(path.resolve()), size))
    seen: set[str] = set()
    unique = [s for s in out if not (s.uri in seen or seen.add(s.uri))]  # type: ignore[func-returns-value]
    return unique


def _nearby(path: Path) -> str:
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f" (folder {parent} does not exist either)"
    import difflib

    close = difflib.get_close_matches(path.name, os.listdir(parent), n=1, cutoff=0.7)
    return f" (did you mean {parent / close[0]}?)" if close else ""


def detect_format(sources: list[SourceFile], configured: str | None) -> str:
    if configured:
        return configured
    kinds = set()
    for s in sources:
        name = s.uri.lower()
        for ext, kind in _EXTENSIONS.items():
            if name.endswith(ext):
                kinds.add(kind)
                break
        else:
            raise ConfigError(
                f"cannot tell the format of {s.uri} from its extension",
                hint='set format = "parquet" | "csv" | "json" in the table\'s section of wap.toml',
            )
    if len(kinds) > 1:
        raise ConfigError(
            f"one run mixes formats ({', '.join(sorted(kinds))})", hint="run each format separately"
        )
    return kinds.pop()


def check_local_parquet(sources: list[SourceFile], storage: Storage | None = None) -> None:
    """A parquet file starts and ends with PAR1; a truncated or foreign file fails here, by name."""
    for s in sources:
        if s.size is None:
            continue
        if s.size < 12:
            raise InputError(f"{s.uri} is not a parquet file (only {s.size} bytes)", hint="re-export the file")
        if is_s3_uri(s.uri):
            head, tail = (storage or Storage()).s3.read_edges(s.uri, 4)
        else:
            with open(s.uri, "rb") as f:
                head = f.read(4)
                f.seek(-4, os.SEEK_END)
                tail = f.read(4)
        if head != b"PAR1" or tail != b"PAR1":
            raise InputError(
                f"{s.uri} is not a valid parquet file (corrupt or truncated: missing PAR1 magic bytes)",
                hint="re-export or re-upload the file; if it is CSV or JSON, set format in wap.toml",
            )


def read_batch(
    spark: "SparkSession",
    sources: list[SourceFile],
    fmt: str,
    options: dict[str, str],
    schema: "StructType | None" = None,
    storage: Storage | None = None,
) -> "DataFrame":
    """A lazy DataFrame over every source file; parse errors surface when the branch write runs.

    Text formats (CSV, JSON) carry no types: once the table exists they are parsed with its schema
    (a value that does not fit is a parse error naming the file), instead of guessing types per file.
    """
    paths = [s.uri for s in sources]
    reader = spark.read.format(fmt)
    if schema is not None and fmt in ("csv", "json"):
        reader = reader.schema(schema)
    if fmt == "csv":
        reader = reader.option("header", "true").option("mode", "FAILFAST")
        if schema is None:
            reader = reader.option("inferSchema", "true")
        reader = reader.option("enforceSchema", "false")
    elif fmt == "json":
        reader = reader.option("mode", "FAILFAST")
    for k, v in options.items():
        reader = reader.option(k, v)
    if fmt == "parquet":
        check_local_parquet(sources, storage)
    return reader.load(paths)
