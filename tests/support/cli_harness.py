"""Drive `wap` as users do (a real process per command) and read the lakehouse back independently.

The independent reader is PyIceberg on the same SQLite catalog: no Spark, no wapflow code, so a
test's verdict on main (snapshot id, rows, branches) does not depend on the code under test.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import os
import shutil
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
# Class-data sharing (tests only, see use_class_archive): the driver JVM of a small `wap run` loads some
# 15,000 classes; mapping them from an archive made once per machine takes a third off each `wap` process.
CLASS_ARCHIVES = Path.home() / ".cache" / "wapflow" / "test-jvm"
_archive: Path | None = None  # this machine's archive for these jars and flags (it may not exist yet)
_archive_maker: threading.Thread | None = None


def fast_start_jvm() -> str:
    """JAVA_TOOL_OPTIONS of the tests' `wap` processes: the base flags, and the class archive once it exists."""
    if _archive is not None and _archive.exists():
        return f"{BASE_FAST_START_JVM} -XX:SharedArchiveFile={_archive} -Xlog:cds*=off"
    return BASE_FAST_START_JVM


def _archive_key() -> str:
    """What the archive depends on: the java binary, the JVM flags and Spark's jars (names, sizes, times)."""
    import pyspark

    java = os.path.realpath(shutil.which("java") or "java")
    jars = Path(pyspark.__file__).parent / "jars"
    listing = sorted((j.name, j.stat().st_size, int(j.stat().st_mtime)) for j in jars.glob("*.jar"))
    text = json.dumps([java, pyspark.__version__, str(jars), BASE_FAST_START_JVM, listing])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def use_class_archive(work: Path) -> None:
    """Use a class-data-sharing archive for the `wap` processes' driver JVMs, made once per machine.

    When the archive is missing it is made in the background (a thread driving one real `wap run`), so the
    test worker goes on with its tests meanwhile, and the other worker does not wait for it either: `wap`
    processes started before it exists run without it (only slower); fast_start_jvm() picks it up as soon as
    it is in place (moved there whole, so a JVM sees all of it or none). The archive is dumped by the driver
    JVM of that run (publish and quarantine, so the usual classes are in it) when that JVM exits, which is after
    the `wap` process has gone: the run gets a process group of its own and the archive is moved into place
    only once nothing of it is left. Any JVM whose class path differs from the archive's (Spark's launcher,
    the test servers) ignores it; `-Xlog:cds*=off` keeps the JVM quiet about that on stdout, where `--json`
    output goes.
    """
    global _archive, _archive_maker
    if _archive is not None:
        return
    _archive = CLASS_ARCHIVES / f"{_archive_key()}.jsa"
    if _archive.exists():
        return
    CLASS_ARCHIVES.mkdir(parents=True, exist_ok=True)
    target = _archive

    def make() -> None:
        with open(CLASS_ARCHIVES / "lock", "w") as lock:  # test workers in parallel: one of them makes it
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another worker is making it; fast_start_jvm() uses it once it is there
            if not target.exists():
                _make_class_archive(work, target)

    _archive_maker = threading.Thread(target=make, name="class-archive", daemon=True)
    _archive_maker.start()


def class_archive_done() -> None:
    """Wait for a background archive run of this process (at the end of the session: no JVM left behind)."""
    if _archive_maker is not None:
        _archive_maker.join()


def _make_class_archive(work: Path, target: Path) -> bool:
    """One real `wap run` whose driver JVM dumps its classes into `target` when it exits."""
    import signal
    import time

    import pyarrow.parquet as pq

    from wapflow.demo.generate import generate_trips

    work.mkdir(parents=True, exist_ok=True)
    cfg = write_config(
        work,
        '[tables."cds.trips"]\non_row_failure = "quarantine"\nchecks = [{ check = "not_null", column = '
        '"passenger_count" }, { check = "unique", columns = ["trip_id"] }, { check = "row_count", min = 1 }]\n',
    )
    (work / "landing").mkdir(exist_ok=True)
    pq.write_table(generate_trips(500, null_rate=0.05), work / "landing" / "trips.parquet")
    dump = CLASS_ARCHIVES / f"{target.stem}.{os.getpid()}.tmp"
    opts = f"{BASE_FAST_START_JVM} -XX:ArchiveClassesAtExit={dump} -Xlog:cds*=off"
    p = subprocess.Popen(
        [WAP, "run", "cds.trips", str(work / "landing" / "trips.parquet"), "--config", str(cfg)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        env=env(JAVA_TOOL_OPTIONS=opts), start_new_session=True,
    )  # fmt: skip
    ok = p.wait(timeout=300) == 0
    deadline = time.monotonic() + 180
    while True:  # the driver JVM outlives `wap` by the seconds it takes to write the archive
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            break
        if time.monotonic() > deadline:
            os.killpg(p.pid, signal.SIGKILL)
            ok = False
            break
        time.sleep(0.5)
    if not ok or not dump.exists() or dump.stat().st_size < 10_000_000:
        dump.unlink(missing_ok=True)
        return False
    os.replace(dump, target)
    return True


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
