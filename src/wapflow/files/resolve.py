"""A run's files: what the user named (paths, folders, globs, S3 URIs), resolved to the files it reads.

What you name is what is read:

- A path that exists is read as that file (or folder), whatever characters it contains:
  `batch[1].parquet` is a name, not a pattern. Only text that names nothing is a glob (Python's glob
  rules: `*`, `?`, `[...]`, recursive `**`; files only). S3 keys follow the same rule.
- A folder (or S3 prefix) reads the data files under it, recursively. Spark/Hadoop bookkeeping files
  are skipped and reported (`RunFiles.skipped`, e.g. "skipped 1 bookkeeping file: _SUCCESS"):
  `_SUCCESS`, `_committed_*`, `_started_*`, `_metadata`, `_common_metadata`, `*.crc`, dotfiles such
  as `.DS_Store`, and the folders `_temporary`, `_spark_metadata` and dot-folders. A glob that matches
  bookkeeping files skips them the same way. Any other file named or matched is read, or the run
  fails naming it (a `*._COPYING_` file met in a listing is an unfinished copy: refused). The
  listing itself is wapflow.storage's (Storage.scan), the same `wap storage ls` shows, so every
  file of a run is the FileIdentity (uri, size, version) a listing gives for it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from wapflow.errors import ConfigError, InputError, MissingInput
from wapflow.files.access import is_uri
from wapflow.files.spark_paths import s3_hidden_error
from wapflow.storage import Storage, is_s3_uri
from wapflow.storage.files import FileIdentity, Listing, SkippedFile, bookkeeping, glob_literal_prefix, spark_hides
from wapflow.storage.settings import parse_s3_uri


class RunFiles(list[FileIdentity]):
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


def _marker_error(uri: str, reason: str) -> InputError:
    parent = uri.rstrip("/").rsplit("/", 1)[0] or "/"
    return InputError(
        f"{uri} is a Spark/Hadoop {reason}, not a data file",
        hint=f"pass its folder ({parent}) to read the data files beside it (bookkeeping files are skipped)",
    )


def resolve_files(patterns: list[str], storage: Storage | None = None) -> RunFiles:
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
        if is_uri(pat) and not is_s3_uri(pat):
            files.append(FileIdentity(pat, None))
            continue
        listing = store.scan(pat, what="source file")
        files.extend(_run_files(listing, pat, store))
        skipped.extend(listing.skipped)
    seen: set[str] = set()
    unique: list[FileIdentity] = []
    for s in files:
        key = os.path.realpath(s.uri) if not is_uri(s.uri) else s.uri
        if key not in seen:
            seen.add(key)
            unique.append(s)
    return RunFiles(unique, list({k.uri: k for k in skipped}.values()))


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
                raise s3_hidden_error(f.uri)
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
        return MissingInput(
            f"no object matches {pat!r} at {storage.s3.settings.describe_endpoint()}",
            hint=f"check the pattern; `wap storage ls {loc.scheme}://{loc.bucket}/"
            f"{glob_literal_prefix(loc.key).rsplit('/', 1)[0]}` lists what is there",
        )
    n = listing.folders
    extra = f" (it matches {n} folder(s): pass a folder itself to read the files in it)" if n else ""
    return MissingInput(f"no file matches {pat!r}{extra}", hint="check the path and the glob pattern")
