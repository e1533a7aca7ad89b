"""Real Spark servers for the tests, from the pip pyspark package (a usable SPARK_HOME):

- `StandaloneCluster`: a standalone master and two workers (1 core, 1 GB each) on 127.0.0.1, started
  once per test session, ready when the master's web UI JSON lists both workers ALIVE;
- `executor_pids`: the executor JVMs (CoarseGrainedExecutorBackend) the workers started, to kill one.

Each server runs in its own process group, killed as a group at the end (also when a test failed).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.cli_harness import BASE_FAST_START_JVM
from wapflow.lakehouse.connect import spark_home
from wapflow.lakehouse.processes import free_port

HOST = "127.0.0.1"
CHECKS = '[{ check = "not_null", column = "passenger_count" }, { check = "unique", columns = ["trip_id"] }]'
TABLES = {  # the tables of tests/process/test_cluster.py and tests/process/test_connect.py
    "cl.pub": "",
    "cl.quar": 'on_row_failure = "quarantine"\n',
    "cl.conc": "",
    "cl.kill": "",
}


def cluster_config(
    folder: Path, master: str, catalog: str = "lake", tables: dict[str, str] = TABLES, lakehouse: str = ""
) -> Path:
    """A wap.toml for a cluster master: small executors, at most the cluster's two cores; `lakehouse`: more
    [lakehouse] lines."""
    (folder / "lakehouse").mkdir(parents=True, exist_ok=True)  # PyIceberg's reader opens its catalog.db at once
    sections = "".join(f'[tables."{t}"]\n{extra}checks = {CHECKS}\n\n' for t, extra in tables.items())
    cfg = folder / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "{folder / "lakehouse"}"\ncatalog_name = "{catalog}"\nmaster = "{master}"\n'
        f'driver_memory = "1g"\n{lakehouse}\n[lakehouse.spark_conf]\n"spark.sql.shuffle.partitions" = "2"\n'
        '"spark.executor.memory" = "512m"\n"spark.cores.max" = "2"\n"spark.executor.cores" = "1"\n\n' + sections
    )
    return cfg


def ids(rows: list[dict]) -> list[int]:
    return sorted(r["trip_id"] for r in rows)


def server_env(jvm_options: str = "") -> dict[str, str]:
    """The servers' environment; `jvm_options` reach the master, the workers and the executors they start (a
    worker starts its executors with its own environment)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE", "MASTER")}
    env.update({"SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": HOST, "SPARK_NO_DAEMONIZE": "1"})
    if jvm_options:
        env["JAVA_TOOL_OPTIONS"] = jvm_options
    return env


def kill_group(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM to the process group, SIGKILL after `grace` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


class StandaloneCluster:
    def __init__(self, base: Path, workers: int = 2, memory: str = "1G", jvm_options: str = "") -> None:
        self.base = base
        self.jvm_options = jvm_options  # the tests': JVMs that start fast (the benchmark's: none)
        self.workers = workers
        self.memory = memory  # each worker's, for its executors (the benchmark's 10M-row batches need more)
        self.port = free_port()
        self.webui_port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with (self.base / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=server_env(self.jvm_options),
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def start(self, timeout: float = 120.0) -> StandaloneCluster:
        master_cls = "org.apache.spark.deploy.master.Master"
        self._spawn(
            "master", [master_cls, "--host", HOST, "--port", str(self.port), "--webui-port", str(self.webui_port)]
        )
        for i in range(self.workers):
            work = self.base / f"worker{i}"
            work.mkdir(parents=True, exist_ok=True)
            self._spawn(
                f"worker{i}",
                ["org.apache.spark.deploy.worker.Worker", self.url, "--host", HOST, "--cores", "1",
                 "--memory", self.memory, "--work-dir", str(work), "--webui-port", "0"],
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                break
            if self.alive_workers() >= self.workers:
                return self
            time.sleep(0.5)
        self.stop()
        logs = {p.name: p.read_text(errors="replace")[-800:] for p in self.base.glob("*.log")}
        raise RuntimeError(f"the standalone cluster did not come up within {timeout:.0f}s: {logs}")

    def alive_workers(self) -> int:
        try:
            doc = httpx.get(f"http://{HOST}:{self.webui_port}/json/", timeout=2.0).json()
        except (httpx.HTTPError, ValueError):
            return 0
        return sum(1 for w in doc.get("workers", []) if w.get("state") == "ALIVE")

    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.procs[1:]]

    def stop(self) -> None:
        for proc in reversed(self.procs):
            kill_group(proc)
        self.procs.clear()


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _started(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def executor_pids(worker_pids: list[int]) -> list[int]:
    """Executor JVMs started by these workers (their children running CoarseGrainedExecutorBackend), newest
    first: an executor of an application that just ended may linger for a moment."""
    out: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"CoarseGrainedExecutorBackend" in cmd and _ppid(int(entry.name)) in worker_pids:
            out.append(int(entry.name))
    return sorted(out, key=_started, reverse=True)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """One standalone master and two workers for the test session; stopped at the end, also on failure."""
    # Each `wap run` on the cluster starts two executor JVMs, which live for seconds: C1 and the serial collector
    # start them sooner (as the tests' `wap` processes, support.cli_harness.BASE_FAST_START_JVM, without the archive).
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), jvm_options=BASE_FAST_START_JVM)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
