"""PyIceberg's FileIO over wapflow's Storage: Iceberg's manifests read with wap.toml's own storage settings.

wapflow.lakehouse.manifests reads manifest lists and manifests with PyIceberg's Avro readers; the bytes come
through wapflow.storage.Storage (local files, s3:// with [s3]'s endpoint and credentials), the one owner of
how this process reaches the warehouse, as the metadata JSON does (wapflow.lakehouse.metadata). Read-only:
imported only where PyIceberg is installed.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile

if TYPE_CHECKING:
    from wapflow.storage import Storage


class StorageInputFile(InputFile):
    """One metadata file, read whole on open (manifest lists and manifests are small)."""

    def __init__(self, location: str, storage: Storage) -> None:
        super().__init__(location)
        self.storage = storage
        self._data: bytes | None = None

    def _bytes(self) -> bytes:
        if self._data is None:
            self._data = self.storage.read_bytes(self.location)
        return self._data

    def __len__(self) -> int:
        return len(self._bytes())

    def exists(self) -> bool:
        try:
            self._bytes()
        except FileNotFoundError:
            return False
        return True

    def open(self, seekable: bool = True) -> InputStream:
        return io.BytesIO(self._bytes())


class StorageFileIO(FileIO):
    """Reads through wapflow's Storage; writing is not what wapflow does through it (commits go through the
    catalog: Spark, or PyIceberg's own FileIO in wapflow.lakehouse.pyiceberg_client)."""

    def __init__(self, storage: Storage) -> None:
        super().__init__()
        self.storage = storage

    def new_input(self, location: str) -> InputFile:
        return StorageInputFile(location, self.storage)

    def new_output(self, location: str) -> OutputFile:
        raise PermissionError(f"wapflow reads Iceberg metadata through its Storage, it does not write {location}")

    def delete(self, location: str | InputFile | OutputFile) -> None:
        raise PermissionError(f"wapflow reads Iceberg metadata through its Storage, it does not delete {location}")
