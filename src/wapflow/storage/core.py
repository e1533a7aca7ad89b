"""One entry point for files wherever they are: local folders and S3 buckets behind one interface.

A Lakehouse builds its Storage from its wap.toml (Lakehouse.storage) and passes it to source
resolution; `wap storage ls` builds one from the [s3] section alone. The S3 client is made on first
use, so local-only work never imports boto3.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import os
from pathlib import Path

from wapflow.errors import ConfigError
from wapflow.storage.files import FileIdentity, Listing, LocalStore, Store
from wapflow.storage.s3 import S3Store
from wapflow.storage.settings import S3Config, is_s3_uri


class Storage:
    """Local folders always; S3 when the configuration enables it (warehouse on S3 or an [s3] section)."""

    def __init__(self, s3: S3Config | None = None, *, s3_enabled: bool = True) -> None:
        self.s3_settings = s3 or S3Config()
        self.s3_enabled = s3_enabled
        self.local = LocalStore()
        self._s3: S3Store | None = None

    @property
    def s3(self) -> S3Store:
        if not self.s3_enabled:
            raise ConfigError(
                "s3:// locations need S3 support, which this configuration does not switch on",
                hint="add an [s3] section to wap.toml (an empty one uses the standard AWS credential chain), "
                "so that the S3 jars are put on Spark's classpath",
            )
        if self._s3 is None:
            self._s3 = S3Store(self.s3_settings)
        return self._s3

    def store_for(self, location: str) -> Store:
        if is_s3_uri(location):
            return self.s3
        if "://" in location and not location.startswith("file://"):
            raise ConfigError(
                f"cannot list {location}: only local paths and s3:// URIs are supported",
                hint="e.g. s3://landing-bucket/2026/11/ or ./landing/",
            )
        return self.local

    def scan(self, location: str, *, what: str = "") -> Listing:
        """Data files and skipped bookkeeping files under a folder/prefix, matching a glob, or the one file named."""
        return self.store_for(location).scan(location, what=what)

    def list(self, location: str) -> list[FileIdentity]:
        """File identities under a folder/prefix, matching a glob, or of the one file named."""
        return self.store_for(location).list(location)

    def read_bytes(self, location: str) -> bytes:
        """The whole content of one small file: a local path (or file: URI) or an s3:// object."""
        if is_s3_uri(location):
            return self.s3.read(location)
        self.store_for(location)  # other schemes: the same ConfigError as listing them
        return _local(location).read_bytes()

    def read_if_exists(self, location: str) -> bytes | None:
        """read_bytes, or None when nothing is at `location` (a manifest a producer may not have sent)."""
        if is_s3_uri(location):
            return self.s3.read_if_exists(location)
        try:
            return self.read_bytes(location)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def tail(self, location: str, n: int = 65536) -> bytes:
        """The last n bytes of one file (its trailer line), a ranged read on S3."""
        if is_s3_uri(location):
            return self.s3.read_range(location, f"-{n}")
        self.store_for(location)
        with _local(location).open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read()

    def user_metadata(self, location: str) -> dict[str, str] | None:
        """What the producer attached to one file: an S3 object's user metadata (x-amz-meta-*), a local file's
        `user.*` extended attributes (without the prefix); names lower-cased. None when there is no such file."""
        if is_s3_uri(location):
            return self.s3.user_metadata(location)
        self.store_for(location)
        path = _local(location)
        try:
            names = os.listxattr(path)
        except FileNotFoundError:
            return None
        except OSError:  # a filesystem without extended attributes holds none
            return {}
        out = {}
        for name in names:
            if name.startswith("user."):
                with contextlib.suppress(OSError):
                    out[name.removeprefix("user.").lower()] = os.getxattr(path, name).decode("utf-8", "replace")
        return out

    def digest(self, location: str, algorithm: str) -> str:
        """The hex digest ("sha256", "md5") of one file's content, read in 1 MiB chunks (any size)."""
        h = hashlib.new(algorithm)
        if is_s3_uri(location):
            for chunk in self.s3.chunks(location):
                h.update(chunk)
            return h.hexdigest()
        self.store_for(location)
        with _local(location).open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return h.hexdigest()

    def secret_values(self) -> builtins.list[str]:
        return self.s3_settings.secret_values()


def _local(location: str) -> Path:
    """A local path, or a file: URI, as a path."""
    return Path(location.removeprefix("file://").removeprefix("file:"))
