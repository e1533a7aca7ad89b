"""Spark's classes mapped from one archive instead of loaded and verified at every JVM start (AppCDS).

A local Spark driver spends most of its start-up loading, parsing and verifying some twenty thousand classes.
A dynamic class-data-sharing archive (JDK 13+, `-XX:ArchiveClassesAtExit`) holds them ready to map: made once per
Java and PySpark install by a short training run (`wap setup`: wapflow.cli.train_archive),
it is then mapped by every driver wapflow starts (`wap` commands, the engine, the Python API). Measured on the
2-core reference machine: the driver JVM's CPU to start and read a table fell from ~33 s to ~20 s under load.

Iceberg's runtime and SQLite's driver are in it too, mapped like Spark's own: wapflow puts them first on the
driver's class path (wapflow.lakehouse.jvm.DriverClassPath). Other jars come after Spark's, so every config with
those two shares the one archive. A config that lists its own jars (`lakehouse.jars`) or has Spark resolve them
(`jar_resolution = "ivy"`) starts without one.

Two rules keep it safe. The archive is keyed by what it depends on (the Java runtime's files, PySpark's version
and jars folder, the jars first on the class path), and a JVM that finds it does not match falls back to
loading classes itself (`-Xshare:auto`, its warning silenced: it would print on the command's stdout). And a JVM
maps only a complete archive: one killed while writing its archive leaves a truncated file that crashes (SIGBUS)
any JVM mapping it, so training writes a temporary file and renames it only once its JVM has exited 0.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wapflow.config import WapConfig

# `WAP_CLASS_ARCHIVE=off`: neither make nor use one (a JVM whose class loading must be exactly Java's own).
SWITCH = "WAP_CLASS_ARCHIVE"
# Set in the training process only: where its JVM writes the archive at exit.
TRAINING = "WAP_CLASS_ARCHIVE_TRAINING"
_STALE_PARTS = 3600.0  # a temporary archive this old belongs to a training run that was killed
# An archive is marked used (its mtime) at most this often, and one no driver has used for UNUSED_DAYS is removed
# when another is made: what an upgrade (another Java, PySpark or Iceberg jar: another key) leaves behind.
_MARK_USED_EVERY = 86400.0
UNUSED_DAYS = 30
TRAIN_TIMEOUT = 900.0


def enabled() -> bool:
    return os.environ.get(SWITCH, "").strip().lower() not in ("off", "0", "false", "no")


def _java_home(java: str) -> Path:
    return Path(os.path.realpath(java)).parent.parent


def _stat(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return f"{path}:-"
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


def key(java: str, first: tuple[str, ...]) -> str:
    """What an archive depends on: the Java runtime (its module image and VM library), PySpark (its version
    and jars folder) and the jars `first` on the class path (jvm.DriverClassPath). Another Java or PySpark
    install, or other jars, is another key, so another archive."""
    import pyspark

    home = _java_home(java)
    jars = Path(pyspark.__file__).parent / "jars"
    parts = [
        str(home),
        _stat(home / "lib" / "modules"),
        _stat(home / "lib" / "server" / "libjvm.so"),
        pyspark.__version__,
        _stat(jars),
        *(_stat(Path(j)) for j in first),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def folder(cfg: WapConfig) -> Path:
    """Beside the jars (`[lakehouse] jars_dir`, `$WAP_JARS_DIR`, else ~/.cache/wapflow/jars): one cache to clear."""
    from wapflow.lakehouse import jvm

    base = Path(cfg.lakehouse.jars_dir).expanduser() if cfg.lakehouse.jars_dir else jvm.default_jars_dir()
    return base / "class-archives"


def path_for(cfg: WapConfig, java: str) -> Path:
    from wapflow.lakehouse import jvm

    return folder(cfg) / f"spark-{key(java, jvm.first_on_class_path(cfg))}.jsa"


def not_for(cfg: WapConfig) -> str | None:
    """Why no archive can serve this config's drivers; None when one can. The training run has the default jars
    of the jars folder first on its class path, and a JVM maps an archive only over the same first entries."""
    if cfg.lakehouse.jars:
        return "lakehouse.jars puts other jars on the driver's class path than the training run's"
    if cfg.lakehouse.jar_resolution == "ivy":
        return "jar_resolution = ivy has Spark load the jars itself"
    return None


def java_options(cfg: WapConfig) -> list[str]:
    """The driver JVM's options: map the archive when there is one, write it when this process trains one."""
    if not enabled():
        return []
    training = os.environ.get(TRAINING)
    if training:
        return [f"-XX:ArchiveClassesAtExit={training}", "-Xlog:cds*=off"]
    from wapflow.lakehouse import jvm

    java = jvm.find_java()
    if java is None:
        return []
    path = path_for(cfg, java)
    if not path.is_file():
        return []
    _mark_used(path)
    return [f"-XX:SharedArchiveFile={path}", "-Xshare:auto", "-Xlog:cds*=off"]


def _mark_used(path: Path) -> None:
    """Set the archive's mtime to now, once a day at most: the mark that keeps it from being removed as unused
    (a JVM maps it read-only, and its key, not its mtime, says whether it matches)."""
    try:
        if time.time() - path.stat().st_mtime > _MARK_USED_EVERY:
            os.utime(path)
    except OSError:
        pass  # a folder shared read-only: the archive is still used, only not marked


def ensure(
    cfg: WapConfig, trainer: list[str], progress: Callable[[str], None] | None = None
) -> tuple[Path | None, str]:
    """The archive for this Java and PySpark, made now by the `trainer` command (a process whose driver JVM
    runs a representative workload and exits 0) if there is none: (its path, what happened), or (None, why
    not). Never raises: without an archive Spark starts as it always did, only slower."""
    from wapflow.lakehouse import jvm

    if not enabled():
        return None, f"off ({SWITCH}=off)"
    java = jvm.find_java()
    if java is None:
        return None, "no Java found"
    if (why := not_for(cfg)) is not None:
        return None, f"not made: {why}"
    path = path_for(cfg, java)
    if path.is_file():
        return path, "present"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two setups at once: one trains, the other then finds its archive
        if path.is_file():
            return path, "present"
        return _train(cfg, path, trainer, progress)


def _train(
    cfg: WapConfig, path: Path, trainer: list[str], progress: Callable[[str], None] | None
) -> tuple[Path | None, str]:
    _remove_stale_parts(path.parent)
    removed = remove_unused(path.parent)
    if removed and progress:
        progress(f"removed {len(removed)} JVM class archive(s) no driver used for {UNUSED_DAYS} days")
    if progress:
        progress("making the JVM class archive (once per Java and PySpark install; later Spark starts are faster)")
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    env = dict(os.environ)
    env[TRAINING] = str(part)
    for var in ("WAP_CONFIG", "WAP_ENGINE", "JAVA_TOOL_OPTIONS"):
        env.pop(var, None)
    if cfg.lakehouse.jars_dir:
        env["WAP_JARS_DIR"] = str(Path(cfg.lakehouse.jars_dir).expanduser())
    try:
        proc = subprocess.run(
            trainer,
            env=env,
            capture_output=True,
            text=True,
            timeout=TRAIN_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        part.unlink(missing_ok=True)
        return None, f"training did not finish: {e}"
    if proc.returncode != 0 or not part.is_file() or part.stat().st_size == 0:
        part.unlink(missing_ok=True)
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"this Java did not write one ({last[:200]})"
    os.replace(part, path)  # complete: its JVM exited 0 after writing it
    return path, "made"


def _remove_stale_parts(where: Path) -> None:
    cutoff = time.time() - _STALE_PARTS
    for part in where.glob("*.part"):
        try:
            if part.stat().st_mtime < cutoff:
                part.unlink()
        except OSError:
            pass


def remove_unused(where: Path, days: int = UNUSED_DAYS) -> list[Path]:
    """Remove the archives in `where` that no driver has mapped for `days` (their mtime: _mark_used); returns
    them. A JVM that maps one meanwhile keeps its mapping (the file's data lives until it is unmapped)."""
    cutoff = time.time() - days * 86400
    removed = []
    for archive in where.glob("spark-*.jsa"):
        try:
            if archive.stat().st_mtime < cutoff:
                archive.unlink()
                removed.append(archive)
        except OSError:
            pass
    return removed
