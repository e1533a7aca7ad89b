"""The JVM side: a Java 17+ runtime and the jars Spark needs, resolved from Maven Central and cached.

Checked before Spark starts so that a missing Java or an unreachable Maven Central is a
one-line message with a fix, not a Py4J stack trace.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wapflow.errors import DiskFull, EnvironmentProblem

if TYPE_CHECKING:
    from wapflow.config import WapConfig

ICEBERG_VERSION = "1.11.0"
SPARK_SERIES = "4.1"
SCALA_VERSION = "2.13"
SQLITE_JDBC_VERSION = "3.50.3.0"
# S3 (issue 5): S3A must match the Hadoop that pyspark 4.1 bundles (3.4.2). Its AWS SDK v2 classes come
# from iceberg-aws-bundle (SDK 2.44.4, needed by Iceberg's S3FileIO anyway) plus the SDK's transfer
# manager, which the bundle lacks: 65 MB in all instead of the 640 MB software.amazon.awssdk:bundle.
HADOOP_AWS_VERSION = "3.4.2"
AWS_SDK_VERSION = "2.44.4"  # the SDK inside iceberg-aws-bundle 1.11.0
# The Iceberg JDBC catalog on PostgreSQL (issue 13): the driver is not in the runtime jar.
POSTGRESQL_JDBC_VERSION = "42.7.14"
MIN_JAVA = 17


@dataclass(frozen=True)
class Artifact:
    group: str
    name: str
    version: str
    # e.g. "runner" for Quarkus uber jars (nessie-quarkus-<ver>-runner.jar)
    classifier: str | None = None

    @classmethod
    def parse(cls, coord: str) -> Artifact:
        parts = coord.split(":")
        if len(parts) != 3 or not all(parts):
            raise EnvironmentProblem(
                f"Maven coordinate {coord!r} is not group:artifact:version",
                hint="e.g. org.apache.iceberg:iceberg-aws-bundle:1.11.0",
            )
        return cls(*parts)

    @property
    def coordinate(self) -> str:
        base = f"{self.group}:{self.name}:{self.version}"
        return f"{base}:{self.classifier}" if self.classifier else base

    @property
    def filename(self) -> str:
        suffix = f"-{self.classifier}" if self.classifier else ""
        return f"{self.name}-{self.version}{suffix}.jar"

    def url(self, repo: str) -> str:
        return f"{repo.rstrip('/')}/{self.group.replace('.', '/')}/{self.name}/{self.version}/{self.filename}"


ICEBERG_RUNTIME = Artifact(
    "org.apache.iceberg", f"iceberg-spark-runtime-{SPARK_SERIES}_{SCALA_VERSION}", ICEBERG_VERSION
)
SQLITE_JDBC = Artifact("org.xerial", "sqlite-jdbc", SQLITE_JDBC_VERSION)
CORE_ARTIFACTS = (ICEBERG_RUNTIME, SQLITE_JDBC)
POSTGRESQL_JDBC = Artifact("org.postgresql", "postgresql", POSTGRESQL_JDBC_VERSION)
S3_ARTIFACTS = (
    Artifact("org.apache.iceberg", "iceberg-aws-bundle", ICEBERG_VERSION),
    Artifact("org.apache.hadoop", "hadoop-aws", HADOOP_AWS_VERSION),
    Artifact("software.amazon.awssdk", "s3-transfer-manager", AWS_SDK_VERSION),
)


def default_jars_dir() -> Path:
    env = os.environ.get("WAP_JARS_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wapflow" / "jars"


# --- Java -------------------------------------------------------------------------------------


def find_java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        cand = Path(home) / "bin" / "java"
        if cand.is_file():
            return str(cand)
    return shutil.which("java")


def java_major_version(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return None
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0_392" style
        major = int(m.group(2))
    return major


def check_java() -> int:
    """Return the Java major version, or explain exactly what to install."""
    java = find_java()
    if java is None:
        raise EnvironmentProblem(
            f"Java was not found (Spark needs Java {MIN_JAVA} or newer)",
            hint="install a JDK 17+ (e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME",
        )
    major = java_major_version(java)
    if major is None:
        raise EnvironmentProblem(f"could not read the version of {java}", hint="check that `java -version` works")
    if major < MIN_JAVA:
        raise EnvironmentProblem(
            f"{java} is Java {major}; Spark 4.1 needs Java {MIN_JAVA} or newer",
            hint="install a JDK 17+ and point JAVA_HOME at it",
        )
    return major


# --- jars -------------------------------------------------------------------------------------


Progress = Callable[[str], None]


def _sha1(path: Path) -> str:
    h = hashlib.sha1()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_artifact(art: Artifact, dest_dir: Path, repo: str, progress: Progress | None = None) -> Path:
    """Download one jar (checksum-verified) unless it is already cached. A folder that cannot be made or written,
    or a full disk, is an EnvironmentProblem (DiskFull) naming the folder, never an OSError."""
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _cache_problem(e, dest_dir, art, None) from e
    dest = dest_dir / art.filename
    if dest.is_file() and dest.stat().st_size > 0:
        return dest
    import httpx  # here, not at import: only a download needs it

    url = art.url(repo)
    if progress:
        progress(f"downloading {art.coordinate}")
    size: int | None = None
    try:
        with httpx.Client(timeout=httpx.Timeout(60.0, connect=20.0), follow_redirects=True) as client:
            sha = client.get(url + ".sha1")
            sha.raise_for_status()
            expected = sha.text.strip().split()[0].lower()
            fd, tmp_name = tempfile.mkstemp(dir=dest_dir, suffix=".part")
            tmp = Path(tmp_name)
            try:
                with os.fdopen(fd, "wb") as out, client.stream("GET", url) as resp:
                    resp.raise_for_status()
                    size = int(resp.headers.get("content-length") or 0) or None
                    for chunk in resp.iter_bytes(1 << 20):
                        out.write(chunk)
                got = _sha1(tmp)
                if got != expected:
                    raise EnvironmentProblem(
                        f"checksum mismatch for {art.filename}: expected {expected}, got {got}",
                        hint="retry `wap setup`; if it persists, check the maven_repo mirror",
                    )
                tmp.replace(dest)
            finally:
                tmp.unlink(missing_ok=True)
    except httpx.HTTPError as e:
        raise EnvironmentProblem(
            f"could not download {art.coordinate} from {repo}: {e}",
            hint="check network access to Maven Central, set lakehouse.maven_repo to a mirror, "
            "or list pre-downloaded jars in lakehouse.jars",
        ) from e
    except OSError as e:
        raise _cache_problem(e, dest_dir, art, size) from e
    return dest


def _cache_problem(e: OSError, folder: Path, art: Artifact, size: int | None) -> EnvironmentProblem:
    """The jar cache folder could not take a jar: a full disk (how much the jar needs, how much is free), or a
    folder that cannot be made or written (the OS's words)."""
    where = f"the jar cache {folder}"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        try:
            free = f"{shutil.disk_usage(folder).free / 2**20:.0f} MB free"
        except OSError:
            free = "free space unknown"
        need = f"{size / 2**20:.0f} MB" if size else "its size"
        return DiskFull(
            f"no space left for {art.filename} in {where} ({free}; it needs {need})",
            hint="free space on that disk, or point WAP_JARS_DIR at a folder on a disk with room, then run "
            "`wap setup` again",
        )
    return EnvironmentProblem(
        f"could not write {art.filename} in {where}: {e.strerror or e}",
        hint="make the folder writable, or point WAP_JARS_DIR at a folder you can write, then run `wap setup` again",
    )


def planned_artifacts(extra_packages: list[str], *, s3: bool, postgresql: bool) -> list[Artifact]:
    """The Maven artifacts Spark gets when wapflow resolves them (not with lakehouse.jars)."""
    extra = [Artifact.parse(c) for c in extra_packages]
    arts = list(CORE_ARTIFACTS) + (list(S3_ARTIFACTS) if s3 else [])
    # A driver the user pinned in extra_packages wins: two versions of it on one classpath is a lottery.
    if postgresql and not any((a.group, a.name) == (POSTGRESQL_JDBC.group, POSTGRESQL_JDBC.name) for a in extra):
        arts.append(POSTGRESQL_JDBC)
    return arts + extra


def artifacts_for(cfg: WapConfig) -> list[Artifact]:
    """The artifacts `wap setup` and Spark's start fetch for this config (a health check compares the cache)."""
    from wapflow.lakehouse.spark_s3 import uses_s3

    return planned_artifacts(cfg.lakehouse.extra_packages, s3=uses_s3(cfg), postgresql=uses_postgresql_catalog(cfg))


@dataclass(frozen=True)
class JarPlan:
    """What Spark gets: local jar files (spark.jars) and/or Maven coordinates (spark.jars.packages)."""

    jars: tuple[str, ...]
    packages: tuple[str, ...]


# The jars every driver JVM of the embedded default has, first on its class path (DriverClassPath).
CORE_JAR_NAMES = frozenset(a.filename for a in CORE_ARTIFACTS)
# Spark's launcher puts this variable's entries after its own jars on the driver's class path.
DIST_CLASSPATH = "SPARK_DIST_CLASSPATH"
# ... and this setting's before them.
EXTRA_CLASS_PATH = "spark.driver.extraClassPath"


@dataclass(frozen=True)
class DriverClassPath:
    """Where a driver JVM wapflow starts finds its jars: all on the JVM's class path, not in Spark's own class
    loader (`spark.jars`), so that the class archive (wapflow.lakehouse.class_archive) serves Iceberg's classes
    as it serves Spark's. Through `spark.jars`, a third of the ~2,400 classes a run loads from the runtime jar
    were still read from it at every start, and the rest checked against it; on the class path, the archive
    serves all but a few. A cold `wap run`'s driver JVM used ~1.2 CPU-s less with the tests' JVM options and
    ~5.5 CPU-s less with the default ones (wall 13.4 s -> 9.4 s; medians of four, 2026-11-27).

    A JVM maps an archive only if the class path it was made with is a prefix of its own, and Spark's launcher
    puts `spark.driver.extraClassPath` before its own jars and SPARK_DIST_CLASSPATH after them. So the core jars
    (Iceberg's runtime, SQLite's driver: what the archive's training run has) go `first`, and any other jar
    (S3, PostgreSQL, extra packages) `last`: every config with the core jars shares one archive. One class
    loader also keeps what Iceberg loads by name (a FileIO, a JDBC driver through DriverManager) visible
    to it. `shipped`: jars Spark itself must fetch (to a cluster's executors; a jar given by URL)."""

    first: tuple[str, ...]
    last: tuple[str, ...]
    shipped: tuple[str, ...]

    def extra_class_path(self, configured: str | None) -> str | None:
        """spark.driver.extraClassPath: the `first` jars, then what spark_conf sets (kept, not replaced)."""
        parts = [*self.first, *([configured] if configured else [])]
        return os.pathsep.join(parts) if parts else None

    def dist_classpath(self, current: str | None) -> str | None:
        """SPARK_DIST_CLASSPATH for the driver's launcher: what it was, then the `last` jars."""
        if not self.last:
            return current
        return os.pathsep.join([*([current] if current else []), *self.last])


def _on_class_path(jar: str) -> bool:
    return "://" not in jar


def driver_class_path(plan: JarPlan, *, local: bool) -> DriverClassPath:
    """The class path of a driver for `plan`; `local`: the driver is the only JVM (a local master), so no jar
    is shipped but those given by URL."""
    on = [j for j in plan.jars if _on_class_path(j)]
    first = tuple(j for j in on if Path(j).name in CORE_JAR_NAMES)
    last = tuple(j for j in on if Path(j).name not in CORE_JAR_NAMES)
    shipped = tuple(j for j in plan.jars if not local or not _on_class_path(j))
    return DriverClassPath(first, last, shipped)


def first_on_class_path(cfg: WapConfig) -> tuple[str, ...]:
    """The `first` jars of this config's drivers (DriverClassPath), from the config alone: nothing fetched."""
    lh = cfg.lakehouse
    if lh.jars:
        paths = [str(Path(j).expanduser()) for j in lh.jars if _on_class_path(j)]
    elif lh.jar_resolution == "ivy":
        paths = []
    else:
        folder = Path(lh.jars_dir).expanduser() if lh.jars_dir else default_jars_dir()
        paths = [str(folder / a.filename) for a in CORE_ARTIFACTS]
    return tuple(p for p in paths if Path(p).name in CORE_JAR_NAMES)


def resolve_jars(
    *,
    jars: list[str],
    extra_packages: list[str],
    resolution: str,
    repo: str,
    jars_dir: str | None,
    progress: Progress | None = None,
    s3: bool = False,
    postgresql: bool = False,
) -> JarPlan:
    """The jars Spark gets; `s3` adds S3FileIO and S3A (only when the config uses S3: local users skip 65 MB),
    `postgresql` the PostgreSQL JDBC driver (a JDBC catalog on PostgreSQL), unless extra_packages names one."""
    if jars:
        missing = [j for j in jars if "://" not in j and not Path(j).expanduser().is_file()]
        if missing:
            raise EnvironmentProblem(
                f"lakehouse.jars lists files that do not exist: {', '.join(missing)}",
                hint="fix the paths, or remove lakehouse.jars to download the jars from Maven Central",
            )
        return JarPlan(tuple(str(Path(j).expanduser()) if "://" not in j else j for j in jars), ())
    arts = planned_artifacts(extra_packages, s3=s3, postgresql=postgresql)
    if resolution == "ivy":
        return JarPlan((), tuple(a.coordinate for a in arts))
    folder = Path(jars_dir).expanduser() if jars_dir else default_jars_dir()
    return JarPlan(tuple(str(fetch_artifact(a, folder, repo, progress)) for a in arts), ())


def uses_postgresql_catalog(cfg: WapConfig) -> bool:
    """The Iceberg catalog is a JDBC catalog on PostgreSQL (its uri is jdbc:postgresql:...)."""
    return cfg.lakehouse.catalog_properties.get("uri", "").startswith("jdbc:postgresql:")


def plan_for(cfg: WapConfig, progress: Progress | None = None, *, s3: bool = False) -> JarPlan:
    """The jars a config needs (the S3 ones only when it uses S3, or when asked to pre-fetch them; the
    PostgreSQL driver only for a JDBC catalog on PostgreSQL)."""
    from wapflow.lakehouse.spark_s3 import uses_s3

    lh = cfg.lakehouse
    return resolve_jars(
        jars=lh.jars,
        extra_packages=lh.extra_packages,
        resolution=lh.jar_resolution,
        repo=lh.maven_repo,
        jars_dir=lh.jars_dir,
        progress=progress,
        s3=s3 or uses_s3(cfg),
        postgresql=uses_postgresql_catalog(cfg),
    )
