"""Reading a batch of files with Spark: the format, and a lazy DataFrame over exactly those files.

The files were resolved (wapflow.files.resolve) and are given to Spark as exact paths
(wapflow.files.spark_paths). read_batch checks them first (wapflow.files.text_checks and
parquet_checks), then reads in FAILFAST mode; Spark's failures to read them come out as InputError
naming the file (wapflow.writing.input_errors).
"""

from __future__ import annotations

import re
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from wapflow.errors import ConfigError, InputError, WapError
from wapflow.files.access import COMPRESSION, is_uri, local_path, read_head
from wapflow.files.locate import json_lines_error
from wapflow.files.parquet_checks import check_parquet_magic, check_parquet_schemas, column_difference
from wapflow.files.spark_paths import SparkInputs, implicit_inputs
from wapflow.files.text_checks import (
    CsvDialect,
    CsvHead,
    check_csv_head,
    check_json_head,
    decode_head,
    encoding_of,
    first_quoted_newline,
    lower_options,
    option_flag,
    quoted_newline_error,
)
from wapflow.storage import Storage, is_s3_uri
from wapflow.storage.files import FileIdentity, has_glob
from wapflow.writing.input_errors import input_error_from_spark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameReader, SparkSession
    from pyspark.sql.types import StructType

_EXTENSIONS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
}
_SPARK_CHARSETS = {"iso-8859-1", "us-ascii", "utf-16", "utf-16be", "utf-16le", "utf-32", "utf-8"}
_GLOB_PATHS = "__globPaths__"  # DataSource.GLOB_PATHS_KEY: "false" turns Spark's own globbing off


def detect_format(files: list[FileIdentity], configured: str | None) -> str:
    """The format of the run's files: the configured one, else from their extensions (one format per run)."""
    if configured:
        return configured
    kinds = set()
    for s in files:
        name = s.uri.lower().removesuffix("._copying_")
        for comp in COMPRESSION:
            if name.endswith(comp):
                name = name[: -len(comp)]
                break
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
        raise ConfigError(f"one run mixes formats ({', '.join(sorted(kinds))})", hint="run each format separately")
    return kinds.pop()


def read_batch(
    spark: SparkSession,
    files: list[FileIdentity],
    fmt: str,
    options: dict[str, str],
    schema: StructType | None = None,
    storage: Storage | None = None,
    *,
    inputs: SparkInputs | None = None,
) -> DataFrame:
    """A lazy DataFrame over exactly these files; malformed records fail the write that reads it.

    `schema` is the table's, if it exists. The DataFrame's columns are exactly those of the files:
    parquet's (all files must have the same), the CSV header (the same in every file), or for JSON
    the keys found in any record of the batch. A key missing from some records only is NULL there,
    as JSON has it; a key the table has that no record holds is a missing column, and a key the
    table lacks an extra one: schema.apply_contract decides about both. Columns the table has are
    parsed with the table's types (a value that does not fit fails the read, naming the file);
    new columns get the types Spark infers. JSON files holding one top-level array are read whole
    (multiLine) automatically.

    Local files Spark would mangle are read through `inputs`' links: pass a SparkInputs and close it
    after the write; without one, the links live until release_implicit_inputs() or exit.
    Spark's read failures here come out as InputError naming the file (input_error_from_spark);
    those of the later write must be mapped by the caller with input_error_from_spark.
    """
    if inputs is None:
        inputs = implicit_inputs(files)
    opts = dict(options)
    low = lower_options(opts)
    # Spark's own globbing stays on only for other URIs that need it (hdfs://.../*.parquet).
    glob_off = not any(is_uri(s.uri) and not is_s3_uri(s.uri) and has_glob(s.uri) for s in files)
    _allow_charset(spark, low)

    def reader(**defaults: str) -> DataFrameReader:
        r = spark.read.format(fmt)
        if glob_off:
            r = r.option(_GLOB_PATHS, "false")
        for k, v in defaults.items():
            if k.lower() not in low:
                r = r.option(k, v)
        for k, v in opts.items():
            r = r.option(k, v)
        return r

    try:
        if fmt == "parquet":
            check_parquet_magic(files, storage)
            signature = check_parquet_schemas(files, storage)
            return _read_parquet(spark, reader(), inputs.paths, signature, opts)
        if fmt == "csv":
            return _read_csv(spark, files, inputs, reader, low, schema, storage)
        if fmt == "json":
            return _read_json(spark, files, inputs, reader, low, schema, storage)
        return _load(reader(), inputs.paths)
    except WapError:
        raise
    except Exception as e:
        err = input_error_from_spark(e, files, fmt=fmt, options=options)
        if err is not None:
            raise err from e
        raise


# Spark's inferred schema per session, by the batch's footer signature and read options (see _read_parquet).
_INFERRED: weakref.WeakKeyDictionary[Any, dict[tuple[str, tuple[tuple[str, str], ...]], StructType]] = (
    weakref.WeakKeyDictionary()
)
_INFERRED_MAX = 64  # per session: a batch of a new footer schema beyond it forgets the others


def _read_parquet(
    spark: SparkSession, r: DataFrameReader, paths: list[str], signature: str | None, opts: dict[str, str]
) -> DataFrame:
    """A parquet batch read with the schema Spark inferred for an earlier batch of the same footer signature
    (parquet_checks.Footer) and options, in this session. Inferring is a Spark job (~90 ms of a small run's
    ~0.5 s), and a watched folder's files mostly share one footer schema; the inference depends only on the
    footer, the options and the session's settings, so the schema given is the one Spark would infer."""
    if signature is None:
        return _load(r, paths)
    known = _INFERRED.setdefault(spark, {})
    key = (signature, tuple(sorted(opts.items())))
    schema = known.get(key)
    if schema is not None:
        return _load(r.schema(schema), paths)
    df = _load(r, paths)
    if len(known) >= _INFERRED_MAX:
        known.clear()
    known[key] = df.schema
    return df


_SPARK_GLOB = re.compile(r"[{}\[\]*?\\]")  # SparkHadoopUtil.isGlobPath


def _load(r: DataFrameReader, paths: list[str]) -> DataFrame:
    """Load exactly `paths`, working around Spark 4.1 with __globPaths__=false and several paths.

    DataSource.checkAndGlobPathIfNecessary replaces every path that looks like a glob ({}[]*?\\)
    by the whole list of paths when globbing is off, so such a file beside N-1 others is read N
    times and the others again. Local names with those characters are links; S3 keys cannot be:
    each is loaded on its own (one path is handled right) and the parts are unioned by name.
    """
    globby = [p for p in paths if _SPARK_GLOB.search(p)]
    if len(paths) < 2 or not globby:
        return r.load(paths)
    plain = [p for p in paths if not _SPARK_GLOB.search(p)]
    parts = ([r.load(plain)] if plain else []) + [r.load(p) for p in globby]
    df = parts[0]
    for other in parts[1:]:
        df = df.unionByName(other)
    return df


def _allow_charset(spark: SparkSession, low: dict[str, str]) -> None:
    """Spark 4 accepts only 7 charsets unless spark.sql.legacy.javaCharsets; any other asked for is allowed."""
    enc = low.get("encoding") or low.get("charset")
    if enc and enc.lower() not in _SPARK_CHARSETS:
        spark.conf.set("spark.sql.legacy.javaCharsets", "true")


def _text_heads(files: list[FileIdentity], storage: Storage | None) -> list[tuple[bytes, bool] | None]:
    if len(files) == 1:
        return [read_head(files[0], storage)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda s: read_head(s, storage), files))


def _read_csv(
    spark: SparkSession,
    files: list[FileIdentity],
    inputs: SparkInputs,
    reader: Any,
    low: dict[str, str],
    table: StructType | None,
    storage: Storage | None,
) -> DataFrame:
    from pyspark.sql.types import StructField, StructType

    if not option_flag(low, "header", True):
        # No header: the user's layout; columns by position (the table's schema when it exists).
        r = reader(mode="FAILFAST", header="false")
        return _load(r.schema(table) if table is not None else r.option("inferSchema", "true"), inputs.paths)
    d = CsvDialect.from_options(low)
    enc = encoding_of(low)
    heads: list[tuple[FileIdentity, CsvHead]] = []
    for s, h in zip(files, _text_heads(files, storage), strict=True):
        if h is None:
            continue
        text = decode_head(s, h[0], h[1], low, "csv")
        if text is None or not d.checkable:
            continue
        head = check_csv_head(s, text, h[1], d)
        if head is None:
            continue
        local = local_path(s)
        if not d.multiline and not head.complete and local is not None:
            line = first_quoted_newline(local, d, enc)
            if line is not None:
                raise quoted_newline_error(s, line)
        heads.append((s, head))
    if heads:
        first, ref = heads[0]
        for s, other in heads[1:]:
            if other.header != ref.header:
                raise _header_differs(s, first, other.header, ref.header)
        names = ref.header
    else:
        names = reader(mode="FAILFAST", header="true").load(inputs.paths).schema.fieldNames()  # the first header
    types = {f.name.lower(): f.dataType for f in table.fields} if table is not None else {}
    new = [n for n in names if n.lower() not in types]
    if new:
        if table is None and heads and len(heads) == len(files) and all(h.complete and h.rows == 0 for _, h in heads):
            raise InputError(
                f"{', '.join(s.uri for s in files)} {'has' if len(files) == 1 else 'have'} a header but no rows, "
                "so there are no values to infer the new table's column types from",
                hint="load a file with rows first; later header-only files are accepted and add 0 rows",
            )
        inferred = reader(mode="FAILFAST", header="true", inferSchema="true").load(inputs.paths).schema
        if len(inferred.fields) != len(names):
            raise InputError(
                f"Spark reads {len(inferred.fields)} column(s) in {files[0].uri}, not the {len(names)} of its header",
                hint="check the delimiter and quote settings in read_options",
            )
        for i, n in enumerate(names):
            types.setdefault(n.lower(), inferred.fields[i].dataType)
    read_schema = StructType([StructField(n, types[n.lower()], True) for n in names])
    return _load(reader(mode="FAILFAST", header="true", enforceSchema="false").schema(read_schema), inputs.paths)


def _header_differs(s: FileIdentity, first: FileIdentity, h: list[str], ref: list[str]) -> InputError:
    lacks = [x for x in ref if x not in h]
    extra = [x for x in h if x not in ref]
    what = column_difference(lacks, extra, f"has the same columns in another order ({', '.join(h)})")
    return InputError(
        f"the header of {s.uri} differs from that of {first.uri}: it {what}",
        hint="the CSV files of one run must have the same header: fix the file, or run it separately",
    )


def _read_json(
    spark: SparkSession,
    files: list[FileIdentity],
    inputs: SparkInputs,
    reader: Any,
    low: dict[str, str],
    table: StructType | None,
    storage: Storage | None,
) -> DataFrame:
    from pyspark.sql.types import StructField, StructType

    from wapflow.writing.schema import read_type

    kinds: dict[str, list[FileIdentity]] = {"array": [], "lines": []}
    for s, h in zip(files, _text_heads(files, storage), strict=True):
        if h is None:
            continue
        text = decode_head(s, h[0], h[1], low, "json")
        if text is None:
            continue
        kinds[check_json_head(s, text, h[1], low)].append(s)
    defaults = {"mode": "FAILFAST"}
    if "multiline" not in low:
        if kinds["array"] and kinds["lines"]:
            raise InputError(
                f"one run mixes JSON arrays ({kinds['array'][0].uri}) and JSON lines ({kinds['lines'][0].uri})",
                hint="run them separately (arrays are read whole, JSON lines line by line)",
            )
        if kinds["array"]:
            defaults["multiLine"] = "true"
    try:
        inferred = reader(**defaults).load(inputs.paths).schema
    except Exception as e:
        err = input_error_from_spark(e, files, fmt="json", options=low)
        if err is not None and len(files) > 1 and not _names_one_file(err, files):
            err = _locate_json_failure(files, inputs, reader, defaults, low) or err
        if err is not None:
            raise err from e
        raise
    if not inferred.fields:
        raise InputError(f"no JSON records in {', '.join(s.uri for s in files)}", hint="check the files")
    if "_corrupt_record" in inferred.fieldNames() and "_corrupt_record" not in (table.fieldNames() if table else []):
        raise InputError(
            f"{', '.join(s.uri for s in files)}: some records are not valid JSON",
            hint="fix the file, or remove read_options.mode so that wapflow fails on the first bad record",
        )
    types = {f.name.lower(): f.dataType for f in table.fields} if table is not None else {}
    fields = [StructField(f.name, read_type(f.dataType, types.get(f.name.lower())), True) for f in inferred.fields]
    return _load(reader(**defaults).schema(StructType(fields)), inputs.paths)


def _names_one_file(err: InputError, files: list[FileIdentity]) -> bool:
    return sum(1 for s in files if s.uri in err.message) == 1


def _locate_json_failure(
    files: list[FileIdentity],
    inputs: SparkInputs,
    reader: Any,
    defaults: dict[str, str],
    low: dict[str, str],
) -> InputError | None:
    """Which file broke schema inference: local JSON lines files by scanning, else one Spark read per file."""
    if not defaults.get("multiLine"):
        for s in files:
            err = json_lines_error(s)
            if err is not None:
                return err
    for i, s in enumerate(files[:20]):
        try:
            reader(**defaults).load([inputs.paths[i]]).schema  # noqa: B018 - reading the schema makes Spark parse the file
        except Exception as e:  # noqa: BLE001 - Spark's reader errors are classified by input_error_from_spark
            err = input_error_from_spark(e, [s], fmt="json", options=low)
            if err is not None:
                return err
    return None
