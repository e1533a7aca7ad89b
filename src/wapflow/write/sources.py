"""Source files: what the user named, checked, and handed to Spark as exactly those files.

What you name is what is read:

- A path that exists is read as that file (or folder), whatever characters it contains:
  `batch[1].parquet` is a name, not a pattern. Only text that names nothing is a glob (Python's glob
  rules: `*`, `?`, `[...]`, recursive `**`; files only). S3 keys follow the same rule.
- A folder (or S3 prefix) reads the data files under it, recursively. Spark/Hadoop bookkeeping files
  are skipped and reported (`SourceList.skipped`, e.g. "skipped 1 bookkeeping file: _SUCCESS"):
  `_SUCCESS`, `_committed_*`, `_started_*`, `_metadata`, `_common_metadata`, `*.crc`, dotfiles such
  as `.DS_Store`, and the folders `_temporary`, `_spark_metadata` and dot-folders. A glob that matches
  bookkeeping files skips them the same way. Any other file named or matched is read, or the run
  fails naming it (a `*._COPYING_` file met in a listing is an unfinished copy: refused). The
  listing itself is wapflow.storage's (Storage.scan), the same `wap storage ls` shows, so every
  file of a run is the FileIdentity (uri, size, version) a listing gives for it.
- Spark is given exact paths with its own globbing off (reader option `__globPaths__ = false`). Its
  hidden-file filter (names starting with `_` or `.`, or ending in `._COPYING_`) cannot be switched
  off and drops even a file named explicitly, and Hadoop's local file system cannot open names with
  `:`. So a local file whose path holds anything but `[A-Za-z0-9._+-]` (or a part starting with `_`,
  `.` or `-`) is given to Spark as a symlink with a safe name (`f000003.parquet`) in a private
  temporary folder (`SparkInputs`), removed after the write; Spark's messages naming a link are
  mapped back to the real file (`input_error_from_spark`). A local file with a Hadoop `.crc` sidecar
  is linked too, so that a stale checksum cannot fail the read. S3 objects cannot be linked: with
  globbing off every character reads correctly, but a name Spark hides is refused, asking to rename
  it. (Spark 4.1 mishandles several paths when globbing is off: a path that looks like a glob is
  replaced by all the paths; such S3 keys are therefore loaded one by one, see _load.)

Before Spark reads anything, files are checked by name: exists, not empty, parquet magic bytes and
(for several files) the same columns; CSV and JSON lines files: the first 64 KB are text in the
declared encoding, the CSV header is sound (names, delimiter, no duplicates) and rows have one value
per column, JSON lines hold one object per line. Spark then reads in FAILFAST mode, so a malformed
record beyond what was checked fails the write instead of becoming NULLs.
"""

from __future__ import annotations

import atexit
import bz2
import codecs
import contextlib
import csv
import gzip
import io
import json
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, cast
from urllib.parse import unquote

from wapflow.errors import ConfigError, InputError, WapError
from wapflow.storage import Storage, is_s3_uri
from wapflow.storage.files import (
    FileIdentity,
    Listing,
    SkippedFile,
    bookkeeping,
    glob_literal_prefix,
    has_glob,
    spark_hides,
)
from wapflow.storage.settings import parse_s3_uri

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
# Compression Spark (Hadoop's codecs) undoes by file extension for CSV and JSON.
_COMPRESSION = (".gz", ".bz2", ".deflate", ".lz4", ".snappy", ".zst")
HEAD_BYTES = 64 * 1024  # how much of a text file is checked in Python before Spark reads it
_LOCATE_LIMIT = 256 * 1024 * 1024  # on failure, files up to this size are scanned for the bad line
_SPARK_CHARSETS = {"iso-8859-1", "us-ascii", "utf-16", "utf-16be", "utf-16le", "utf-32", "utf-8"}
_GLOB_PATHS = "__globPaths__"  # DataSource.GLOB_PATHS_KEY: "false" turns Spark's own globbing off


# --- what a run reads ---------------------------------------------------------------------------


class SourceList(list[FileIdentity]):
    """The files a run reads (a list), plus the bookkeeping files it skipped, for the run to report."""

    def __init__(self, files: Sequence[FileIdentity] = (), skipped: Sequence[SkippedFile] = ()) -> None:
        super().__init__(files)
        self.skipped: list[SkippedFile] = list(skipped)

    def skipped_message(self, limit: int = 5) -> str | None:
        """'skipped 2 bookkeeping files: _SUCCESS (job marker), .part-0.parquet.crc (checksum file)'."""
        if not self.skipped:
            return None
        n = len(self.skipped)
        shown = [f"{_display_name(s.uri)} ({s.reason})" for s in self.skipped[:limit]]
        more = f", and {n - limit} more" if n > limit else ""
        return f"skipped {n} bookkeeping file{'s' if n != 1 else ''}: {', '.join(shown)}{more}"


def _display_name(uri: str) -> str:
    base = uri.rstrip("/").rsplit("/", 1)[-1]
    return base + ("/" if uri.endswith("/") else "")


def _is_uri(text: str) -> bool:
    return "://" in text and not text.startswith("file://")


def _marker_error(uri: str, reason: str) -> InputError:
    parent = uri.rstrip("/").rsplit("/", 1)[0] or "/"
    return InputError(
        f"{uri} is a Spark/Hadoop {reason}, not a data file",
        hint=f"pass its folder ({parent}) to read the data files beside it (bookkeeping files are skipped)",
    )


# --- resolving patterns -------------------------------------------------------------------------


def resolve_sources(patterns: list[str], storage: Storage | None = None) -> SourceList:
    """The files of a run: paths, folders and globs, locally and on S3 (listed with `storage`'s [s3]).

    The listing is storage's (the same as `wap storage ls`); this adds what a run needs on top: a
    named bookkeeping marker, an empty file, a location without data files, an S3 name Spark
    would hide and an S3 object these credentials cannot read are refused before anything is
    written. Other URIs (hdfs://, gs://, ...) go to Spark as given. `storage` defaults to the
    standard AWS chain without [s3] settings; callers holding a Lakehouse pass lh.storage.
    """
    if not patterns:
        raise ConfigError("no source files given", hint="e.g. wap run nyc.trips landing/2026-11-21.parquet")
    store = storage or Storage()
    files: list[FileIdentity] = []
    skipped: list[SkippedFile] = []
    for pat in patterns:
        if _is_uri(pat) and not is_s3_uri(pat):
            files.append(FileIdentity(pat, None))
            continue
        listing = store.scan(pat, what="source file")
        files.extend(_run_files(listing, pat, store))
        skipped.extend(listing.skipped)
    seen: set[str] = set()
    unique: list[FileIdentity] = []
    for s in files:
        key = os.path.realpath(s.uri) if not _is_uri(s.uri) else s.uri
        if key not in seen:
            seen.add(key)
            unique.append(s)
    return SourceList(unique, list({k.uri: k for k in skipped}.values()))


def _run_files(listing: Listing, pat: str, storage: Storage) -> list[FileIdentity]:
    """The listed files a run may read, or the InputError saying why it may not."""
    on_s3 = is_s3_uri(pat)
    if listing.kind == "file":
        [f] = listing.files
        mark = bookkeeping(_display_name(f.uri))
        if mark is not None and mark[1]:
            raise _marker_error(f.uri, mark[0])
    elif not listing.files:
        raise _nothing_to_read(listing, pat, storage)
    files = listing.files
    if on_s3:
        for f in files:
            if spark_hides(_display_name(f.uri)):
                raise _s3_hidden_error(f.uri)
        storage.s3.check_readable(files)  # listing needs s3:ListBucket, reading s3:GetObject: know before writing
    for f in files:
        if f.size == 0:
            raise InputError(
                f"source file {f.uri} is empty (0 bytes)", hint="remove it or wait until it is fully written"
            )
    return files


def _nothing_to_read(listing: Listing, pat: str, storage: Storage) -> InputError:
    only = ", ".join(_display_name(s.uri) for s in listing.skipped[:5])
    if listing.kind == "folder":
        what = f" (only bookkeeping files: {only})" if only else ""
        return InputError(
            f"folder {pat} holds no data files{what}", hint="check the folder, or wait until files have landed"
        )
    if only:
        return InputError(
            f"{pat!r} matches only bookkeeping files ({only})",
            hint="check the pattern; data files are what a run reads",
        )
    if is_s3_uri(pat):
        loc = parse_s3_uri(pat, what="source")
        return InputError(
            f"no object matches {pat!r} at {storage.s3.settings.describe_endpoint()}",
            hint=f"check the pattern; `wap storage ls {loc.scheme}://{loc.bucket}/"
            f"{glob_literal_prefix(loc.key).rsplit('/', 1)[0]}` lists what is there",
        )
    n = listing.folders
    extra = f" (it matches {n} folder(s): pass a folder itself to read the files in it)" if n else ""
    return InputError(f"no file matches {pat!r}{extra}", hint="check the path and the glob pattern")


def _s3_hidden_error(uri: str) -> InputError:
    bucket_key, name = uri.rsplit("/", 1)
    clean = name.lstrip("_.")
    if clean.endswith("._COPYING_"):
        clean = clean[: -len("._COPYING_")]
    return InputError(
        f"{uri} cannot be read by Spark: it treats names starting with '_' or '.' (or ending in ._COPYING_) "
        "as hidden files, even when named",
        hint=f"copy or rename the object to a name Spark reads, e.g. aws s3 mv {uri} {bucket_key}/{clean or 'data'}",
    )


def detect_format(sources: list[FileIdentity], configured: str | None) -> str:
    if configured:
        return configured
    kinds = set()
    for s in sources:
        name = s.uri.lower().removesuffix("._copying_")
        for comp in _COMPRESSION:
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


# --- what Spark is given: exact paths, links for names it would mangle ------------------------

_LINK_PREFIX = "wapflow-read-"
_LINK_RX = re.compile(
    r"(?:file:)?/*[^\s'\"\[\]]*?" + re.escape(_LINK_PREFIX) + r"[A-Za-z0-9_]+/f(\d{6,})(?:\.[A-Za-z0-9]+)*"
)
_SAFE_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\Z")
_SAFE_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,12}\Z")
_implicit: list[SparkInputs] = []


def needs_link(path: str) -> bool:
    """True when Spark could hide, glob or misread this local path (so it gets a symlink with a safe name)."""
    return any(not _SAFE_PART.match(p) or p.endswith("._COPYING_") for p in path.split(os.sep) if p)


def _link_suffix(name: str) -> str:
    """The real name's trailing extensions that are safe ('.csv.gz'): Spark picks codecs by extension."""
    out = ""
    base = name.removesuffix("._COPYING_")
    for _ in range(3):
        stem, dot, ext = base.rpartition(".")
        if not dot or not stem or not _SAFE_SUFFIX.match("." + ext):
            break
        out = "." + ext + out
        base = stem
    return out


def _link_root() -> str:
    for d in (tempfile.gettempdir(), "/tmp"):
        if os.path.isdir(d) and not needs_link(os.path.realpath(d)):
            return d
    return tempfile.gettempdir()


class SparkInputs:
    """The paths Spark reads for one batch; a context manager that removes its links afterwards.

    Local files whose path Spark would hide, glob or misread are symlinked as f<index>.<ext> in a
    private folder `<tmp>/wapflow-read-*` (index = position in `sources`, so error messages can be
    mapped back with the sources alone); every other file is given as it is. Call close() (or leave
    the `with` block) after the write that reads the DataFrame, not before: Spark reads lazily.
    """

    def __init__(self, sources: Sequence[FileIdentity]) -> None:
        self.sources = list(sources)
        self.folder: str | None = None
        self.links: dict[str, str] = {}  # link path -> real path
        try:
            self.paths = [self._path_for(i, s) for i, s in enumerate(self.sources)]
        except BaseException:
            self.close()
            raise

    def _path_for(self, i: int, s: FileIdentity) -> str:
        if is_s3_uri(s.uri):
            if spark_hides(s.uri.rsplit("/", 1)[-1]):
                raise _s3_hidden_error(s.uri)
            return s.uri
        if _is_uri(s.uri):
            return s.uri
        path = s.uri[len("file://") :] if s.uri.startswith("file://") else s.uri
        head, name = os.path.split(path)
        # A Hadoop .crc sidecar makes the local file system verify the file against it; a stale one
        # (the file replaced by another tool) fails the read, so such files are read through a link.
        if not needs_link(path) and not os.path.exists(os.path.join(head, f".{name}.crc")):
            return path
        if self.folder is None:
            self.folder = tempfile.mkdtemp(prefix=_LINK_PREFIX, dir=_link_root())
        link = os.path.join(self.folder, f"f{i:06d}{_link_suffix(os.path.basename(path))}")
        os.symlink(os.path.abspath(path), link)
        self.links[link] = path
        return link

    def close(self) -> None:
        """Remove the links and their folder (never the files they point to)."""
        folder, self.folder = self.folder, None
        if folder is None:
            return
        for link in self.links:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(link)
        with contextlib.suppress(OSError):
            os.rmdir(folder)

    def __enter__(self) -> SparkInputs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def release_implicit_inputs() -> None:
    """Remove the links of reads made without an explicit SparkInputs (also done at interpreter exit)."""
    while _implicit:
        _implicit.pop().close()


atexit.register(release_implicit_inputs)


# --- local and S3 byte access -------------------------------------------------------------------


def _local_path(s: FileIdentity) -> str | None:
    if is_s3_uri(s.uri) or _is_uri(s.uri):
        return None
    return s.uri[len("file://") :] if s.uri.startswith("file://") else s.uri


def _compression(uri: str) -> str | None:
    low = uri.lower()
    return next((c for c in _COMPRESSION if low.endswith(c)), None)


def _open_local(path: str) -> io.BufferedIOBase | None:
    comp = _compression(path)
    if comp is None:
        return open(path, "rb")
    if comp == ".gz":
        return gzip.open(path, "rb")
    if comp == ".bz2":
        return bz2.open(path, "rb")
    return None  # other codecs: Spark can read them, Python does not check them


def _head(s: FileIdentity, storage: Storage | None) -> tuple[bytes, bool] | None:
    """The first HEAD_BYTES (decompressed) and whether that is the whole file; None when not checkable."""
    local = _local_path(s)
    if local is not None:
        try:
            f = _open_local(local)
            if f is None:
                return None
            with f:
                data = f.read(HEAD_BYTES + 1)
        except PermissionError:
            # Known here to be the source file, not the warehouse: an input this user cannot read.
            raise InputError(
                f"{s.uri} cannot be read: permission denied",
                hint="give the user running wap read access to the file, or run as a user that has it",
            ) from None
        return data[:HEAD_BYTES], len(data) <= HEAD_BYTES
    if not is_s3_uri(s.uri) or _compression(s.uri) not in (None, ".gz"):
        return None
    store = (storage or Storage()).s3
    loc = parse_s3_uri(s.uri)
    try:
        raw = store.client.get_object(Bucket=loc.bucket, Key=loc.key, Range=f"bytes=0-{HEAD_BYTES}")["Body"].read()
    except Exception as e:  # noqa: BLE001 - boto3/botocore raise many types; error_for names the S3 condition
        raise store.error_for(e, action="read", bucket=loc.bucket, key=loc.key) from None
    if _compression(s.uri) == ".gz":
        import zlib

        d = zlib.decompressobj(wbits=31)
        try:
            data = d.decompress(raw, HEAD_BYTES + 1)
        except zlib.error:
            raise InputError(f"{s.uri} is not a valid gzip file", hint="re-export or re-upload the file") from None
        return data[:HEAD_BYTES], len(data) <= HEAD_BYTES and s.size is not None and s.size <= HEAD_BYTES
    return raw[:HEAD_BYTES], len(raw) <= HEAD_BYTES


# --- text checks (CSV, JSON) --------------------------------------------------------------------


def _opts(options: dict[str, str]) -> dict[str, str]:
    return {k.lower(): str(v) for k, v in options.items()}


def _flag(opts: dict[str, str], key: str, default: bool = False) -> bool:
    v = opts.get(key.lower())
    return default if v is None else v.strip().lower() == "true"


def _encoding(opts: dict[str, str]) -> str:
    return opts.get("encoding") or opts.get("charset") or "utf-8"


_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def _decode_head(s: FileIdentity, head: bytes, complete: bool, opts: dict[str, str], fmt: str) -> str | None:
    """The head as text (BOM stripped), or an InputError saying why it is not text in that encoding."""
    enc = _encoding(opts)
    try:
        codec = codecs.lookup(enc)
    except LookupError:
        return None  # a charset Python does not know: Spark will say whether it does
    wide = codec.name.startswith(("utf-16", "utf-32"))
    if not wide:
        if head.startswith(_UTF16_BOMS):
            raise InputError(
                f"{s.uri} is UTF-16 encoded (it starts with a UTF-16 byte order mark)",
                hint='set read_options = { encoding = "UTF-16" } for the table in wap.toml, or re-export it as UTF-8',
            )
        if b"\x00" in head:
            raise InputError(
                f"{s.uri} is not a text file (it contains NUL bytes), so it cannot be {fmt.upper()}",
                hint="check that this is the right file; if it is parquet, name it .parquet or set format",
            )
    if codec.name == "utf-8" and head.startswith(codecs.BOM_UTF8):
        head = head[len(codecs.BOM_UTF8) :]
    dec = codecs.getincrementaldecoder(codec.name)()
    try:
        text = dec.decode(head, final=complete)
    except UnicodeDecodeError as e:
        line = head[: e.start].count(b"\n") + 1
        control = sum(1 for b in head[:4096] if b < 9 or 13 < b < 32)
        if control > len(head[:4096]) // 20:
            raise InputError(
                f"{s.uri} is not a text file (binary content at line {line}), so it cannot be {fmt.upper()}",
                hint="check that this is the right file and format",
            ) from None
        bad = head[e.start : e.start + 1].hex()
        if codec.name == "utf-8":
            try:
                head.decode("cp1252")
                guess = (
                    'it looks like a Windows/Excel export: set read_options = { encoding = "windows-1252" } '
                    "for the table in wap.toml, or re-export it as UTF-8"
                )
            except UnicodeDecodeError:
                guess = 'set read_options = { encoding = "..." } to the file\'s encoding, or re-export it as UTF-8'
            raise InputError(
                f"{s.uri} is not valid UTF-8 text (byte 0x{bad} at line {line}): wrong encoding", hint=guess
            ) from None
        raise InputError(
            f"{s.uri} is not valid {enc} text (byte 0x{bad} at line {line})",
            hint="set read_options.encoding to the file's real encoding",
        ) from None
    return text


@dataclass
class _CsvDialect:
    sep: str
    quote: str
    escape: str | None
    strip: bool
    multiline: bool
    checkable: bool  # Python's csv can parse it like Spark (one-character delimiter, default line endings)

    @classmethod
    def from_options(cls, opts: dict[str, str]) -> _CsvDialect:
        sep = opts.get("sep", opts.get("delimiter", ","))
        sep = {"\\t": "\t", "\\u0001": "\x01"}.get(sep, sep)
        quote = opts.get("quote", '"')
        escape = opts.get("escape", "\\")
        strip = _flag(opts, "ignoreLeadingWhiteSpace") and _flag(opts, "ignoreTrailingWhiteSpace")
        checkable = len(sep) == 1 and len(quote) <= 1 and len(escape) <= 1 and "linesep" not in opts
        checkable = checkable and not opts.get("comment")
        return cls(
            sep, quote, None if (escape == quote or not escape) else escape, strip, _flag(opts, "multiLine"), checkable
        )

    def reader(self, lines: Any, *, strict: bool = False) -> Any:
        if self.quote:
            return csv.reader(
                lines, delimiter=self.sep, quotechar=self.quote, escapechar=self.escape, doublequote=True, strict=strict
            )
        return csv.reader(lines, delimiter=self.sep, quoting=csv.QUOTE_NONE, escapechar=self.escape, strict=strict)


_LOOKS_LIKE_DATA = re.compile(r"[-+]?(\d+([.,]\d*)?|\.\d+)([eE][-+]?\d+)?\Z|\d{4}-\d{2}-\d{2}([ T].*)?\Z")
_DELIMS = {";": ";", "\t": "\\t", "|": "|", ",": ","}


@dataclass
class _CsvHead:
    header: list[str]
    rows: int  # complete data rows seen in the head
    complete: bool  # the head is the whole file


def _check_csv_head(s: FileIdentity, text: str, complete: bool, d: _CsvDialect) -> _CsvHead | None:
    """Header names, delimiter, duplicates, and one value per column in the rows of the head."""
    if not complete:
        cut = text.rfind("\n")
        if cut < 0:
            return None  # a first line longer than the head: leave it to Spark
        text = text[: cut + 1]
    if not text.strip():
        raise InputError(
            f"{s.uri} has no header line (it holds only blank lines)", hint="export the file with a header line"
        )
    rdr = d.reader(io.StringIO(text, newline=""))
    try:
        header = next(rdr)
    except (csv.Error, StopIteration) as e:
        raise InputError(
            f"the header line of {s.uri} cannot be parsed as CSV ({e})", hint="fix or re-export the file"
        ) from None
    if d.strip:
        header = [h.strip() for h in header]
    raw = text.split("\n", 1)[0]
    if len(header) <= 1:
        name = header[0] if header else ""
        counts = {c: name.count(c) for c in _DELIMS if c != d.sep}
        best = max(counts, key=lambda c: counts[c]) if counts else None
        if best is not None and counts[best] > 0:
            shown = _DELIMS[best]
            raise InputError(
                f"{s.uri} does not look {_DELIMS.get(d.sep, d.sep)!r}-delimited: its header is one column "
                f"{name[:80]!r}, which looks {shown!r}-delimited",
                hint=f'set read_options = {{ sep = "{shown}" }} for the table in wap.toml',
            )
    for i, h in enumerate(header, 1):
        if not h.strip():
            raise InputError(
                f"the header of {s.uri} has no name for column {i} (header: {raw[:120]!r})",
                hint="give every column a name in the header line",
            )
        if "\n" in h or "\r" in h:
            raise InputError(
                f"the header of {s.uri} has a line break in the name of column {i} ({h[:40]!r})",
                hint="put every column name on the header line",
            )
        if h != h.strip():
            raise InputError(
                f"the header of {s.uri} has column name {h!r} with spaces around it",
                hint='remove the spaces, or set read_options = { ignoreLeadingWhiteSpace = "true", '
                'ignoreTrailingWhiteSpace = "true" }',
            )
    seen: dict[str, int] = {}
    for i, h in enumerate(header, 1):
        if h.lower() in seen:
            raise InputError(
                f"the header of {s.uri} names column {h!r} twice (columns {seen[h.lower()]} and {i})",
                hint="give every column a distinct name (names are case-insensitive)",
            )
        seen[h.lower()] = i
    if all(_LOOKS_LIKE_DATA.match(h.strip()) for h in header):
        raise InputError(
            f"the first line of {s.uri} looks like data, not a header ({raw[:80]!r})",
            hint="CSV files need a header line with the column names",
        )
    rows = 0
    line_before = rdr.line_num
    try:
        for row in rdr:
            start, line_before = line_before + 1, rdr.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # Spark skips blank lines
            if not complete and rdr.line_num == text.count("\n") and d.multiline:
                break  # the head may cut this record
            if not d.multiline and any("\n" in v or "\r" in v for v in row):
                raise _quoted_newline_error(s, start)
            if len(row) != len(header):
                raise InputError(
                    f"line {start} of {s.uri} has {len(row)} value(s) but the header has {len(header)} columns"
                    f" ({_short(text.splitlines()[start - 1] if start <= text.count(chr(10)) else '')})",
                    hint="fix or re-export the file: every row needs one value per column "
                    "(wapflow never pads short rows with NULLs or drops extra values)",
                )
            rows += 1
    except csv.Error as e:
        raise InputError(
            f"line {rdr.line_num} of {s.uri} cannot be parsed as CSV ({e})", hint="fix or re-export the file"
        ) from None
    return _CsvHead(header, rows, complete)


def _short(text: str, n: int = 80) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")


def _quoted_newline_error(s: FileIdentity, line: int) -> InputError:
    return InputError(
        f"{s.uri} has a quoted value spanning several lines, starting at line {line}",
        hint='set read_options = { multiLine = "true" } for the table in wap.toml (Spark then reads each '
        "file in one piece), or remove the line breaks from the values",
    )


def _first_quoted_newline(path: str, d: _CsvDialect, encoding: str) -> int | None:
    """The line where a quoted value first spans a line break, scanning the whole local file.

    Vectorised (numpy): chunks without a quote character are only counted; in the others, a line
    with an odd number of quote characters is a candidate, confirmed by parsing it alone (a literal
    quote inside an unquoted value, like 5" screen, is not an opening quote).
    """
    import numpy as np

    try:
        q = d.quote.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return None
    if len(q) != 1 or codecs.lookup(encoding).name.startswith(("utf-16", "utf-32")):
        return None
    f = _open_local(path)
    if f is None:
        return None
    base, carry = 1, b""
    with f:
        while True:
            chunk = f.read(8 << 20)
            if not chunk:
                return None  # what is left has no line break after it
            data = carry + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                continue
            carry, data = data[cut + 1 :], data[: cut + 1]
            if q in data:
                arr = np.frombuffer(data, dtype=np.uint8)
                newlines = np.flatnonzero(arr == 10)
                line_of_quote = np.searchsorted(newlines, np.flatnonzero(arr == q[0]))
                per_line = np.bincount(line_of_quote, minlength=len(newlines))
                for li in np.flatnonzero(per_line & 1):
                    begin = int(newlines[li - 1]) + 1 if li > 0 else 0
                    line = data[begin : int(newlines[li])].decode(encoding, errors="replace")
                    try:
                        list(d.reader([line + "\n"], strict=True))
                    except csv.Error as e:
                        if "unexpected end of data" in str(e):
                            return base + int(li)
            base += data.count(b"\n")


def _check_json_head(s: FileIdentity, text: str, complete: bool, opts: dict[str, str]) -> str:
    """'array' (a top-level JSON array: read with multiLine), 'lines', or an InputError naming the line."""
    body = text.lstrip()
    if not body:
        if complete:
            raise InputError(
                f"{s.uri} holds no JSON records (only whitespace)", hint="remove it or wait until it is written"
            )
        return "lines"
    if body[0] == "[":
        if complete:
            try:
                value = json.loads(body)
            except ValueError as e:
                raise InputError(
                    f"{s.uri} is not valid JSON ({_json_problem(e)})", hint="fix or re-export the file"
                ) from None
            bad = next((i for i, v in enumerate(value) if not isinstance(v, dict)), None)
            if bad is not None:
                raise InputError(
                    f"element {bad + 1} of the JSON array in {s.uri} is {_json_kind(value[bad])}, not an object",
                    hint="each element of a top-level array must be an object with the record's fields",
                )
        return "array"
    if _flag(opts, "multiLine"):
        if complete:
            _one_json_value(s, body)
        return "lines"
    lines = text.split("\n")
    if not complete:
        lines = lines[:-1]
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as e:
            raise _json_line_error(s, i, line, e) from None
        if not isinstance(value, dict):
            raise InputError(
                f"line {i} of {s.uri} is {_json_kind(value)}, not a JSON object",
                hint="JSON lines files hold one object per line; a file holding one array is read as a whole",
            )
    return "lines"


def _one_json_value(s: FileIdentity, body: str) -> None:
    """multiLine reads one JSON value per file: a second one would be dropped without a word."""
    try:
        _, end = json.JSONDecoder().raw_decode(body)
    except ValueError as e:
        raise InputError(f"{s.uri} is not valid JSON ({_json_problem(e)})", hint="fix or re-export the file") from None
    rest = body[end:].strip()
    if rest:
        line = body[:end].count("\n") + 1
        raise InputError(
            f"{s.uri} holds more than one JSON value (another starts after line {line}), "
            "but multiLine reads only the first",
            hint="remove read_options.multiLine for JSON lines files (one object per line)",
        )


def _json_problem(e: ValueError) -> str:
    if isinstance(e, json.JSONDecodeError):
        return f"{e.msg} at line {e.lineno}, column {e.colno}"
    return str(e)


def _json_kind(v: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(v), "a number")


def _json_line_error(s: FileIdentity, i: int, line: str, e: ValueError) -> InputError:
    stripped = line.strip()
    if i == 1 and stripped.startswith("{"):
        return InputError(
            f"{s.uri} is not JSON lines: line 1 is not a complete JSON object ({_json_problem(e)})",
            hint="if the file is one JSON document spread over several lines, "
            'set read_options = { multiLine = "true" }; otherwise fix or re-export it',
        )
    if i == 1 and not stripped.startswith(("{", "[")):
        looks_csv = any(c in stripped for c in ",;\t|")
        return InputError(
            f"{s.uri} is not JSON: line 1 is {_short(stripped)}",
            hint='if it is CSV, set format = "csv" for the table in wap.toml (or name it .csv)'
            if looks_csv
            else "check that this is the right file and format",
        )
    return InputError(
        f"line {i} of {s.uri} is not valid JSON ({_json_problem(e)}): {_short(stripped)}",
        hint="fix or re-export the file (a truncated last line usually means the file was not fully written)",
    )


# --- parquet checks -----------------------------------------------------------------------------


def check_local_parquet(sources: list[FileIdentity], storage: Storage | None = None) -> None:
    """A parquet file starts and ends with PAR1; a truncated or foreign file fails here, by name."""
    for s in sources:
        if s.size is None:
            continue
        if s.size < 12:
            raise InputError(f"{s.uri} is not a parquet file (only {s.size} bytes)", hint="re-export the file")
        if is_s3_uri(s.uri):
            head, tail = (storage or Storage()).s3.read_edges(s.uri, 4)
        else:
            with open(_local_path(s) or s.uri, "rb") as f:
                head = f.read(4)
                f.seek(-4, os.SEEK_END)
                tail = f.read(4)
        if head != b"PAR1" or tail != b"PAR1":
            raise InputError(
                f"{s.uri} is not a valid parquet file (corrupt or truncated: missing PAR1 magic bytes)",
                hint="re-export or re-upload the file; if it is CSV or JSON, set format in wap.toml",
            )


def _parquet_schema(s: FileIdentity, storage: Storage | None) -> Any:
    """The file's arrow schema from its footer only (local: pyarrow; S3: one or two ranged GETs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        local = _local_path(s)
        if local is not None:
            return pq.read_schema(local)
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
        return pq.read_schema(pa.BufferReader(b"PAR1" + data[-need:]))
    except WapError:
        raise
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad footer; all mean the same
        raise InputError(
            f"{s.uri} is not a valid parquet file (cannot read its footer: {str(e).splitlines()[0][:200]})",
            hint="re-export or re-upload the file",
        ) from None


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


def check_parquet_schemas(sources: list[FileIdentity], storage: Storage | None = None) -> None:
    """From the footers: no column without a type, and every file of a batch has the same columns.

    A column of parquet's null type (all values NULL, no type) is read by Spark as int, a guess the
    table would then keep or accept; and Spark takes one file's schema for a batch, so columns other
    files add would be dropped and the ones they lack read as NULL.
    """
    if len(sources) == 1:
        schemas = [_parquet_schema(sources[0], storage)]
    else:
        with ThreadPoolExecutor(max_workers=8) as pool:
            schemas = list(pool.map(lambda s: _parquet_schema(s, storage), sources))
    for s, sch in zip(sources, schemas, strict=True):
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
    known = [(s, list(sch.names)) for s, sch in zip(sources, schemas, strict=True) if sch is not None]
    if len(known) < 2:
        return
    first, ref = known[0]
    ref_set = {c.lower() for c in ref}
    for s, c in known[1:]:
        have = {x.lower() for x in c}
        if have != ref_set:
            raise _columns_differ(
                s, first, [x for x in ref if x.lower() not in have], [x for x in c if x.lower() not in ref_set]
            )


def _difference(lacks: list[str], extra: list[str], same: str) -> str:
    """How one file's columns differ from the first file's, for the two messages below."""
    parts = []
    if lacks:
        parts.append("lacks " + ", ".join(repr(x) for x in lacks))
    if extra:
        parts.append("has " + ", ".join(repr(x) for x in extra) + " in addition")
    return "; ".join(parts) or same


def _columns_differ(s: FileIdentity, first: FileIdentity, lacks: list[str], extra: list[str]) -> InputError:
    what = _difference(lacks, extra, "has the same columns in another order")
    return InputError(
        f"{s.uri} does not have the same columns as {first.uri}: it {what}",
        hint="the files of one run must share their columns: fix the file, or run it separately",
    )


# --- reading ------------------------------------------------------------------------------------


def read_batch(
    spark: SparkSession,
    sources: list[FileIdentity],
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
        inputs = SparkInputs(sources)
        _implicit.append(inputs)
    opts = dict(options)
    low = _opts(opts)
    # Spark's own globbing stays on only for other URIs that need it (hdfs://.../*.parquet).
    glob_off = not any(_is_uri(s.uri) and not is_s3_uri(s.uri) and has_glob(s.uri) for s in sources)
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
            check_local_parquet(sources, storage)
            check_parquet_schemas(sources, storage)
            return _load(reader(), inputs.paths)
        if fmt == "csv":
            return _read_csv(spark, sources, inputs, reader, low, schema, storage)
        if fmt == "json":
            return _read_json(spark, sources, inputs, reader, low, schema, storage)
        return _load(reader(), inputs.paths)
    except WapError:
        raise
    except Exception as e:
        err = input_error_from_spark(e, sources, fmt=fmt, options=options)
        if err is not None:
            raise err from e
        raise


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


def _text_heads(sources: list[FileIdentity], storage: Storage | None) -> list[tuple[bytes, bool] | None]:
    if len(sources) == 1:
        return [_head(sources[0], storage)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda s: _head(s, storage), sources))


def _read_csv(
    spark: SparkSession,
    sources: list[FileIdentity],
    inputs: SparkInputs,
    reader: Any,
    low: dict[str, str],
    table: StructType | None,
    storage: Storage | None,
) -> DataFrame:
    from pyspark.sql.types import StructField, StructType

    if not _flag(low, "header", True):
        # No header: the user's layout; columns by position (the table's schema when it exists).
        r = reader(mode="FAILFAST", header="false")
        return _load(r.schema(table) if table is not None else r.option("inferSchema", "true"), inputs.paths)
    d = _CsvDialect.from_options(low)
    enc = _encoding(low)
    heads: list[tuple[FileIdentity, _CsvHead]] = []
    for s, h in zip(sources, _text_heads(sources, storage), strict=True):
        if h is None:
            continue
        text = _decode_head(s, h[0], h[1], low, "csv")
        if text is None or not d.checkable:
            continue
        head = _check_csv_head(s, text, h[1], d)
        if head is None:
            continue
        local = _local_path(s)
        if not d.multiline and not head.complete and local is not None:
            line = _first_quoted_newline(local, d, enc)
            if line is not None:
                raise _quoted_newline_error(s, line)
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
        if table is None and heads and len(heads) == len(sources) and all(h.complete and h.rows == 0 for _, h in heads):
            raise InputError(
                f"{', '.join(s.uri for s in sources)} {'has' if len(sources) == 1 else 'have'} a header but no rows, "
                "so there are no values to infer the new table's column types from",
                hint="load a file with rows first; later header-only files are accepted and add 0 rows",
            )
        inferred = reader(mode="FAILFAST", header="true", inferSchema="true").load(inputs.paths).schema
        if len(inferred.fields) != len(names):
            raise InputError(
                f"Spark reads {len(inferred.fields)} column(s) in {sources[0].uri}, not the {len(names)} of its header",
                hint="check the delimiter and quote settings in read_options",
            )
        for i, n in enumerate(names):
            types.setdefault(n.lower(), inferred.fields[i].dataType)
    read_schema = StructType([StructField(n, types[n.lower()], True) for n in names])
    return _load(reader(mode="FAILFAST", header="true", enforceSchema="false").schema(read_schema), inputs.paths)


def _header_differs(s: FileIdentity, first: FileIdentity, h: list[str], ref: list[str]) -> InputError:
    lacks = [x for x in ref if x not in h]
    extra = [x for x in h if x not in ref]
    what = _difference(lacks, extra, f"has the same columns in another order ({', '.join(h)})")
    return InputError(
        f"the header of {s.uri} differs from that of {first.uri}: it {what}",
        hint="the CSV files of one run must have the same header: fix the file, or run it separately",
    )


def _read_json(
    spark: SparkSession,
    sources: list[FileIdentity],
    inputs: SparkInputs,
    reader: Any,
    low: dict[str, str],
    table: StructType | None,
    storage: Storage | None,
) -> DataFrame:
    from pyspark.sql.types import StructField, StructType

    from wapflow.write.schema import read_type

    kinds: dict[str, list[FileIdentity]] = {"array": [], "lines": []}
    for s, h in zip(sources, _text_heads(sources, storage), strict=True):
        if h is None:
            continue
        text = _decode_head(s, h[0], h[1], low, "json")
        if text is None:
            continue
        kinds[_check_json_head(s, text, h[1], low)].append(s)
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
        err = input_error_from_spark(e, sources, fmt="json", options=low)
        if err is not None and len(sources) > 1 and not _names_a_source(err, sources):
            err = _locate_json_failure(spark, sources, inputs, reader, defaults, low) or err
        if err is not None:
            raise err from e
        raise
    if not inferred.fields:
        raise InputError(f"no JSON records in {', '.join(s.uri for s in sources)}", hint="check the files")
    if "_corrupt_record" in inferred.fieldNames() and "_corrupt_record" not in (table.fieldNames() if table else []):
        raise InputError(
            f"{', '.join(s.uri for s in sources)}: some records are not valid JSON",
            hint="fix the file, or remove read_options.mode so that wapflow fails on the first bad record",
        )
    types = {f.name.lower(): f.dataType for f in table.fields} if table is not None else {}
    fields = [StructField(f.name, read_type(f.dataType, types.get(f.name.lower())), True) for f in inferred.fields]
    return _load(reader(**defaults).schema(StructType(fields)), inputs.paths)


def _names_a_source(err: InputError, sources: list[FileIdentity]) -> bool:
    return sum(1 for s in sources if s.uri in err.message) == 1


def _locate_json_failure(
    spark: SparkSession,
    sources: list[FileIdentity],
    inputs: SparkInputs,
    reader: Any,
    defaults: dict[str, str],
    low: dict[str, str],
) -> InputError | None:
    """Which file broke schema inference: local JSON lines files by scanning, else one Spark read per file."""
    for s in sources:
        local = _local_path(s)
        if local is None or defaults.get("multiLine") or (s.size or 0) > _LOCATE_LIMIT:
            continue
        f = _open_local(local)
        if f is None:
            continue
        with f:
            for i, raw in enumerate(f, 1):
                line = raw.decode("utf-8", errors="replace").lstrip("\ufeff")
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except ValueError as e:
                    return _json_line_error(s, i, line, e)
                if not isinstance(value, dict):
                    return InputError(
                        f"line {i} of {s.uri} is {_json_kind(value)}, not a JSON object",
                        hint="JSON lines files hold one object per line",
                    )
    for i, s in enumerate(sources[:20]):
        try:
            reader(**defaults).load([inputs.paths[i]]).schema  # noqa: B018 - reading the schema makes Spark parse the file
        except Exception as e:  # noqa: BLE001 - Spark's reader errors are classified by input_error_from_spark
            err = input_error_from_spark(e, [s], fmt="json", options=low)
            if err is not None:
                return err
    return None


# --- Spark's failures as input errors -----------------------------------------------------------

# Conditions that only reading or parsing a data source raises.
_PARSE = (
    "MALFORMED_RECORD_IN_PARSING",
    "MALFORMED_CSV_RECORD",
    "INVALID_JSON_RECORD_TYPE",
    "INVALID_JSON_ROOT_FIELD",
    "CANNOT_PARSE_JSON_FIELD",
    "EMPTY_JSON_FIELD_VALUE",
    "MALFORMED_CHARACTER_CODING",
)
_READ_ONLY = (
    "UNABLE_TO_INFER_SCHEMA",
    "CANNOT_MERGE_SCHEMAS",
    "PARQUET_CONVERSION_FAILURE",
    "PARQUET_TYPE_ILLEGAL",
    "PARQUET_TYPE_NOT_RECOGNIZED",
    "PARQUET_TYPE_NOT_SUPPORTED",
)
_COND_RX = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z][A-Z0-9_]*)?)\]")
_FILE_RX = re.compile(r"(?:reading file|Path does not exist:|CSV file:)\s+(\S+?)\.?(?:\s|$)")


@dataclass
class _Cause:
    cond: str | None
    params: dict[str, str]
    message: str
    cls: str


def _java_causes(j: Any) -> Iterator[_Cause]:
    from wapflow.spark.errors import java_chain

    for t, cls, message in java_chain(j):
        cond, params = None, {}
        try:
            cond = str(t.getCondition()) if t.getCondition() is not None else None
            params = {str(k): str(v) for k, v in dict(t.getMessageParameters()).items()}
        except Exception:  # noqa: BLE001 - older Spark errors lack conditions
            pass
        yield _Cause(cond, params, message, cls)


def _causes(exc: BaseException) -> list[_Cause]:
    out: list[_Cause] = []
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        cond, params = None, {}
        try:
            cond = e.getCondition() if hasattr(e, "getCondition") else None
            params = dict(e.getMessageParameters() or {}) if hasattr(e, "getMessageParameters") else {}
        except Exception:  # noqa: BLE001 - older Spark errors lack conditions
            pass
        text = str(e)
        if cond is None:
            m = _COND_RX.search(text)
            cond = m.group(1) if m else None
        out.append(_Cause(cond, {str(k): str(v) for k, v in params.items()}, text, type(e).__name__))
        java = getattr(e, "java_exception", None) or getattr(e, "_origin", None)
        if java is not None:
            out.extend(_java_causes(java))
        e = e.__cause__ or getattr(e, "_cause", None)
    return out


def _norm_path(p: str) -> str:
    if p.startswith("file:"):
        p = "/" + p[len("file:") :].lstrip("/")
    if p.startswith("s3a://"):
        p = "s3://" + p[len("s3a://") :]
    return p.rstrip(".")


def source_for_path(path: str, sources: Sequence[FileIdentity]) -> FileIdentity | None:
    """The source a path in a Spark message names: a link of SparkInputs, or the file itself."""
    m = _LINK_RX.search(path)
    if m:
        i = int(m.group(1))
        return sources[i] if i < len(sources) else None
    for cand in (path, unquote(path)):
        n = _norm_path(cand)
        for s in sources:
            if _norm_path(s.uri) == n:
                return s
    return None


def _unlink_text(text: str, sources: Sequence[FileIdentity]) -> str:
    """Spark's text with link paths replaced by the real file names."""

    def real(m: re.Match[str]) -> str:
        i = int(m.group(1))
        return sources[i].uri if i < len(sources) else m.group(0)

    return _LINK_RX.sub(real, text)


def _find_line(s: FileIdentity, record: str) -> int | None:
    """The line of a local file equal to Spark's bad record (failure path only; bounded)."""
    local = _local_path(s)
    record = record.strip("\r\n")
    if local is None or not record or (s.size or 0) > _LOCATE_LIMIT:
        return None
    f = _open_local(local)
    if f is None:
        return None
    target = record.encode("utf-8", errors="replace")
    with f:
        for i, raw in enumerate(f, 1):
            line = raw.rstrip(b"\r\n")
            if i == 1 and line.startswith(codecs.BOM_UTF8):
                line = line[len(codecs.BOM_UTF8) :]
            if line == target:
                return i
    return None


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def _value_error(causes: list[_Cause]) -> tuple[str | None, str, str | None] | None:
    """(field, value, target type) of a value that did not parse, from whichever condition says it."""
    for c in causes:
        p = c.params
        if c.cond == "CANNOT_PARSE_JSON_FIELD":
            return p.get("fieldName", "").strip("'`") or None, p.get("fieldValue", ""), p.get("dataType", "").strip('"')
        if c.cond and c.cond.endswith("CANNOT_PARSE_STRING_AS_DATATYPE"):
            return (
                p.get("fieldName", "").strip("'`") or None,
                p.get("fieldValue", "").strip("'"),
                p.get("targetType", "").strip('"'),
            )
        if c.cond == "CAST_INVALID_INPUT":
            return None, p.get("expression", "").strip("'"), p.get("targetType", "").strip('"')
        m = re.match(r'For input string: "(.*)"\Z', c.message)
        if m:
            return None, m.group(1), None
    return None


def _find_value(
    s: FileIdentity, fmt: str, field: str | None, value: str, options: dict[str, str]
) -> tuple[int, str | None] | None:
    """(line, column) of the first record holding `value` (in `field`, if known), in a local file."""
    local = _local_path(s)
    if local is None or (s.size or 0) > _LOCATE_LIMIT:
        return None
    f = _open_local(local)
    if f is None:
        return None
    low = _opts(options)
    enc = _encoding(low)
    with f:
        text = io.TextIOWrapper(cast(IO[bytes], f), encoding=enc, errors="replace", newline="")
        if fmt == "json":
            for i, line in enumerate(text, 1):
                try:
                    rec = json.loads(line.lstrip("\ufeff"))
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    for k, v in rec.items():
                        if (field is None or k.lower() == field.lower()) and (v == value or str(v) == value):
                            return i, k
            return None
        d = _CsvDialect.from_options(low)
        if not d.checkable:
            return None
        rdr = d.reader(text)
        header = [h.lstrip("\ufeff") for h in next(rdr, [])]
        for row in rdr:
            for j, v in enumerate(row):
                if v == value or (d.strip and v.strip() == value):
                    return rdr.line_num, header[j] if j < len(header) else None
    return None


def _clean(text: str) -> str:
    return re.sub(r"\s*SQLSTATE:\s*\w*", "", _COND_RX.sub("", text)).strip(" .")


def _not_the_files_fault(exc: BaseException) -> bool:
    """True when the chain names storage, credentials or the network (by exception class and status):
    a read that failed because S3 denied access, throttled or could not be reached says nothing about
    the file, so it is never an input error, even when Spark wraps it in FAILED_READ_FILE."""
    from wapflow.spark import errors as spark_errors

    return spark_errors.classify(exc, doing="reading the source files") is not None


def input_error_from_spark(
    exc: BaseException,
    sources: Sequence[FileIdentity],
    *,
    fmt: str | None = None,
    options: dict[str, str] | None = None,
) -> InputError | None:
    """Spark's failure to read or parse the run's files as an InputError naming the file, else None.

    Recognised by Spark's error conditions, not by message text: FAILED_READ_FILE.* (which carries
    the file's path), MALFORMED_RECORD_IN_PARSING.*, MALFORMED_CSV_RECORD, CANNOT_PARSE_JSON_FIELD,
    INVALID_JSON_RECORD_TYPE, UNABLE_TO_INFER_SCHEMA, PATH_NOT_FOUND, parquet conversion errors and
    Spark's CSV header check. A failure naming a file that is not one of `sources` (a warehouse
    file; AccessDenied on the lake) is not an input error: None, as is anything else. Link paths are
    mapped back to the real files; for local files the line (and CSV column) of the bad record is
    looked up. `fmt` and `options` (the table's read_options) make the message precise.
    """
    causes = _causes(exc)
    if not causes or _not_the_files_fault(exc):
        return None
    text = "\n".join(c.message for c in causes)
    read = next((c for c in causes if c.cond and c.cond.startswith("FAILED_READ_FILE")), None)
    parse = next((c for c in causes if c.cond and c.cond.split(".")[0] in _PARSE), None)
    header = next((c for c in causes if "CSV header does not conform to the schema" in c.message), None)
    other = next((c for c in causes if c.cond and c.cond.split(".")[0] in _READ_ONLY), None)
    missing = next((c for c in causes if c.cond == "PATH_NOT_FOUND"), None)
    if not (read or parse or header or other or missing):
        return None
    path = None
    for c in (read, missing):
        if c is not None:
            path = c.params.get("path") or next(iter(_FILE_RX.findall(c.message)), None)
            if path:
                break
    src = source_for_path(path, sources) if path else None
    if path and src is None and (read or missing):
        return None  # a file Spark failed to read that is not one of this run's sources
    if src is None:
        named = {id(s): s for s in sources if s.uri in text}
        for m in _LINK_RX.finditer(text):
            linked = source_for_path(m.group(0), sources)
            if linked is not None:
                named[id(linked)] = linked
        src = next(iter(named.values())) if len(named) == 1 else None
    fmt = (fmt or "").lower()
    kind = fmt.upper() or "input"
    target = src if src is not None else (sources[0] if len(sources) == 1 else None)
    if target is not None:
        files = target.uri
    else:
        files = (
            f"one of the {len(sources)} {kind} files ("
            + ", ".join(s.uri for s in sources[:3])
            + (", ..." if len(sources) > 3 else "")
            + ")"
        )
    root = next((c for c in reversed(causes) if _first_line(c.message)), causes[-1])
    detail = _clean(_unlink_text(_first_line(root.message), sources))
    fix = "fix or re-export the file; nothing was published"
    if header is not None:
        msg = _clean(_unlink_text(header.params.get("msg", header.message), sources)).replace("\n", " ")
        return InputError(f"the CSV header of {files} does not match the columns read ({msg})", hint=fix)
    value = _value_error(causes)
    if value is not None:
        field, val, typ = value
        found = (
            _find_value(target, fmt, field, val, options or {})
            if target is not None and fmt in ("csv", "json")
            else None
        )
        at = f" at line {found[0]}" if found else ""
        field = field or (found[1] if found else None)
        col = f" in column {field!r}" if field else ""
        as_type = f", which is not a valid {typ.lower()}" if typ else ""
        return InputError(
            f"could not parse {files} as {kind}: value {val!r}{col}{at}{as_type} ({detail})",
            hint="fix the value in the file, or change the column's type in the table; nothing was published",
        )
    if parse is not None:
        csv_rec = next((c for c in causes if c.cond == "MALFORMED_CSV_RECORD"), None)
        record = (csv_rec.params.get("badRecord") if csv_rec else None) or parse.params.get("badRecord") or ""
        raw = bool(record) and not record.startswith("[") and record != "_corrupt_record"
        line = _find_line(target, record) if (target is not None and raw) else None
        at = f" at line {line}" if line else ""
        if csv_rec is not None:
            return InputError(
                f"{files} has a malformed CSV record{at}: {_short(record)} (not one value per header column)",
                hint="fix or re-export the file: every row needs one value per header column; a quoted value "
                'with a line break needs read_options = { multiLine = "true" }',
            )
        if parse.cond == "INVALID_JSON_RECORD_TYPE":
            return InputError(
                f"{files} has a JSON record that is not an object{at}", hint="JSON lines files hold one object per line"
            )
        shown = f": {_short(record)}" if raw else ""
        return InputError(f"could not parse {files} as {kind}{at}{shown} ({detail})", hint=fix)
    if missing is not None and read is None:
        return InputError(
            f"source file {files} disappeared before Spark read it", hint="run again once the file is back"
        )
    if read is not None and read.cond and read.cond.endswith("CANNOT_READ_FILE_FOOTER"):
        return InputError(
            f"{files} is not a valid parquet file (Spark cannot read its footer)",
            hint="re-export or re-upload the file",
        )
    if other is not None and other.cond == "UNABLE_TO_INFER_SCHEMA":
        return InputError(
            f"Spark found no data in {files} ({kind})", hint="check that the files hold data in the declared format"
        )
    return InputError(
        f"could not read {files} as {kind}: {detail}",
        hint="check that the file is complete and in the declared format; nothing was published",
    )
