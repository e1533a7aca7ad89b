"""File identities and the local-folder store: the same listing for folders and for S3 prefixes.

A listing returns what an exactly-once ingestion needs to decide whether a file is new: where it is
(uri, key), how big it is, and a version id that changes when the content is replaced (the S3 ETag;
for local files an id made of the modification time in nanoseconds and the size).
"""

from __future__ import annotations

import glob as _glob
import os
import re
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from wapflow.errors import InputError

GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class FileIdentity:
    """One listed file. `etag` changes when the file's content is replaced."""

    uri: str  # what Spark reads: s3://bucket/key, or an absolute local path
    bucket: str | None  # None for local files
    key: str  # the object key; for local files the absolute path
    size: int
    etag: str  # S3 ETag (quotes stripped), or "mtime-<ns>-<size>" for local files
    modified: datetime  # UTC

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["modified"] = self.modified.isoformat()
        return d


# For annotations inside classes whose `list` method would shadow the builtin.
FileList = list[FileIdentity]


class Store(Protocol):
    """What both stores offer; Storage picks one by the location's scheme."""

    def list(self, location: str) -> list[FileIdentity]:
        """Files under a folder/prefix (recursively), matching a glob, or the one file named."""
        ...


def has_glob(text: str) -> bool:
    return bool(GLOB_CHARS & set(text))


def is_hidden(name: str) -> bool:
    """Spark skips files whose name starts with '_' or '.' (_SUCCESS, .crc); so do listings."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    return base.startswith(("_", "."))


def glob_literal_prefix(pattern: str) -> str:
    """The part before the first glob character: an S3 listing only needs to scan that prefix."""
    for i, ch in enumerate(pattern):
        if ch in GLOB_CHARS:
            return pattern[:i]
    return pattern


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


def local_identity(path: Path) -> FileIdentity:
    st = path.stat()
    p = str(path.resolve())
    return FileIdentity(
        uri=p,
        bucket=None,
        key=p,
        size=st.st_size,
        etag=f"mtime-{st.st_mtime_ns}-{st.st_size}",
        modified=datetime.fromtimestamp(st.st_mtime, tz=timezone.utc),
    )


class LocalStore:
    """Folders on a local (or mounted) file system."""

    def list(self, location: str) -> list[FileIdentity]:
        text = os.path.expanduser(location[len("file://"):] if location.startswith("file://") else location)
        if has_glob(text):
            paths = [Path(p) for p in _glob.glob(text, recursive=True)]
            files = [p for p in paths if p.is_file() and not is_hidden(p.name)]
        else:
            root = Path(text)
            if not root.exists():
                raise InputError(f"{location} does not exist", hint="check the path")
            if root.is_file():
                files = [root]
            else:
                files = [
                    p
                    for p in root.rglob("*")
                    if p.is_file() and not any(is_hidden(part) for part in p.relative_to(root).parts)
                ]
        return sorted((local_identity(p) for p in files), key=lambda f: f.uri)
