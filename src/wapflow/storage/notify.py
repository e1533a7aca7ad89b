"""Local folders' change events (Linux inotify, through ctypes): `wap watch` wakes when a file lands in a
watched folder instead of finding it at its next listing.

Events only say *when* to list, never *what* to ingest: the listing that follows is the same one the
schedule makes (so a missed or overflowed event costs at most one listing interval, never a file), and on a
system without inotify, or with its limits reached, the watch polls as before. A file counts as landed when
it is closed after writing or renamed in (the atomic way to land one); a folder made inside a watched one
is watched too.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import select
import struct
import sys
from pathlib import Path

from wapflow.storage.files import glob_base, has_glob, local_text

_CLOSE_WRITE = 0x00000008
_MOVED_TO = 0x00000080
_CREATE = 0x00000100
_Q_OVERFLOW = 0x00004000
_IGNORED = 0x00008000
_ISDIR = 0x40000000
_MASK = _CLOSE_WRITE | _MOVED_TO | _CREATE
_NONBLOCK = os.O_NONBLOCK
_CLOEXEC = 0o2000000
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (struct inotify_event)
MAX_FOLDERS = 2000  # per watcher: a deeper tree is polled (inotify watches are a per-user kernel limit)


def folder_of(location: str) -> Path | None:
    """The local folder whose changes can announce new files of a source location (its folder, a file's
    folder, a glob's fixed part); None for object stores."""
    if "://" in location and not location.startswith("file://"):
        return None
    text = local_text(location)
    path = Path(text)
    if not path.is_dir() and has_glob(text):
        path = Path(glob_base(text))
    elif not path.is_dir():
        path = path.parent
    return path.resolve() if path.is_dir() else None


class FolderEvents:
    """inotify watches on named folders (and the folders below them); `wait` returns the names whose folders
    saw a file land, or an empty set when the timeout ran out. `available` is False where inotify is not
    (not Linux, no libc symbol, the kernel's limits reached): the caller then polls."""

    def __init__(self) -> None:
        self._fd = -1
        self._wds: dict[int, tuple[str, Path]] = {}
        self._count: dict[str, int] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._libc = None
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
                fd = libc.inotify_init1(_NONBLOCK | _CLOEXEC)
            except (OSError, AttributeError):
                fd = -1
            if fd >= 0:
                self._fd, self._libc = fd, libc

    @property
    def available(self) -> bool:
        return self._fd >= 0

    def watch(self, name: str, folder: Path) -> bool:
        """Watch `folder` and the folders below it for source `name`; False when it could not be (fully)."""
        if not self.available:
            return False
        for dirpath, dirnames, _ in os.walk(folder):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "_"))]
            if not self._add(name, Path(dirpath)):
                return False
        return True

    def _add(self, name: str, folder: Path) -> bool:
        if self._count.get(name, 0) >= MAX_FOLDERS or self._libc is None:
            return False
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(folder), _MASK)
        if wd < 0:
            return False  # ENOSPC (the user's watch limit), EACCES...: this folder is polled
        if wd not in self._wds:
            self._count[name] = self._count.get(name, 0) + 1
        self._wds[wd] = (name, folder)
        return True

    def wake(self) -> None:
        """End a `wait` now (a stop signal): safe from a signal handler."""
        with contextlib.suppress(OSError):  # the pipe is full: a wake-up is already pending
            os.write(self._wake_w, b"x")

    def wait(self, timeout: float) -> set[str]:
        """Block until a file lands in a watched folder, `wake` is called or `timeout` seconds pass."""
        fds = [self._wake_r] + ([self._fd] if self.available else [])
        try:
            ready, _, _ = select.select(fds, [], [], max(timeout, 0.0))
        except InterruptedError:
            return set()
        names: set[str] = set()
        if self._wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_r, 512):
                    pass
        if self._fd in ready:
            names |= self._drain()
        return names

    def _drain(self) -> set[str]:
        names: set[str] = set()
        while True:
            try:
                buf = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                return names
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                raise
            pos = 0
            while pos + _HEADER.size <= len(buf):
                wd, mask, _cookie, length = _HEADER.unpack_from(buf, pos)
                raw = buf[pos + _HEADER.size : pos + _HEADER.size + length].rstrip(b"\0")
                pos += _HEADER.size + length
                if mask & _Q_OVERFLOW:
                    names |= set(self._count)  # events were lost: list every source
                    continue
                owner = self._wds.get(wd)
                if owner is None:
                    continue
                if mask & _IGNORED:
                    del self._wds[wd]  # the folder went away
                    continue
                name, folder = owner
                if mask & _ISDIR:
                    if mask & (_CREATE | _MOVED_TO) and not raw.startswith((b".", b"_")):
                        self.watch(name, folder / os.fsdecode(raw))
                        names.add(name)  # files may have landed in it before its watch existed
                    continue
                if mask & (_CLOSE_WRITE | _MOVED_TO):
                    names.add(name)

    def close(self) -> None:
        for fd in (self._fd, self._wake_r, self._wake_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._wake_r = self._wake_w = -1
        self._wds.clear()
