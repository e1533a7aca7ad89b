"""Whether the process that names a run's local files may read them: what the warm engine's client checks.

The engine (wapflow.engine) reads a command's files with its own rights, which may be more than those of
the `wap` process that sent the command (one started earlier, or a caller whose capabilities were dropped).
So the client opens each local file a run names, and lists each folder, before handing the command over: a
file it cannot open, a folder it cannot list, is the error a run in that process gives
(wapflow.files.access.unreadable). An ingest or backfill is checked the same way over its source's local
location (the caller resolves it from wap.toml). The standard library only: this runs in every `wap run` the
engine serves; the bookkeeping rules (wapflow.storage.files) are read only for a file that does not open.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wapflow.errors import InputError

# The commands whose arguments name local files: `wap run TABLE SOURCE...`, `wap run-tables TABLE=SOURCE,...`.
SOURCE_COMMANDS = frozenset({"run", "run-tables"})
# The commands that read a [sources.NAME] location of wap.toml: `wap ingest NAME`, `wap backfill NAME`.
LOCATION_COMMANDS = frozenset({"ingest", "backfill"})
_GLOB_CHARS = frozenset("*?[")


def unreadable_source(argv: list[str], cwd: str, locate: Callable[[str], list[str]] | None = None) -> InputError | None:
    """The error for the first local file or folder named in a run's command line (argv: the command and its
    arguments), or in the location of the source an ingest or backfill names (`locate`: a source's name to its
    local locations, from wap.toml), that this
    process cannot open or list; None when it can read them all. An argument that names no local path (a
    table, an option's value, an S3 URI) is left to the command, and so is a configuration that does not load
    or names no such source (the command reports it)."""
    command = next((a for a in argv if not a.startswith("-")), None)
    names = [a for a in argv[argv.index(command) + 1 :] if not a.startswith("-")] if command else []
    if command == "run-tables":
        names = [s for a in names for s in a.partition("=")[2].split(",") if s]
    elif command in LOCATION_COMMANDS:
        names = locate(names[0]) if names and locate is not None else []
    elif command not in SOURCE_COMMANDS:
        return None
    for name in names:
        denied = _denied(name, cwd)
        if denied is not None:
            from wapflow.files.access import unreadable

            return unreadable(os.path.abspath(denied[0]), denied[1])
    return None


def _denied(name: str, cwd: str) -> tuple[str, str] | None:
    """(path, "file" or "folder") of the first file the run would read under `name` (a file, a folder or a
    glob) that this process cannot open, or folder it cannot list; None when there is none."""
    if "://" in name and not name.startswith("file://"):
        return None  # S3 and other URIs: read with the credentials the command sends along
    path = os.path.join(cwd, os.path.expanduser(name.removeprefix("file://")))
    if os.path.isdir(path):
        return _first_denied(_walked(path), path)
    if os.path.isfile(path):
        return None if _opens(path) else (path, "file")
    if _GLOB_CHARS & set(name) and not os.path.lexists(path):
        matched = (p for p in sorted(glob.glob(path, recursive=True)) if os.path.isfile(p))
        return _first_denied(((p, "file") for p in matched if not _opens(p)), None)
    return None


def _opens(path: str) -> bool:
    """Whether this process may open the file for reading: open() itself, as the run would (os.access asks
    with the real uid and misses a root without CAP_DAC_OVERRIDE)."""
    try:
        with open(path, "rb"):
            return True
    except PermissionError:
        return False
    except OSError:
        return True  # gone meanwhile, a loop...: the command says what is wrong with it


def _walked(root: str) -> Iterator[tuple[str, str]]:
    """(path, "file" or "folder") of each file under root this process cannot open and each folder it cannot
    list, following folder links once each (as the run's listing, wapflow.storage.files.LocalStore)."""
    failed: list[OSError] = []
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, onerror=failed.append, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        for name in filenames:
            p = os.path.join(dirpath, name)
            if os.path.isfile(p) and not _opens(p):
                yield p, "file"
        yield from _listing_denied(failed)
    yield from _listing_denied(failed)


def _listing_denied(failed: list[OSError]) -> Iterator[tuple[str, str]]:
    while failed:
        e = failed.pop()
        if isinstance(e, PermissionError) and e.filename:
            yield str(e.filename), "folder"


def _first_denied(denied: Iterable[tuple[str, str]], root: str | None) -> tuple[str, str] | None:
    """The first one the run would read: bookkeeping files and folders (skipped in a listing) left out."""
    for path, kind in denied:
        from wapflow.storage.files import bookkeeping, bookkeeping_folder

        rel = os.path.relpath(path, root) if root else os.path.basename(path)
        if rel == os.curdir:
            return path, kind  # the folder named itself
        *folders, name = rel.split(os.sep)
        if any(bookkeeping_folder(f) for f in folders):
            continue
        if (bookkeeping_folder(name) if kind == "folder" else bookkeeping(name)) is None:
            return path, kind
    return None
