"""Drive `wap` as users do (a real process per command) and read the lakehouse back independently.

The independent reader is PyIceberg on the same SQLite catalog: no Spark, no wapflow code, so a
test's verdict on main (snapshot id, rows, branches) does not depend on the code under test.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WAP = str(Path(sys.executable).parent / "wap")


@dataclass
class Proc:
    code: int
    stdout: str
    stderr: str

    @property
    def doc(self) -> dict[str, Any]:
        return json.loads(self.stdout)

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


# The JVMs of `wap` processes the tests start live for seconds: C1 alone compiles sooner than C1 + C2, and
# the serial collector starts no GC threads (about 25% less per `wap run` of a small file, measured here).
# Tests only: a long run of real data wants C2. The JVM prints "Picked up JAVA_TOOL_OPTIONS" on its own
# stderr, which a `wap` process sends to its log file.
BASE_FAST_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def fast_start_jvm() -> str:
    """JAVA_TOOL_OPTIONS of the tests' `wap` processes. Their driver JVMs also map wapflow's class archive
    (wapflow.lakehouse.class_archive: `wap setup`, which `make test` runs first, or use_class_archive)."""
    return BASE_FAST_START_JVM


_archive_maker: threading.Thread | None = None


def use_class_archive() -> None:
    """Make wapflow's JVM class archive in the background when `wap setup` has not (a plain `pytest`): the test
    worker goes on meanwhile, `wap` processes started before it is in place run without it (only slower), and
    later ones map it. Two workers at once: wapflow's lock lets one train, the other finds its archive."""
    global _archive_maker
    from wapflow.config import WapConfig
    from wapflow.lakehouse import class_archive, jvm

    java = jvm.find_java()
    if _archive_maker is not None or java is None or class_archive.path_for(WapConfig(), java).is_file():
        return
    trainer = [sys.executable, "-m", "wapflow.cli.train_archive"]
    _archive_maker = threading.Thread(
        target=class_archive.ensure, args=(WapConfig(), trainer), name="class-archive", daemon=True
    )
    _archive_maker.start()


def class_archive_done() -> None:
    """Wait for a background archive run of this process (at the end of the session: no JVM left behind)."""
    if _archive_maker is not None:
        _archive_maker.join()


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    e.setdefault("JAVA_TOOL_OPTIONS", fast_start_jvm())
    e.pop("WAP_CONFIG", None)
    e.update(extra)
    return e


def wap(*args: str, cwd: Path | None = None, timeout: float = 300, **extra_env: str) -> Proc:
    p = subprocess.run(
        [WAP, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env(**extra_env),
        stdin=subprocess.DEVNULL,
    )
    return Proc(p.returncode, p.stdout, p.stderr)


def write_config(folder: Path, tables: str = "", lakehouse: str = "", catalog: str = "lake") -> Path:
    """A wap.toml with a local warehouse in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = folder / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{folder / "lakehouse"}"\ncatalog_name = "{catalog}"\nmaster = "local[2]"\n'
        f'driver_memory = "1g"\n{lakehouse}\n'
        '[lakehouse.spark_conf]\n"spark.sql.shuffle.partitions" = "2"\n\n' + tables
    )
    return cfg


class Reader:
    """main, branches and snapshots of the SQLite-catalog lakehouse in `folder`, through PyIceberg."""

    def __init__(self, folder: Path, catalog: str = "lake") -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        wh = folder / "lakehouse"
        self.cat = SqlCatalog(catalog, uri=f"sqlite:///{wh / 'catalog.db'}", warehouse=f"file://{wh}")

    def exists(self, table: str) -> bool:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            self.cat.load_table(table)
            return True
        except (NoSuchTableError, NoSuchNamespaceError):
            return False

    def tables(self, namespace: str) -> list[str]:
        from pyiceberg.exceptions import NoSuchNamespaceError

        try:
            return sorted(".".join(t) for t in self.cat.list_tables(namespace))
        except NoSuchNamespaceError:
            return []

    def main(self, table: str) -> int | None:
        if not self.exists(table):
            return None
        snap = self.cat.load_table(table).current_snapshot()
        return snap.snapshot_id if snap else None

    def branches(self, table: str) -> list[str]:
        if not self.exists(table):
            return []
        refs = self.cat.load_table(table).metadata.refs
        return sorted(n for n, r in refs.items() if n != "main" and str(r.snapshot_ref_type).lower().endswith("branch"))

    def rows(self, table: str) -> list[dict[str, Any]]:
        if not self.exists(table) or self.main(table) is None:
            return []
        return self.cat.load_table(table).scan().to_arrow().to_pylist()

    def summaries(self, table: str) -> list[dict[str, str]]:
        """main's snapshots, oldest first, as their summary properties."""
        t = self.cat.load_table(table)
        out = []
        snap = t.current_snapshot()
        while snap is not None:
            out.append(dict(snap.summary.additional_properties) | {"operation": str(snap.summary.operation)})
            snap = t.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
        return list(reversed(out))


def checksum(rows: list[dict[str, Any]], key: str) -> tuple[int, str]:
    """Row count and an order-independent digest of the rows (duplicates change both)."""
    h = hashlib.sha256()
    for r in sorted(rows, key=lambda r: (r.get(key) is None, r.get(key))):
        h.update(json.dumps(r, sort_keys=True, default=str).encode())
    return len(rows), h.hexdigest()


class LazyReader:
    """A PyIceberg reader opened on first use (the catalog database exists once Spark made it)."""

    def __init__(self, folder: Path, catalog: str) -> None:
        self.folder, self.catalog = folder, catalog
        self._reader: Reader | None = None

    def __getattr__(self, name: str):
        if self._reader is None:
            self._reader = Reader(self.folder, self.catalog)
        return getattr(self._reader, name)


_IN_PROCESS_CATALOGS: dict[str, str] = {}  # catalog name -> warehouse, in this test process's shared session
_CATALOG_NUMBERS = itertools.count()


def unique_catalog(prefix: str) -> str:
    """A catalog name no other test of this process uses (the shared SparkSession caches catalogs by name)."""
    return f"{prefix}{os.getpid()}x{next(_CATALOG_NUMBERS)}"


def setup_run(spark: Any, cfg: Path, table: str, *files: Path, **kw: Any) -> Any:
    """A run made in this test process on the shared SparkSession (about a second) instead of a `wap` process
    (a JVM start, 10-20 s): for runs that only set the scene for what a test checks through `wap` processes.

    The wap.toml's catalog name must be this lakehouse's alone (see unique_catalog): a name the session already
    holds for another warehouse would silently write there."""
    from wapflow.config import load_config
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.pipeline import run_wap

    config = load_config(str(cfg))
    warehouse = str(config.warehouse_location())
    known = _IN_PROCESS_CATALOGS.setdefault(config.lakehouse.catalog_name, warehouse)
    assert known == warehouse, f"catalog {config.lakehouse.catalog_name} is another lakehouse's in this session"
    return run_wap(Lakehouse(config, spark=spark), table, [str(f) for f in files], **kw)
