"""One SparkSession per process, configured from wap.toml, with the Iceberg catalog registered on it."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import weakref
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from wapflow.config import WapConfig
from wapflow.config.urls import redact_url
from wapflow.errors import EnvironmentProblem, TransientError, Unreachable, WapError
from wapflow.lakehouse import class_archive, connect_channel, jvm, tls
from wapflow.lakehouse.catalog_props import ICEBERG_EXTENSIONS, SPARK_CATALOG_CLASS, catalog_properties
from wapflow.spark.kind import is_connect, is_connect_url
from wapflow.stopping import STOP

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOG_KEEP_DAYS = 7

# Spark's log file of this process (None until a session is started here), and whether `--verbose`
# asked for Spark's logs on the terminal as well. Both are per process, like the JVM they describe.
_log_file: Path | None = None
_log_pid: int | None = None  # the process that started that JVM (a forked engine command inherits _log_file)
verbose = False
# Whether a command on a config with a local master may use the Spark Connect server `wap serve` runs for it.
# Off for what needs Spark's JVM in this process (`wap maintain`; `wap revert`, whose Iceberg Java API path
# works on every catalog, its Connect path on the JDBC catalogs only).
use_server = True


def log_file() -> Path | None:
    """Where this process's Spark (JVM) logs go; printed with errors so nobody needs a stack trace on screen.
    None unless this process started Spark: not for a command that never did, nor for one the engine runs in a
    process forked from its own (`wap engine logs` shows the engine's)."""
    return _log_file if _log_pid == os.getpid() else None


# PySpark's own Python loggers that print a failed query's whole error (a JSON line with the Java stack) on
# stderr when the exception is made: wapflow names the error itself, in one line.
_PYSPARK_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def _pyspark_logs_to(path: Path) -> None:
    """PySpark's error loggers write to Spark's log file of this process, not the terminal (`--verbose` keeps
    them there). Made through PySparkLogger.getLogger, as PySpark makes them: they take its own arguments."""
    import logging

    from pyspark.logger import PySparkLogger

    for name in _PYSPARK_ERROR_LOGGERS:
        logger = PySparkLogger.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.addHandler(logging.FileHandler(path, delay=True))
        logger.propagate = False


def _new_log_file(cfg: WapConfig) -> Path:
    import time

    folder = cfg.state_dir() / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - _LOG_KEEP_DAYS * 86400
    for old in folder.glob("wap-*.log"):
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:
            pass
    return folder / f"wap-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}.log"


def _catalog_properties(cfg: WapConfig) -> dict[str, str]:
    """The catalog's properties as Spark gets them. Iceberg's catalog keeps a loaded table for 30 s by default and
    meanwhile misses other processes' commits: a `wap watch` worker then audited a run another worker had written
    with a view that lacked its snapshot ("Cannot find the end snapshot"), or created a branch another worker had
    created ("Ref ... already exists"). Every wapflow process may share its tables with another (two workers, an
    ingest beside a watch, the engine's successive commands), so each load reads the current metadata, unless
    catalog_properties sets cache-enabled."""
    props = catalog_properties(cfg)
    props.setdefault("cache-enabled", "false")
    return props


def catalog_caches_tables(cfg: WapConfig) -> bool:
    """Whether Spark's catalog keeps loaded tables (the user set cache-enabled): then a commit made outside
    Spark (PyIceberg's) must be followed by a refresh of what it changed."""
    return _catalog_properties(cfg).get("cache-enabled", "true").strip().lower() != "false"


# What register_catalog last set per session and catalog name: a Lakehouse registers its catalog at each
# `spark` access (another Lakehouse on the same session may have set the name since), ~10 conf calls that a
# small run made three times (~15 ms); unchanged settings are not sent again.
_registered: weakref.WeakKeyDictionary[SparkSession, dict[str, dict[str, str]]] = weakref.WeakKeyDictionary()


def catalog_confs(cfg: WapConfig) -> dict[str, str]:
    """The session settings that make the config's catalog: its Spark catalog class and properties."""
    name = cfg.lakehouse.catalog_name
    props = _catalog_properties(cfg)
    name_endpoints(cfg, props)
    return {f"spark.sql.catalog.{name}": SPARK_CATALOG_CLASS} | {
        f"spark.sql.catalog.{name}.{k}": v for k, v in props.items()
    }


def register_catalog(spark: SparkSession, cfg: WapConfig) -> None:
    """Catalogs load lazily by name, so they can be registered on a running session."""
    name = cfg.lakehouse.catalog_name
    confs = catalog_confs(cfg)
    done = _registered.setdefault(spark, {})
    if done.get(name) == confs:
        return
    for k, v in confs.items():
        spark.conf.set(k, v)
    done[name] = dict(confs)


def _is_local_master(master: str) -> bool:
    return master.startswith("local")


def effective_master(cfg: WapConfig, progress: jvm.Progress | None = None) -> str:
    """The master this process uses: the configured one, or, for a local master, the endpoint of the
    Spark Connect server `wap serve` runs for this config when it is alive (said in one progress line)."""
    master = cfg.lakehouse.master
    if is_connect_url(cfg.lakehouse.engine):
        return cfg.lakehouse.engine  # engine = "sc://...": each command is a client of that server
    if not use_server or not _is_local_master(master):
        return master
    from wapflow.lakehouse import connect

    state = connect.running(cfg)
    if state is None:
        return master
    if progress:
        progress(f"using the Spark Connect server of `wap serve` at {state.endpoint} (pid {state.pid})")
    return state.endpoint


def name_endpoints(cfg: WapConfig, props: dict[str, str]) -> None:
    """Errors of the catalog's clients in this JVM name its URL and where its token is set (spark.errors)."""
    from wapflow.lakehouse.catalog_props import REST_TOKEN_SETTING
    from wapflow.lakehouse.nessie_config import TOKEN_SETTING as NESSIE_TOKEN_SETTING
    from wapflow.spark import errors as spark_errors

    uri = props.get("uri", "")
    if cfg.lakehouse.catalog == "nessie":
        spark_errors.name_endpoint("the Nessie server", uri, NESSIE_TOKEN_SETTING)
    elif uri.startswith(("http://", "https://")):
        spark_errors.name_endpoint("the Iceberg catalog", uri, REST_TOKEN_SETTING)


def build_session(cfg: WapConfig, progress: jvm.Progress | None = None) -> SparkSession:
    """Start (or reuse) the SparkSession: Java check, jars, Iceberg extensions, catalog."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        register_catalog(active, cfg)
        return active

    lh = cfg.lakehouse
    master = effective_master(cfg, progress)
    connect = is_connect_url(master)
    shown = redact_url(master)  # an sc:// URL may carry ;token=
    builder = SparkSession.builder.appName("wapflow")
    class_path = jvm.DriverClassPath((), (), ())  # a Connect client starts no JVM
    if connect:
        # Spark Connect: jars and extensions live on the server; only the client session is built here
        # (the catalog and spark_conf below are session settings, sent to the server).
        _check_connect_client()
    else:
        jvm.check_java()
        plan = jvm.plan_for(cfg, progress)
        builder = builder.master(master).config("spark.sql.extensions", ICEBERG_EXTENSIONS)
        class_path = jvm.driver_class_path(plan, local=_is_local_master(master))
        if class_path.shipped:
            builder = builder.config("spark.jars", ",".join(class_path.shipped))
        if plan.packages:
            builder = builder.config("spark.jars.packages", ",".join(plan.packages))
        builder = builder.config("spark.driver.memory", lh.driver_memory)
        global _log_file, _log_pid
        log_conf = resources.files("wapflow.lakehouse").joinpath("log4j2.properties")
        _log_file, _log_pid = _new_log_file(cfg), os.getpid()
        if not verbose:
            _pyspark_logs_to(_log_file)
        java_opts = [
            f"-Dlog4j2.configurationFile=file:{log_conf}",
            f"-Dwap.log.file={_log_file}",
            f"-Dwap.console.level={'warn' if verbose else 'off'}",
            *tls.java_options(cfg),  # [lakehouse] ca_bundle: the catalog clients' trust store
            *class_archive.java_options(cfg),  # Spark's classes mapped, not loaded one by one (when made)
            f"-Dderby.system.home={_spark_scratch()}",
        ]
        # Quoted: Spark splits this option on blanks, and the state folder may contain some.
        builder = builder.config("spark.driver.extraJavaOptions", " ".join(f'"{o}"' for o in java_opts))
        builder = builder.config("spark.ui.showConsoleProgress", "false")
        if _is_local_master(master):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = (
                builder.config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "8")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.driver.bindAddress", "127.0.0.1")
            )
    name = lh.catalog_name
    settings: dict[str, Any] = {"spark.app.name": "wapflow", f"spark.sql.catalog.{name}": SPARK_CATALOG_CLASS}
    props = _catalog_properties(cfg)
    name_endpoints(cfg, props)
    for k, v in props.items():
        settings[f"spark.sql.catalog.{name}.{k}"] = v
    if not connect:
        # Spark's own warehouse (spark-warehouse/, Derby's metastore_db/ and derby.log) is never wapflow's tables:
        # in a private temporary folder, not in the folder the command runs in (spark_conf may name another).
        settings["spark.sql.warehouse.dir"] = str(_spark_scratch() / "spark-warehouse")
    for key, value in lh.spark_conf.items():
        settings[key] = str(value).lower() if isinstance(value, bool) else str(value)
    if extra := class_path.extra_class_path(settings.get(jvm.EXTRA_CLASS_PATH)):
        settings[jvm.EXTRA_CLASS_PATH] = extra
    if progress:
        progress(f"connecting to Spark Connect at {shown}" if connect else f"starting Spark ({master})")
    try:
        if connect:
            # wapflow's channel: `ca_bundle` trusted, an untrusted certificate named at once (connect_channel).
            spark = cast("SparkSession", connect_channel.session(cfg, master, settings))
        else:
            with _jvm_stderr_to(None if verbose else _log_file), _launcher_env(class_path):
                spark = builder.config(map=settings).getOrCreate()
        STOP.reclaim()  # a new SparkContext takes SIGINT for itself; a stop stays wapflow's (wapflow.stopping)
    except WapError:
        raise  # already named (an untrusted certificate)
    except Exception as e:
        from wapflow.spark import errors as spark_errors

        # A Spark Connect server that refuses the connection may come back, one that refuses the token needs
        # someone to act; anything else is the JVM, the jars or the Spark settings of this machine.
        doing = "opening a Spark Connect session" if connect else f"starting Spark ({master})"
        named = spark_errors.classify(e, doing=doing)
        if isinstance(named, TransientError) or (connect and isinstance(named, EnvironmentProblem)):
            raise named from e
        if connect:
            raise Unreachable(
                f"the Spark Connect server at {shown} did not answer: {_first_line(e)}",
                hint="start it (`wap serve`), or check [lakehouse].master",
            ) from e
        raise EnvironmentProblem(
            f"Spark did not start: {_first_line(e)}",
            hint="check [lakehouse].master and spark_conf; `wap setup` checks Java and the jars",
        ) from e
    if not connect:
        _no_checksum_sidecars(spark)
        initialize_jdbc_catalog(spark, cfg)
    return spark


def _spark_scratch() -> Path:
    """This user's folder for what Spark writes beside wapflow's own (its SQL warehouse, Derby's files)."""
    import tempfile

    folder = Path(tempfile.gettempdir()) / f"wapflow-spark-{os.getuid()}"
    with contextlib.suppress(OSError):
        folder.mkdir(mode=0o700, exist_ok=True)
    return folder


@contextlib.contextmanager
def _launcher_env(class_path: jvm.DriverClassPath) -> Iterator[None]:
    """SPARK_DIST_CLASSPATH with the driver's `last` jars while PySpark launches the JVM (it copies this
    process's environment then; there is no other way to append to the launcher's class path)."""
    before = os.environ.get(jvm.DIST_CLASSPATH)
    value = class_path.dist_classpath(before)
    if value == before:
        yield
        return
    assert value is not None
    os.environ[jvm.DIST_CLASSPATH] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(jvm.DIST_CLASSPATH, None)
        else:
            os.environ[jvm.DIST_CLASSPATH] = before


def _no_checksum_sidecars(spark: SparkSession) -> None:
    """Hadoop's local file system writes no `.crc` sidecar beside each file this JVM writes (data, manifests,
    metadata JSON). Without Hadoop's native library (pyspark ships none) every file Hadoop creates locally costs
    a forked `chmod` (~5 ms), and the sidecars doubled them: a small run's Iceberg append commit took 111 ms
    with them, 92 ms without (measured 2026-11-27). Set on the JVM's cached local file system, the instance
    Spark and Iceberg's HadoopFileIO get; files are still read the same, and an existing sidecar still checked.
    (`fs.file.impl = RawLocalFileSystem` would do it too, but Iceberg's scans ask that class for a scheme
    it does not implement.)"""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    local = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark.sparkContext._jsc.hadoopConfiguration())
    local.setWriteChecksum(False)


def initialize_jdbc_catalog(spark: SparkSession, cfg: WapConfig) -> None:
    """Load a JDBC catalog (the embedded SQLite one, jdbc:sqlite or jdbc:postgresql) once in this JVM, under a
    lock that every wap process on the same catalog database takes.

    Iceberg's JdbcCatalog creates its tables and then migrates them to the V1 schema (CREATE TABLE, then
    ALTER TABLE) the first time a JVM loads it. Processes doing that at once on a new catalog database can
    collide, and the loser's first table lookup failed as an unexpected error (seen in CI: two `wap watch`
    workers and a `wap ingest` started together on one new catalog). Under the lock one JVM initializes at a
    time. Best effort: a failure here is left to the first real use, which loads the catalog again (Spark keeps
    no catalog that failed to load) and reports what is wrong as before.
    """
    from wapflow.runs.databases import jdbc_catalog_url

    url = jdbc_catalog_url(cfg)
    if url is None:
        return
    import sqlalchemy as sa

    from wapflow.runs.locks import publish_lock

    engine = sa.create_engine(url)
    try:
        lock_dir = (
            Path(engine.url.database).parent / "locks"
            if engine.dialect.name == "sqlite" and engine.url.database
            else cfg.state_dir() / "locks"
        )
        with publish_lock(engine, lock_dir, "iceberg-jdbc-catalog-init", timeout=120.0):
            spark._jsparkSession.sessionState().catalogManager().catalog(cfg.lakehouse.catalog_name)
    except Exception:  # noqa: BLE001 - best effort: the first real use of the catalog loads it again and says why
        return
    finally:
        engine.dispose()


_nodelay_threads: set[int] = set()
_nodelay_lock = threading.Lock()


def gateway_nodelay(spark: SparkSession) -> None:
    """Turn Nagle's algorithm off on the JVM's side of PySpark's gateway connections (one per Python thread).

    py4j leaves it on, and a reply between 8 KB and ~64 KB (Iceberg metadata as JSON, a plan, a long list)
    reaches Python only after TCP's delayed ACK: 40 ms per call, measured. A small run makes dozens of such
    calls (bench_outer). Done once per Python thread (DBOS steps run on their own threads); a no-op on
    Spark Connect, and given up quietly if py4j's internals differ (only speed depends on it).
    """
    me = threading.get_ident()
    if me in _nodelay_threads or is_connect(spark):
        return
    gateway = getattr(getattr(spark, "_sc", None), "_gateway", None)
    if gateway is None:
        return
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # py4j ships no types

    with _nodelay_lock:
        _nodelay_threads.add(me)
    try:
        server = gateway.java_gateway_server  # this thread's connection exists from this call on
        cls = server.getClass()
        while cls is not None and cls.getName() != "py4j.GatewayServer":
            cls = cls.getSuperclass()
        if cls is None:
            return
        field = cls.getDeclaredField("connections")
        field.setAccessible(True)
        conns = field.get(server)
        count = conns.size()
    except Py4JError:
        return
    for i in range(count):
        # Other threads and forked children open and close connections meanwhile: one may have no socket yet
        # or any more (null), be closed (SocketException) or be gone (IndexOutOfBounds); each is skipped.
        try:
            sock = conns.get(i).getSocket()
            if sock is not None and not sock.getTcpNoDelay():
                sock.setTcpNoDelay(True)
        except Py4JError:
            continue


def reset_gateway_nodelay() -> None:
    """Forget which threads have Nagle off: the calls from here on use new connections (a child forked from the
    process that holds the gateway: gateway_after_fork)."""
    with _nodelay_lock:
        _nodelay_threads.clear()


# What a forked child took over from its parent's gateway client and must neither use nor finalise: kept
# referenced until the child exits, so no socket of the parent's is closed or shut down from here.
_parent_gateway_state: list[object] = []


def gateway_after_fork(spark: SparkSession) -> None:
    """In a child forked from the process that holds the gateway (the engine runs each command so): its own
    py4j connections, and garbage collection only of the JVM objects it creates itself.

    The child has copies of the parent's connections (sockets the parent goes on using) and of every Python
    handle on a JVM object; dropping one of those handles must not free the parent's object in the JVM, so
    py4j ids up to one made right after the fork are never released from here. Objects the child makes are
    released as py4j does, by a finaliser thread of the child's own, and the rest by `release_objects`.
    """
    import collections

    from py4j.clientserver import FinalizerWorker  # type: ignore[import-untyped]  # py4j ships no types

    reset_gateway_nodelay()
    client = spark.sparkContext._gateway._gateway_client  # type: ignore[union-attr]
    _parent_gateway_state.append(dict(vars(client)))
    client.deque = collections.deque()
    if hasattr(client, "thread_connection"):
        client.thread_connection = threading.local()
    first = _object_number(spark.sparkContext._jvm.java.lang.Object()._target_id)  # type: ignore[union-attr]
    own_gc = type(client).garbage_collect_object

    def garbage_collect_object(target_id: str, *args: Any, **kwargs: Any) -> None:
        if _object_number(target_id) > first:
            own_gc(client, target_id, *args, **kwargs)

    client.garbage_collect_object = garbage_collect_object
    if hasattr(client, "finalizer_deque"):
        client.finalizer_deque = collections.deque()
        FinalizerWorker(client.finalizer_deque).start()
    gateway_nodelay(spark)


def release_objects(spark: SparkSession) -> None:
    """Before a forked child exits: the JVM objects it made and no longer holds are released now (its
    finaliser thread ends with it)."""
    import gc

    client = spark.sparkContext._gateway._gateway_client  # type: ignore[union-attr]
    gc.collect()
    pending = getattr(client, "finalizer_deque", None)
    while pending:
        item = pending.pop()
        if isinstance(item, tuple) and len(item) == 2:
            with contextlib.suppress(Exception):
                item[0].garbage_collect_object(item[1], enqueue=False)


def _object_number(target_id: str) -> int:
    """py4j names JVM objects o1, o2, ... in the order it makes them (other ids: never released from here)."""
    return int(target_id[1:]) if target_id[:1] == "o" and target_id[1:].isdigit() else -1


def _check_connect_client() -> None:
    """A Spark Connect client needs pyspark[connect]'s packages: say which extra installs them."""
    try:
        from pyspark.sql.connect.utils import check_dependencies

        check_dependencies("wapflow")
    except ImportError as e:
        raise EnvironmentProblem(
            f"Spark Connect needs packages that are not installed: {_first_line(e)}",
            hint="pip install 'wapflow[connect]' (grpcio, grpcio-status, googleapis-common-protos, zstandard, pandas)",
        ) from None


@contextlib.contextmanager
def _jvm_stderr_to(path: Path | None) -> Iterator[None]:
    """The JVM inherits this process's stderr when it starts: point it at the log file for that moment,
    so whatever the JVM itself prints for its whole life (launcher warnings, a stray stack trace) lands
    in the log, never on the terminal. Python's own stderr is restored right after."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.dup2(fd, 2)
        finally:
            os.close(fd)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
