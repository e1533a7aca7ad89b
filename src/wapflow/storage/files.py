"""File identities, the rules for which listed files are data, and the local-folder store.

One listing serves `wap storage ls` and a run's file resolution (wapflow.files.resolve), so what
ls shows is what a run reads, and both record the same FileIdentity: what an exactly-once ledger
keys on to decide whether a file is new.
"""

from __future__ import annotations

import difflib
import errno
import glob as _glob
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from wapflow.errors import InputError, MissingInput

GLOB_CHARS = frozenset("*?[")
COPYING_SUFFIX = "._COPYING_"  # what `hadoop fs -put` / `hdfs dfs -cp` name a file while it is written
S3_URI_PREFIXES = ("s3://", "s3a://")
# A producer's delivery manifest beside its data files (what it declares it sent, read by the control_totals
# check): `_manifest.json` / `_manifest.csv` for a folder, `<file>.manifest.json` / `.manifest.csv` for one file.
# Never data: listings skip them, so a folder's run does not read its own manifest as rows.
MANIFEST_NAMES = ("_manifest.json", "_manifest.csv")
MANIFEST_SUFFIXES = (".manifest.json", ".manifest.csv")


def is_manifest_name(name: str) -> bool:
    """A delivery manifest's file name (MANIFEST_NAMES, or ending in one of MANIFEST_SUFFIXES)."""
    return name in MANIFEST_NAMES or name.endswith(MANIFEST_SUFFIXES)


@dataclass(frozen=True)
class FileIdentity:
    """One file, local or on S3: where it is, how big, and which state of its content.

    `version` changes when the content is replaced, so (uri, size, version) names one state of one
    file; `modified` is shown to people and takes no part in equality or fingerprints.

    - S3: the ETag, quotes stripped. It changes on every overwrite with other bytes; the same bytes
      uploaded again in one part keep it (the same file, rightly). The VersionId of a versioned
      bucket is not used: list_objects_v2 does not return it, so a listing would need a HEAD (or
      ListObjectVersions) per object, and a listing and a run would disagree on the identity.
    - Local: `mtime-<ns>-<size>`, from one stat (about 2 us). A content hash would read every byte
      (sha256 runs at about 1.2 GB/s here with the file in the page cache, slower from disk), and a
      run reads the file again anyway. Any rewrite moves the mtime, so a rewrite of the same size
      is still a new version; the price is that `touch` (or a copy that sets a new mtime) makes an
      unchanged file "new", and a tool that restores an old mtime on a same-size replacement
      (`rsync -t`, `cp -p` of another file) hides the replacement.
    - Other URIs (hdfs://, gs://, ...), which wapflow cannot stat: size and version are None.
    """

    uri: str  # s3://bucket/key (or s3a://), an absolute local path as named (symlinks not resolved), or a URI
    size: int | None  # bytes; None when it cannot be known without reading
    version: str | None = None
    modified: datetime | None = field(default=None, compare=False)  # UTC

    @property
    def bucket(self) -> str | None:
        """The S3 bucket; None for local files."""
        if not self.uri.startswith(S3_URI_PREFIXES):
            return None
        return self.uri.partition("://")[2].partition("/")[0]

    @property
    def key(self) -> str:
        """The S3 object key; for a local file its path."""
        if not self.uri.startswith(S3_URI_PREFIXES):
            return self.uri
        return self.uri.partition("://")[2].partition("/")[2]

    def to_dict(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "size": self.size,
            "version": self.version,
            "modified": self.modified.isoformat() if self.modified is not None else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FileIdentity:
        """Also reads run records written before `modified` existed ({uri, size, version})."""
        modified = d.get("modified")
        return cls(
            uri=str(d["uri"]),
            size=None if d.get("size") is None else int(d["size"]),
            version=None if d.get("version") is None else str(d["version"]),
            modified=datetime.fromisoformat(modified) if modified else None,
        )


@dataclass(frozen=True)
class SkippedFile:
    """A bookkeeping file (or folder, uri ending in '/') a folder listing or a glob met and did not list."""

    uri: str
    reason: str  # "job marker", "checksum file", "hidden file", "uncommitted Spark output folder", ...

    def to_dict(self) -> dict[str, str]:
        return {"uri": self.uri, "reason": self.reason}


@dataclass
class Listing:
    """What one location holds: data files (sorted by uri) and the bookkeeping files skipped.

    `kind` says how the location was taken: the one file it names, a folder (prefix) read
    recursively, or a glob; `folders` counts folders a local glob matched (a glob lists files only).
    """

    kind: Literal["file", "folder", "glob"]
    files: list[FileIdentity]
    skipped: list[SkippedFile] = field(default_factory=list)
    folders: int = 0

    def __post_init__(self) -> None:
        self.files.sort(key=lambda f: f.uri)
        self.skipped = list({s.uri: s for s in self.skipped}.values())  # one entry per skipped file or folder


# For annotations inside classes whose `list` method would shadow the builtin.
FileList = list[FileIdentity]


class Store(Protocol):
    """What both stores offer; Storage picks one by the location's scheme."""

    def scan(self, location: str, *, what: str = "") -> Listing:
        """Data files and skipped bookkeeping files under a folder/prefix, matching a glob, or the one file named."""
        ...

    def list(self, location: str) -> list[FileIdentity]:
        """The data files of scan()."""
        ...


# --- names: what is data, what is bookkeeping --------------------------------------------------


def spark_hides(name: str) -> bool:
    """Spark's hidden-file rule (HadoopFSUtils.shouldFilterOutPathName), applied even to named files."""
    exclude = (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith(COPYING_SUFFIX)
    include = name.startswith(("_common_metadata", "_metadata"))
    return exclude and not include


def bookkeeping(name: str) -> tuple[str, bool] | None:
    """(reason, never data) for a Spark/Hadoop bookkeeping file name, None for a data file.

    Markers (never data) are errors when named explicitly; hidden files are read when named.
    """
    if name == "_SUCCESS":
        return "job marker", True
    if name.startswith(("_committed_", "_started_")):
        return "commit marker", True
    if name in ("_metadata", "_common_metadata"):
        return "parquet summary file", True
    if name.endswith(".crc"):
        return "checksum file", True
    if is_manifest_name(name):
        return "delivery manifest", False
    if name.endswith(COPYING_SUFFIX):
        return None  # an unfinished copy: never skipped quietly (see unfinished_copy_error)
    if name.startswith("."):
        return "hidden file", False
    return None


def bookkeeping_folder(name: str) -> str | None:
    """Why a folder of this name holds no data (its files are skipped), None for a data folder."""
    if name == "_temporary":
        return "uncommitted Spark output folder"
    if name == "_spark_metadata":
        return "Spark streaming metadata folder"
    if name.startswith("."):
        return "hidden folder"
    return None


def unfinished_copy_error(uri: str, what: str) -> InputError:
    return InputError(
        f"{uri} is still being copied (its name ends in {COPYING_SUFFIX}), so {what} is not complete yet",
        hint="wait until the copy has finished and run again, or name the finished files explicitly",
    )


def skipped_as_bookkeeping(uri: str, rel: str, what: str) -> SkippedFile | None:
    """Why a listed file is not data (`rel`: its path below the listed folder), None for data.

    An unfinished copy raises: the location is not complete, and skipping it would lose it.
    """
    parts = rel.split("/")
    for i, part in enumerate(parts[:-1]):
        reason = bookkeeping_folder(part)
        if reason is not None:
            return SkippedFile(uri[: len(uri) - len(rel)] + "/".join(parts[: i + 1]) + "/", reason)
    name = parts[-1]
    if name.endswith(COPYING_SUFFIX):
        raise unfinished_copy_error(uri, what)
    mark = bookkeeping(name)
    return SkippedFile(uri, mark[0]) if mark is not None else None


# --- globs --------------------------------------------------------------------------------------


def has_glob(text: str) -> bool:
    return bool(GLOB_CHARS & set(text))


def glob_literal_prefix(pattern: str) -> str:
    """The part before the first glob character: an S3 listing only needs to scan that prefix."""
    for i, ch in enumerate(pattern):
        if ch in GLOB_CHARS:
            return pattern[:i]
    return pattern


def local_text(location: str) -> str:
    """A local location as a path: `file://` dropped, `~` expanded."""
    return os.path.expanduser(location[len("file://") :] if location.startswith("file://") else location)


def glob_base(pattern: str) -> str:
    """The folder a local glob searches from: the folder of its fixed part (absolute)."""
    fixed = glob_literal_prefix(pattern)
    return os.path.abspath((fixed.rsplit("/", 1)[0] or "/") if "/" in fixed else ".")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Shell-style matching on '/'-separated keys, as Python's glob(recursive=True) does on paths.

    '*' and '?' stay within one path segment, '**' crosses segments ('a/**/b' also matches 'a/b'),
    '[abc]' / '[!abc]' are character classes.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end < 0:
                out.append(re.escape(c))
                i += 1
                continue
            body = pattern[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z")


# --- local files --------------------------------------------------------------------------------


def local_identity(path: str | os.PathLike[str]) -> FileIdentity:
    """The identity of a local file (symlinks followed for size and mtime, not for the uri)."""
    st = os.stat(path)
    return FileIdentity(
        uri=os.path.abspath(path),
        size=st.st_size,
        version=f"mtime-{st.st_mtime_ns}-{st.st_size}",
        modified=datetime.fromtimestamp(st.st_mtime_ns / 1e9, tz=UTC),
    )


def broken_link_error(text: str) -> InputError:
    try:
        os.stat(text)
        problem = "cannot be read"
    except OSError as e:
        if e.errno == errno.ELOOP:
            problem = "is a symbolic link loop"
        else:
            problem = f"is a symbolic link to {os.readlink(text)}, which does not exist"
    return InputError(f"{text} {problem}", hint="fix or remove the link, or name the file it should point to")


def _nearby(path: Path) -> str:
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f" (folder {parent} does not exist either)"
    close = difflib.get_close_matches(path.name, os.listdir(parent), n=1, cutoff=0.7)
    return f" (did you mean {parent / close[0]}?)" if close else ""


class LocalStore:
    """Folders on a local (or mounted) file system.

    A path that exists is that file or folder, whatever characters it holds (`batch[1].parquet` is
    a name); only text that names nothing is a glob (Python's rules, recursive `**`, files only).
    """

    def scan(self, location: str, *, what: str = "") -> Listing:
        """`what` prefixes the message for a missing path ("source file x does not exist")."""
        text = local_text(location)
        path = Path(text)
        if path.is_dir():
            return self._walk(path, f"folder {text}")
        if path.is_file():
            return Listing("file", [local_identity(text)])
        if os.path.lexists(text):
            raise broken_link_error(text)
        if has_glob(text):
            return self._glob(text, repr(location))
        hint = "check the path" + ("" if path.is_absolute() else f" (relative to {Path.cwd()})")
        raise MissingInput(f"{what + ' ' if what else ''}{text} does not exist{_nearby(path)}", hint=hint)

    def list(self, location: str) -> list[FileIdentity]:
        return self.scan(location).files

    @staticmethod
    def _walk(root: Path, what: str) -> Listing:
        """Recursively, following folder links once each (a loop or a second link adds nothing)."""
        files: list[FileIdentity] = []
        skipped: list[SkippedFile] = []
        visited: set[str] = set()
        for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
            real = os.path.realpath(dirpath)
            if real in visited:
                dirnames[:] = []
                continue
            visited.add(real)
            keep = []
            for d in sorted(dirnames):
                reason = bookkeeping_folder(d)
                if reason is not None:
                    skipped.append(SkippedFile(os.path.abspath(os.path.join(dirpath, d)) + "/", reason))
                else:
                    keep.append(d)
            dirnames[:] = keep
            for name in sorted(filenames):
                p = os.path.join(dirpath, name)
                skip = skipped_as_bookkeeping(os.path.abspath(p), name, what)
                if skip is not None:
                    skipped.append(skip)
                elif not os.path.isfile(p):
                    raise broken_link_error(p)
                else:
                    files.append(local_identity(p))
        return Listing("folder", files, skipped)

    @staticmethod
    def _glob(text: str, what: str) -> Listing:
        base = glob_base(text)
        files: list[FileIdentity] = []
        skipped: list[SkippedFile] = []
        folders = 0
        for p in sorted(_glob.glob(text, recursive=True)):
            if os.path.isdir(p):
                folders += 1
                continue
            uri = os.path.abspath(p)
            skip = skipped_as_bookkeeping(uri, uri[len(base) :].lstrip("/"), what)
            if skip is not None:
                skipped.append(skip)
            elif os.path.isfile(p):
                files.append(local_identity(p))
            elif os.path.lexists(p):
                raise broken_link_error(p)
        return Listing("glob", files, skipped, folders)
