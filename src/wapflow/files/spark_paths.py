"""What Spark is given for a run's files: exact paths, and links for local names it would mangle.

Spark is given exact paths with its own globbing off (reader option `__globPaths__ = false`). Its
hidden-file filter (names starting with `_` or `.`, or ending in `._COPYING_`) cannot be switched
off and drops even a file named explicitly, and Hadoop's local file system cannot open names with
`:`. So a local file whose path holds anything but `[A-Za-z0-9._+-]` (or a part starting with `_`,
`.` or `-`) is given to Spark as a symlink with a safe name (`f000003.parquet`) in a private
temporary folder (`SparkInputs`), removed after the write; Spark's messages naming a link are
mapped back to the real file (`file_for_path`, `unlink_text`). A local file with a Hadoop `.crc`
sidecar is linked too, so that a stale checksum cannot fail the read. S3 objects cannot be linked:
with globbing off every character reads correctly, but a name Spark hides is refused, asking to
rename it (see wapflow.writing.read._load for the S3 keys Spark 4.1 mishandles with globbing off).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import tempfile
from collections.abc import Sequence
from urllib.parse import unquote

from wapflow.errors import InputError
from wapflow.files.access import is_uri
from wapflow.storage import is_s3_uri
from wapflow.storage.files import FileIdentity, spark_hides

_LINK_PREFIX = "wapflow-read-"
_LINK_RX = re.compile(
    r"(?:file:)?/*[^\s'\"\[\]]*?" + re.escape(_LINK_PREFIX) + r"[A-Za-z0-9_]+/f(\d{6,})(?:\.[A-Za-z0-9]+)*"
)
_SAFE_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\Z")
_SAFE_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,12}\Z")
_implicit: list[SparkInputs] = []


def s3_hidden_error(uri: str) -> InputError:
    """An S3 object Spark would skip although it was named: it cannot be linked, so it must be renamed."""
    bucket_key, name = uri.rsplit("/", 1)
    clean = name.lstrip("_.")
    if clean.endswith("._COPYING_"):
        clean = clean[: -len("._COPYING_")]
    return InputError(
        f"{uri} cannot be read by Spark: it treats names starting with '_' or '.' (or ending in ._COPYING_) "
        "as hidden files, even when named",
        hint=f"copy or rename the object to a name Spark reads, e.g. aws s3 mv {uri} {bucket_key}/{clean or 'data'}",
    )


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
    private folder `<tmp>/wapflow-read-*` (index = position in `files`, so error messages can be
    mapped back with the files alone); every other file is given as it is. Call close() (or leave
    the `with` block) after the write that reads the DataFrame, not before: Spark reads lazily.
    """

    def __init__(self, files: Sequence[FileIdentity]) -> None:
        self.files = list(files)
        self.folder: str | None = None
        self.links: dict[str, str] = {}  # link path -> real path
        try:
            self.paths = [self._path_for(i, s) for i, s in enumerate(self.files)]
        except BaseException:
            self.close()
            raise

    def _path_for(self, i: int, s: FileIdentity) -> str:
        if is_s3_uri(s.uri):
            if spark_hides(s.uri.rsplit("/", 1)[-1]):
                raise s3_hidden_error(s.uri)
            return s.uri
        if is_uri(s.uri):
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


def implicit_inputs(files: Sequence[FileIdentity]) -> SparkInputs:
    """A SparkInputs for a read whose caller does not close it: closed by release_implicit_inputs() or at exit."""
    inputs = SparkInputs(files)
    _implicit.append(inputs)
    return inputs


def release_implicit_inputs() -> None:
    """Remove the links of reads made without an explicit SparkInputs (also done at interpreter exit)."""
    while _implicit:
        _implicit.pop().close()


atexit.register(release_implicit_inputs)


# --- back from Spark's messages -----------------------------------------------------------------


def _norm_path(p: str) -> str:
    if p.startswith("file:"):
        p = "/" + p[len("file:") :].lstrip("/")
    if p.startswith("s3a://"):
        p = "s3://" + p[len("s3a://") :]
    return p.rstrip(".")


def file_for_path(path: str, files: Sequence[FileIdentity]) -> FileIdentity | None:
    """The file a path in a Spark message names: a link of SparkInputs, or the file itself."""
    m = _LINK_RX.search(path)
    if m:
        i = int(m.group(1))
        return files[i] if i < len(files) else None
    for cand in (path, unquote(path)):
        n = _norm_path(cand)
        for s in files:
            if _norm_path(s.uri) == n:
                return s
    return None


def linked_files(text: str, files: Sequence[FileIdentity]) -> list[FileIdentity]:
    """The files whose SparkInputs links a Spark message names."""
    out = []
    for m in _LINK_RX.finditer(text):
        linked = file_for_path(m.group(0), files)
        if linked is not None:
            out.append(linked)
    return out


def unlink_text(text: str, files: Sequence[FileIdentity]) -> str:
    """Spark's text with link paths replaced by the real file names."""

    def real(m: re.Match[str]) -> str:
        i = int(m.group(1))
        return files[i].uri if i < len(files) else m.group(0)

    return _LINK_RX.sub(real, text)
