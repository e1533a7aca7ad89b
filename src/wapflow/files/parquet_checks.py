"""Parquet files checked before Spark reads them: magic bytes, typed columns, one set of columns per batch."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from wapflow.errors import InputError, WapError
from wapflow.files.access import HEAD_BYTES, local_path, unreadable
from wapflow.storage import Storage, is_s3_uri
from wapflow.storage.files import FileIdentity
from wapflow.storage.settings import parse_s3_uri


def check_parquet_magic(files: list[FileIdentity], storage: Storage | None = None) -> None:
    """A parquet file starts and ends with PAR1; a truncated or foreign file fails here, by name."""
    for s in files:
        if s.size is None:
            continue
        if s.size < 12:
            raise InputError(f"{s.uri} is not a parquet file (only {s.size} bytes)", hint="re-export the file")
        if is_s3_uri(s.uri):
            s3 = (storage or Storage()).s3
            head, tail = s3.read_range(s.uri, "0-3"), s3.read_range(s.uri, "-4")  # two ranged GETs
        else:
            try:
                with open(local_path(s) or s.uri, "rb") as f:
                    head = f.read(4)
                    f.seek(-4, os.SEEK_END)
                    tail = f.read(4)
            except PermissionError:  # the run's first read of a local parquet file: a file mode, not a bug
                raise unreadable(s.uri) from None
        if head != b"PAR1" or tail != b"PAR1":
            raise InputError(
                f"{s.uri} is not a valid parquet file (corrupt or truncated: missing PAR1 magic bytes)",
                hint="re-export or re-upload the file; if it is CSV or JSON, set format in wap.toml",
            )


# Spark's own schema in the footer of a file Spark wrote: its schema inference reads it besides parquet's.
_SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"


@dataclass(frozen=True)
class Footer:
    """What a parquet file's footer says about its columns."""

    arrow: Any  # pyarrow.Schema
    # Parquet's schema (physical and logical types, repetition, field ids) and Spark's row metadata: what
    # Spark infers a DataFrame's schema from, so equal signatures get equal inferred schemas.
    signature: str
    # The footer itself (pyarrow.parquet.FileMetaData): its row groups' statistics.
    metadata: Any = field(default=None, compare=False, repr=False)


def parquet_schema(s: FileIdentity, storage: Storage | None) -> Any:
    """The file's arrow schema from its footer only (local: pyarrow; S3: one or two ranged GETs)."""
    footer = parquet_footer(s, storage)
    return footer.arrow if footer is not None else None


def parquet_footer(s: FileIdentity, storage: Storage | None) -> Footer | None:
    """The file's footer (local: pyarrow; S3: one or two ranged GETs); None for other URIs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        local = local_path(s)
        if local is not None:
            return _footer(pq.ParquetFile(local))
        if not is_s3_uri(s.uri):
            return None
        store = (storage or Storage()).s3
        loc = parse_s3_uri(s.uri)

        def tail(n: int) -> bytes:
            try:
                data: bytes = store.client.get_object(Bucket=loc.bucket, Key=loc.key, Range=f"bytes=-{n}")[
                    "Body"
                ].read()
                return data
            except Exception as e:  # noqa: BLE001 - boto3/botocore raise many types; error_for names the S3 condition
                raise store.error_for(e, action="read", bucket=loc.bucket, key=loc.key) from None

        data = tail(HEAD_BYTES)
        need = int.from_bytes(data[-8:-4], "little") + 8
        if need > len(data):
            data = tail(need)
        return _footer(pq.ParquetFile(pa.BufferReader(b"PAR1" + data[-need:])))
    except WapError:
        raise
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad footer; all mean the same
        raise InputError(
            f"{s.uri} is not a valid parquet file (cannot read its footer: {str(e).splitlines()[0][:200]})",
            hint="re-export or re-upload the file",
        ) from None


def _footer(pf: Any) -> Footer:
    schema = str(pf.schema).split("\n", 1)[-1]  # its first line names the Python object
    spark = (pf.metadata.metadata or {}).get(_SPARK_ROW_METADATA, b"")
    return Footer(pf.schema_arrow, f"{schema}\n{spark.decode('utf-8', 'replace')}", pf.metadata)


def _null_typed(t: Any, path: str) -> str | None:
    """The first column (or nested field) of arrow type null: parquet's 'no type', which Spark reads as int."""
    import pyarrow as pa

    if pa.types.is_null(t):
        return path
    if pa.types.is_struct(t):
        return next((n for f in t for n in [_null_typed(f.type, f"{path}.{f.name}")] if n), None)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _null_typed(t.value_type, path + "[]")
    if pa.types.is_map(t):
        return _null_typed(t.item_type, path + "{}")
    return None


def check_parquet_schemas(files: list[FileIdentity], storage: Storage | None = None) -> str | None:
    """From the footers: no column without a type, and every file of a batch has the same columns.
    Returns the footers' signature (Footer.signature) when every file's was read and all are the same.

    A column of parquet's null type (all values NULL, no type) is read by Spark as int, a guess the
    table would then keep or accept; and Spark takes one file's schema for a batch, so columns other
    files add would be dropped and the ones they lack read as NULL.
    """
    if len(files) == 1:
        footers = [parquet_footer(files[0], storage)]
    else:
        with ThreadPoolExecutor(max_workers=8) as pool:
            footers = list(pool.map(lambda s: parquet_footer(s, storage), files))
    schemas = [f.arrow if f is not None else None for f in footers]
    for s, sch in zip(files, schemas, strict=True):
        if sch is None:
            continue
        bad = next((n for f in sch for n in [_null_typed(f.type, f.name)] if n), None)
        if bad is not None:
            raise InputError(
                f"column {bad!r} of {s.uri} has no type (parquet's null type: every value is NULL), "
                "so its type would be a guess",
                hint="write the column with its real type (an all-NULL column still needs one), e.g. cast it "
                "to the table's type before writing the file",
            )
    signatures = {f.signature if f is not None else None for f in footers}
    signature = signatures.pop() if len(signatures) == 1 else None
    known = [(s, list(sch.names)) for s, sch in zip(files, schemas, strict=True) if sch is not None]
    if len(known) < 2:
        return signature
    first, ref = known[0]
    ref_set = {c.lower() for c in ref}
    for s, c in known[1:]:
        have = {x.lower() for x in c}
        if have != ref_set:
            raise _columns_differ(
                s, first, [x for x in ref if x.lower() not in have], [x for x in c if x.lower() not in ref_set]
            )
    return signature


def column_difference(lacks: list[str], extra: list[str], same: str) -> str:
    """How one file's columns differ from the first file's (parquet columns here, a CSV header when reading)."""
    parts = []
    if lacks:
        parts.append("lacks " + ", ".join(repr(x) for x in lacks))
    if extra:
        parts.append("has " + ", ".join(repr(x) for x in extra) + " in addition")
    return "; ".join(parts) or same


def _columns_differ(s: FileIdentity, first: FileIdentity, lacks: list[str], extra: list[str]) -> InputError:
    what = column_difference(lacks, extra, "has the same columns in another order")
    return InputError(
        f"{s.uri} does not have the same columns as {first.uri}: it {what}",
        hint="the files of one run must share their columns: fix the file, or run it separately",
    )
