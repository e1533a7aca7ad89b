"""A local Project Nessie server from its Quarkus runner jar: `wap nessie up|down|status` and the tests.

The runner jar (an uber jar, ~245 MB) is fetched once from Maven Central with wapflow's checksum-verified
downloader and cached beside the Spark jars. The version store is RocksDB in a folder, so branches and
commits survive restarts; the server listens on 127.0.0.1 only. Nessie 0.99 is compiled for Java 21, so
the server gets its own Java (21+), found independently of the Java 17 Spark runs on.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx

from wapflow.errors import EnvironmentProblem, UsageError
from wapflow.lakehouse import jvm
from wapflow.lakehouse.processes import alive, free_port, terminate

# The newest nessie-quarkus runner on Maven Central (0.100+ are not published there).
NESSIE_VERSION = "0.99.0"
NESSIE_RUNNER = jvm.Artifact("org.projectnessie.nessie", "nessie-quarkus", NESSIE_VERSION, classifier="runner")
NESSIE_MIN_JAVA = 21
HOST = "127.0.0.1"
STATE_FILE = "nessie-server.json"
JAVA_ENV = "WAP_NESSIE_JAVA"

Progress = Callable[[str], None]


def fetch_runner(
    jars_dir: str | None = None, repo: str = "https://repo1.maven.org/maven2", progress: Progress | None = None
) -> Path:
    """The runner jar, downloaded (sha1-verified) into the jar cache on first use."""
    folder = Path(jars_dir).expanduser() if jars_dir else jvm.default_jars_dir()
    return jvm.fetch_artifact(NESSIE_RUNNER, folder, repo, progress)


def find_server_java() -> str:
    """A Java 21+ for the server: $WAP_NESSIE_JAVA, then JAVA_HOME / PATH, then JDKs under /usr/lib/jvm."""
    candidates: list[str] = []
    env = os.environ.get(JAVA_ENV)
    if env:
        candidates.append(env)
    default = jvm.find_java()
    if default:
        candidates.append(default)
    for root in (Path("/usr/lib/jvm"), Path("/Library/Java/JavaVirtualMachines")):
        if root.is_dir():
            for d in sorted(root.iterdir(), reverse=True):
                for sub in ("bin/java", "Contents/Home/bin/java"):
                    if (d / sub).is_file():
                        candidates.append(str(d / sub))
    seen: dict[str, int | None] = {}
    for c in candidates:
        if c in seen:
            continue
        seen[c] = jvm.java_major_version(c)
        if (seen[c] or 0) >= NESSIE_MIN_JAVA:
            return c
    found = ", ".join(f"{k} (Java {v})" for k, v in seen.items()) or "none"
    raise EnvironmentProblem(
        f"the Nessie server {NESSIE_VERSION} needs Java {NESSIE_MIN_JAVA} or newer; found: {found}",
        hint=f"install a JDK 21+ (Spark can stay on 17) and set ${JAVA_ENV} to its bin/java",
    )


@dataclass
class ServerState:
    """What `wap nessie up` leaves in the data folder so `down`/`status` (another process) find the server."""

    pid: int
    port: int
    url: str
    log: str

    @classmethod
    def read(cls, data_dir: Path) -> ServerState | None:
        f = data_dir / STATE_FILE
        if not f.is_file():
            return None
        d = json.loads(f.read_text(encoding="utf-8"))
        return cls(int(d["pid"]), int(d["port"]), str(d["url"]), str(d["log"]))

    def write(self, data_dir: Path) -> None:
        (data_dir / STATE_FILE).write_text(json.dumps(self.__dict__, indent=2), encoding="utf-8")


def api_url(port: int, host: str = HOST) -> str:
    return f"http://{host}:{port}/api/v2"


class NessieServer:
    """One Nessie server process with a RocksDB store in data_dir."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        jars_dir: str | None = None,
        repo: str = "https://repo1.maven.org/maven2",
        startup_timeout: float = 180.0,
        heap: str = "512m",
        progress: Progress | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.port = port or free_port()
        self.jars_dir, self.repo = jars_dir, repo
        self.startup_timeout = startup_timeout
        self.heap = heap
        self.progress = progress
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_in: float | None = None

    @property
    def url(self) -> str:
        return api_url(self.port)

    @property
    def log_path(self) -> Path:
        return self.data_dir / "nessie.log"

    def command(self, java: str, jar: Path) -> list[str]:
        props = {
            "nessie.version.store.type": "ROCKSDB",
            "nessie.version.store.persist.rocks.database-path": str(self.data_dir / "rocksdb"),
            "quarkus.http.host": HOST,
            "quarkus.http.port": str(self.port),
            # Health/metrics interface: loopback and a free port, so several servers never collide on 9000.
            "quarkus.management.host": HOST,
            "quarkus.management.port": "0",
            "quarkus.http.access-log.enabled": "false",
            "quarkus.log.file.enable": "false",
            "quarkus.otel.sdk.disabled": "true",
        }
        return [
            java,
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "--enable-native-access=ALL-UNNAMED",
            *[f"-D{k}={v}" for k, v in props.items()],
            "-jar",
            str(jar),
        ]

    def start(self, *, detach: bool = False) -> NessieServer:
        """Start and wait until the REST API answers; `detach` leaves it running after this process exits."""
        state = ServerState.read(self.data_dir)
        if state is not None and alive(state.pid):
            raise UsageError(
                f"a Nessie server (pid {state.pid}) already uses {self.data_dir}, at {state.url}",
                hint="stop it with `wap nessie down`, or use another --dir",
            )
        java = find_server_java()
        jar = fetch_runner(self.jars_dir, self.repo, self.progress)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = self.command(java, jar)
        if java_major_too_old_for_flag(java):
            cmd.remove("--enable-native-access=ALL-UNNAMED")
        t0 = time.perf_counter()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=detach
            )
        if not self._wait_ready():
            self.stop()
            tail = self.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
            raise EnvironmentProblem(
                f"the Nessie server did not start within {self.startup_timeout:.0f}s: " + " | ".join(tail),
                hint=f"see {self.log_path}",
            )
        self.started_in = time.perf_counter() - t0
        ServerState(self.proc.pid, self.port, self.url, str(self.log_path)).write(self.data_dir)
        return self

    def _wait_ready(self) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if httpx.get(f"{self.url}/config", timeout=2.0).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        return False

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc.pid, lambda: self.proc.poll() is not None)  # type: ignore[union-attr]  # proc is set in this branch; mypy cannot see it inside the lambda
            self.proc.wait(timeout=5)
            self.proc = None
        (self.data_dir / STATE_FILE).unlink(missing_ok=True)

    def __enter__(self) -> NessieServer:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def java_major_too_old_for_flag(java: str) -> bool:
    """--enable-native-access exists from Java 22 on (it silences RocksDB's native-library warning)."""
    return (jvm.java_major_version(java) or 0) < 22


def stop_detached(data_dir: Path) -> ServerState | None:
    """Stop the server `wap nessie up` left in data_dir; None if none was running."""
    data_dir = Path(data_dir).expanduser().resolve()
    state = ServerState.read(data_dir)
    if state is None:
        return None
    if alive(state.pid):
        terminate(state.pid, lambda: not alive(state.pid))
    (data_dir / STATE_FILE).unlink(missing_ok=True)
    return state


def status(data_dir: Path) -> dict[str, object]:
    data_dir = Path(data_dir).expanduser().resolve()
    state = ServerState.read(data_dir)
    if state is None or not alive(state.pid):
        return {"running": False, "dir": str(data_dir)}
    try:
        ok = httpx.get(f"{state.url}/config", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        ok = False
    return {
        "running": True,
        "answering": ok,
        "pid": state.pid,
        "url": state.url,
        "dir": str(data_dir),
        "log": state.log,
    }
