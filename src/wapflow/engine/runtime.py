"""Where an engine lives and which one a command may use: the per-user runtime folder, the engine key, the files.

Standard library only (and two leaves of wapflow: its process helpers, spark.kind): the `wap` client reads it
before anything heavy is imported. An engine serves one configuration, named by its key: a hash of what the
engine fixed when it started (wapflow's version, the wap.toml path, its Spark settings (SPARK_SETTINGS), the
Python executable, the Java it found and the environment the JVM and the catalog read at start). The rest of
wap.toml is read by each command itself, so an edit of it keeps the engine. A configuration (its scope: the
wap.toml path, or the folder of a command without one) has one engine at a time: a command whose key differs
starts another, which retires the old one (it takes no new command, lets its commands end, then stops). Engines
are bounded per user (WAP_ENGINE_MAX, the least recently used retires) and none starts without the memory for
it (WAP_ENGINE_MIN_FREE against MemAvailable).

    <runtime>/engine-<key>.sock   the Unix socket (0600), in a folder only its user can enter (0700)
    <runtime>/engine-<key>.json   pid, key, config, scope, started, last request, retiring (`wap engine status`)
    <runtime>/engine-<key>.lock   held by the client that starts the engine: two racing clients start one
    <runtime>/engine-<key>.log    the engine's stdout and stderr (Python; the JVM logs to the state folder)

runtime = $XDG_RUNTIME_DIR/wapflow, else /tmp/wapflow-<uid>.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wapflow.lakehouse.processes import alive
from wapflow.spark.kind import is_connect_url

# Environment variables that turn the engine off (`off`) or on (`auto`) for this shell, whatever wap.toml says.
ENGINE_ENV = "WAP_ENGINE"
# The commands a client hands to the engine: those that start Spark. Long-running commands (watch, serve,
# dashboard) keep their own process; commands that read metadata only need no JVM to begin with.
COMMANDS = frozenset(
    {"run", "run-tables", "ingest", "backfill", "query", "revert", "maintain", "discard", "approve", "reject"}
)
# Commands that read table metadata without a JVM where wapflow reads the catalog itself
# (wapflow.lakehouse.metadata.source_for), and through Spark elsewhere: handed to the engine only then.
METADATA_COMMANDS = frozenset({"history", "branches", "diff"})
# The catalogs wapflow reads without Spark (a custom catalog too when it is a REST one).
_DIRECT_CATALOGS = ("sqlite", "nessie", "rest")
_REST_IMPL = "org.apache.iceberg.rest.RESTCatalog"
# The parts of wap.toml the engine's SparkSession fixes when it starts (part of its key): [lakehouse] but for the
# keys below, and [s3]. Every other part (tables, sources, checks, alerts, the run store, engine_idle) is read by
# each command, so editing it keeps the running engine.
SPARK_SETTINGS = ("lakehouse", "s3")
_NOT_SPARK_KEYS = frozenset({"engine", "engine_idle", "run_store", "publish_lock_timeout"})
# At most this many engines per user (WAP_ENGINE_MAX): starting another retires the least recently used.
MAX_ENV, DEFAULT_MAX = "WAP_ENGINE_MAX", 3
# An engine starts only when MemAvailable holds this much (WAP_ENGINE_MIN_FREE: 1g, 800m, or bytes).
MIN_FREE_ENV, DEFAULT_MIN_FREE = "WAP_ENGINE_MIN_FREE", "1g"
# The engine setting when wap.toml does not say (lakehouse.engine).
DEFAULT_MODE = "auto"

# The environment read when the engine (its JVM, its catalog) starts, and so part of its key. WAP_* variables
# are too, except those read per command (each request carries the client's whole environment).
_KEY_ENV_PREFIXES = ("WAP_", "SPARK_", "PYSPARK_", "HADOOP_", "AWS_", "JAVA_", "_JAVA_")
_KEY_ENV_NAMES = ("XDG_CACHE_HOME", "JDK_JAVA_OPTIONS")
_PER_COMMAND_ENV = (
    "WAP_ENGINE",
    "WAP_CONFIG",
    "WAP_CRASH_AT",
    "WAP_RAISE_AT",
    "WAP_PAUSE_AT",
    "WAP_STOP_MARKER",
    MAX_ENV,
    MIN_FREE_ENV,
)


class EngineUnavailable(Exception):
    """The engine cannot serve this command (why, in one line): the command runs in its own process."""


def runtime_dir() -> Path:
    """The per-user folder of engines' sockets and records."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return Path(xdg) / "wapflow"
    return Path(tempfile.gettempdir()) / f"wapflow-{os.getuid()}"


def ensure_runtime_dir() -> Path:
    """The runtime folder, created 0700; refused if another user owns it or others may enter it."""
    folder = runtime_dir()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.lstat()
    except OSError as e:
        raise EngineUnavailable(f"cannot create {folder}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise EngineUnavailable(f"{folder} is not a folder of this user")
    if st.st_mode & 0o077:
        try:
            folder.chmod(0o700)
        except OSError as e:
            raise EngineUnavailable(f"{folder} is open to other users and cannot be closed: {e.strerror}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise EngineUnavailable(f"{folder} is not writable")
    return folder


@dataclass(frozen=True)
class EnginePaths:
    """The files of the engine of one key."""

    folder: Path
    key: str

    def _file(self, ext: str) -> Path:
        return self.folder / f"engine-{self.key}.{ext}"

    @property
    def sock(self) -> Path:
        return self._file("sock")

    @property
    def info(self) -> Path:
        return self._file("json")

    @property
    def lock(self) -> Path:
        return self._file("lock")

    @property
    def log(self) -> Path:
        return self._file("log")


def config_path(argv: list[str], env: dict[str, str] | os._Environ[str], cwd: str) -> Path | None:
    """The wap.toml the command would read (as wapflow.config.find_config_path finds it): --config/-c in argv,
    else $WAP_CONFIG, else ./wap.toml; None for built-in defaults. A named file that is missing raises
    EngineUnavailable: the command itself says what is wrong."""
    explicit: str | None = None
    args = argv[: argv.index("--")] if "--" in argv else argv
    for i, a in enumerate(args):
        if a in ("--config", "-c") and i + 1 < len(args):
            explicit = args[i + 1]
        elif a.startswith("--config="):
            explicit = a.split("=", 1)[1]
        elif a.startswith("-c") and len(a) > 2 and not a.startswith("--"):
            explicit = a[2:]
    named = explicit or env.get("WAP_CONFIG")
    if named:
        p = Path(os.path.expanduser(named))
        p = p if p.is_absolute() else Path(cwd) / p
        if not p.is_file():
            raise EngineUnavailable(f"config file {named} does not exist")
        return p.resolve()
    p = Path(cwd) / "wap.toml"
    return p.resolve() if p.is_file() else None


def engine_setting(path: Path | None) -> tuple[str, bytes]:
    """wap.toml's `engine` ([lakehouse]) and the file's bytes. A file that does not parse, or whose master is a
    Spark Connect server, is left to the command itself (EngineUnavailable without a line: `off`)."""
    if path is None:
        return DEFAULT_MODE, b""
    try:
        data = path.read_bytes()
        doc = tomllib.loads(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return "off", b""
    lh = doc.get("lakehouse")
    lh = lh if isinstance(lh, dict) else {}
    mode = lh.get("engine", DEFAULT_MODE)
    master = lh.get("master", "")
    if not isinstance(mode, str) or (isinstance(master, str) and is_connect_url(master)):
        return "off", data
    return mode.strip(), data


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and os.path.isfile(os.path.join(home, "bin", "java")):
        return os.path.realpath(os.path.join(home, "bin", "java"))
    found = shutil.which("java")
    return os.path.realpath(found) if found else ""


def spark_settings(data: bytes) -> Any:
    """The part of wap.toml's bytes the engine's SparkSession fixes (SPARK_SETTINGS), in a canonical form: a
    change elsewhere in the file keeps the engine. Bytes that do not parse count whole."""
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return hashlib.sha256(data).hexdigest()
    part = {name: doc.get(name) for name in SPARK_SETTINGS}
    if isinstance(part["lakehouse"], dict):
        part["lakehouse"] = {k: v for k, v in part["lakehouse"].items() if k not in _NOT_SPARK_KEYS}
    return json.loads(json.dumps(part, sort_keys=True, default=str))


def engine_key(path: Path | None, data: bytes, cwd: str, env: dict[str, str] | os._Environ[str]) -> str:
    """The key of the engine that may serve a command on this configuration from this environment."""
    from wapflow import __version__

    fixed = {
        k: v
        for k, v in env.items()
        if (k.startswith(_KEY_ENV_PREFIXES) or k in _KEY_ENV_NAMES) and k not in _PER_COMMAND_ENV
    }
    parts = {
        "version": __version__,
        "config": str(path) if path is not None else "",
        # Without a wap.toml the defaults resolve against the folder the command runs in.
        "cwd": cwd if path is None else "",
        "spark": spark_settings(data),
        "python": sys.executable,
        "java": _java(),
        "env": sorted(fixed.items()),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def scope_of(path: Path | None, cwd: str) -> str:
    """The configuration an engine serves, whatever its key: the wap.toml path, or the defaults of a folder.
    One engine at a time per scope."""
    return str(path) if path is not None else f"defaults of {cwd}"


def metadata_needs_spark(command: str | None, data: bytes, env: dict[str, str] | os._Environ[str]) -> bool:
    """Whether a metadata command (METADATA_COMMANDS) reads through Spark on this configuration: a catalog
    wapflow does not read itself (wapflow.lakehouse.metadata.source_for), WAP_METADATA=spark, or a `diff`
    without PyIceberg (main's file metrics come from the manifests it reads)."""
    if command not in METADATA_COMMANDS:
        return False
    if env.get("WAP_METADATA", "").strip().lower() == "spark":
        return True
    if command == "diff":
        import importlib.util

        if importlib.util.find_spec("pyiceberg") is None:
            return True
    try:
        doc = tomllib.loads(data.decode("utf-8")) if data else {}
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # the command says what is wrong
    lh = doc.get("lakehouse")
    lh = lh if isinstance(lh, dict) else {}
    catalog = lh.get("catalog", "sqlite")
    props = lh.get("catalog_properties")
    props = props if isinstance(props, dict) else {}
    if catalog in _DIRECT_CATALOGS:
        return False
    if catalog == "jdbc":
        uri = str(props.get("uri", ""))
        return not uri.startswith(("jdbc:sqlite:", "jdbc:postgresql:"))
    if catalog == "custom":
        return not (props.get("type") == "rest" or props.get("catalog-impl") == _REST_IMPL)
    return True


def memory_available() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def parse_size(text: str) -> int:
    """Bytes of "1g", "800m", "512k" or a plain number (binary units); ValueError otherwise."""
    t = text.strip().lower().removesuffix("b")
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def engine_limits(env: dict[str, str] | os._Environ[str]) -> tuple[int, int]:
    """How many engines a user may run (WAP_ENGINE_MAX, at least 1) and the free memory one needs to start
    (WAP_ENGINE_MIN_FREE); EngineUnavailable names a value that is not one."""
    raw_max = env.get(MAX_ENV, "").strip() or str(DEFAULT_MAX)
    raw_free = env.get(MIN_FREE_ENV, "").strip() or DEFAULT_MIN_FREE
    try:
        most = int(raw_max)
        if most < 1:
            raise ValueError(raw_max)
    except ValueError:
        raise EngineUnavailable(f"{MAX_ENV}={raw_max!r} is not a number of engines (1 or more)") from None
    try:
        free = parse_size(raw_free)
    except ValueError:
        raise EngineUnavailable(f"{MIN_FREE_ENV}={raw_free!r} is not a size (e.g. 1g, 800m)") from None
    return most, free


def read_info(path: Path) -> dict[str, Any] | None:
    """A record in the runtime folder, an engine's or `wap serve`'s (None if missing or unreadable)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def serve_record(path: Path | None, cwd: str) -> Path:
    """The record `wap serve` keeps in the runtime folder while it serves the configuration at `path` (None: the
    defaults of `cwd`), named by that configuration as config_path finds it, so a client finds it before wap.toml
    is loaded. Such a command is the server's (a thin Connect client in its own process), not an engine's."""
    named = scope_of(path, cwd)
    return runtime_dir() / f"serve-{hashlib.sha256(named.encode()).hexdigest()[:16]}.json"


def served(path: Path | None, cwd: str) -> bool:
    """`wap serve` serves this configuration (its record names a live process)."""
    doc = read_info(serve_record(path, cwd))
    pid = doc.get("pid") if doc else None
    return isinstance(pid, int) and pid > 0 and alive(pid)


def lost_message(pid: object, log: Path) -> str:
    """What a client says when its command's engine ended under it (told by the client, or by the engine when
    only the command's process was killed)."""
    return (
        f"error: the wapflow engine (pid {pid}) ended while running the command; a run under way resumes "
        f"with the command `wap runs` shows for it (the engine's log: {log})\n"
    )


def write_info(path: Path, doc: dict[str, Any]) -> None:
    """Replace an engine's record atomically (readers never see half of one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # writers may race
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc))
    os.replace(tmp, path)


def is_engine(pid: int, key: str) -> bool:
    """The process is the engine of this key (not another process that got its pid)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return alive(pid)
    return b"wapflow.cli.engine_main" in cmd and key.encode() in cmd


def engines(folder: Path | None = None) -> list[dict[str, Any]]:
    """The records of the engines under the runtime folder that are alive; a dead one's files are removed."""
    folder = folder or runtime_dir()
    found = []
    for info in sorted(folder.glob("engine-*.json")) if folder.is_dir() else []:
        doc = read_info(info)
        if doc is None:
            continue
        pid, key = int(doc.get("pid") or 0), str(doc.get("key", ""))
        if alive(pid) and is_engine(pid, key):
            found.append(doc)
        else:
            remove_files(EnginePaths(folder, key), pid)
    return found


def remove_files(paths: EnginePaths, pid: int | None = None) -> None:
    """An engine's socket and record, if they are still the engine `pid`'s (or nobody's)."""
    doc = read_info(paths.info)
    if pid is not None and doc is not None and int(doc.get("pid") or 0) not in (pid, 0):
        return
    for p in (paths.sock, paths.info):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def memory_bytes(pid: int) -> int:
    """Resident memory of a process and its children (the engine and its JVM)."""
    from wapflow.lakehouse.processes import children

    total = 0
    for p in [pid, *children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            continue
    return total


# Sent to an engine to retire it: it takes no new command, lets the running ones end, then stops with its JVM.
RETIRE_SIGNAL = signal.SIGUSR1


def retire(doc: dict[str, Any]) -> bool:
    """Ask the engine of a record (engines()) to retire; whether it was asked (it is that engine)."""
    pid, key = int(doc.get("pid") or 0), str(doc.get("key", ""))
    if not pid or not alive(pid) or not is_engine(pid, key):
        return False
    try:
        os.kill(pid, RETIRE_SIGNAL)
    except OSError:
        return False
    return True


def make_room(key: str, scope: str, most: int | None, folder: Path | None = None) -> list[dict[str, Any]]:
    """Before the engine `key` of `scope` starts: the other engines of the same scope retire (a configuration
    has one engine at a time), then (`most` given) the least recently used ones until fewer than `most` remain.
    The records of the engines asked to retire."""
    others = [d for d in engines(folder) if d.get("key") != key and not d.get("retiring")]
    asked = [d for d in others if d.get("scope") == scope and retire(d)]
    rest = sorted((d for d in others if d not in asked), key=lambda d: float(d.get("last_used") or 0))
    while most is not None and len(rest) >= most:
        d = rest.pop(0)
        if retire(d):
            asked.append(d)
    return asked
