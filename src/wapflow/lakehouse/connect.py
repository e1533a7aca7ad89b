"""A local Spark Connect server for one wap.toml: `wap serve`, and what other `wap` commands look for.

Every `wap` command with a local master starts its own JVM (3-4 s before the first byte is read). A Spark
Connect server started once by `wap serve` keeps that JVM warm: commands on the same config find its
endpoint in `<state dir>/connect-server.json`, check that the process is alive and the port answers, and
connect to it instead (a thin gRPC client, no JVM of their own).

The server is `spark-submit --class SparkConnectServer` from the pip pyspark package (a usable SPARK_HOME),
with what a Connect client cannot set: wapflow's jars, the Iceberg SQL extensions, the catalog of the config
(also registered per client session, so any catalog of the same shape works), S3A settings for an S3 config
and the config's own spark_conf. It listens on 127.0.0.1 only. Credentials written in wap.toml reach it
through its environment (the AWS SDK's default chain), never its command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from wapflow.config import WapConfig
from wapflow.errors import EnvironmentProblem, UsageError
from wapflow.lakehouse import class_archive, jvm, tls
from wapflow.lakehouse.processes import alive, terminate
from wapflow.spark.kind import is_connect_url

HOST = "127.0.0.1"
DEFAULT_PORT = 15002
STATE_FILE = "connect-server.json"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
Progress = Callable[[str], None]


def spark_home() -> Path:
    """The pip pyspark package: it has bin/spark-submit and jars/, which is all a SPARK_HOME needs here."""
    import pyspark

    return Path(pyspark.__file__).parent


def connect_jar() -> Path:
    """Spark Connect's server jar, shipped in pyspark's jars/ (it is not on Spark's default classpath)."""
    found = sorted((spark_home() / "jars").glob("spark-connect_*.jar"))
    if not found:
        raise EnvironmentProblem(
            f"pyspark at {spark_home()} has no jars/spark-connect_*.jar",
            hint="reinstall pyspark 4.1 (`pip install --force-reinstall 'pyspark>=4.1,<4.2'`)",
        )
    return found[-1]


def endpoint(port: int, host: str = HOST) -> str:
    return f"sc://{host}:{port}"


def port_answers(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _port_free(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class ServerState:
    """What `wap serve` records for other commands: where to connect, and which process to check."""

    pid: int
    port: int
    endpoint: str
    log: str
    config: str

    @classmethod
    def read(cls, state_dir: Path) -> ServerState | None:
        try:
            return cls(**json.loads((state_dir / STATE_FILE).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def write(self, state_dir: Path) -> None:
        tmp = state_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(state_dir / STATE_FILE)


def running(cfg: WapConfig) -> ServerState | None:
    """The server `wap serve` started for this config, if its process is alive and its port answers."""
    state = ServerState.read(cfg.state_dir())
    if state is None or not alive(state.pid) or not port_answers(state.port):
        return None
    return state


def server_confs(cfg: WapConfig, port: int, plan: jvm.JarPlan, log_file: Path) -> dict[str, str]:
    """The static settings a Connect client cannot give: jars, extensions, catalog, S3A, spark_conf."""
    from wapflow.lakehouse import spark_s3 as s3_spark
    from wapflow.lakehouse.catalog_props import ICEBERG_EXTENSIONS, SPARK_CATALOG_CLASS, catalog_properties

    lh = cfg.lakehouse
    master = lh.master if not is_connect_url(lh.master) else "local[*]"
    log_conf = resources.files("wapflow.lakehouse").joinpath("log4j2.properties")
    java_opts = [f"-Dlog4j2.configurationFile=file:{log_conf}", f"-Dwap.log.file={log_file}", "-Dwap.console.level=off"]
    java_opts += tls.java_options(cfg)  # [lakehouse] ca_bundle: the catalog clients' trust store
    java_opts += class_archive.java_options(cfg)  # the driver's classes mapped (when `wap setup` made the archive)
    confs = {
        "spark.master": master,
        "spark.app.name": "wapflow-connect",
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(port),
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.driver.memory": lh.driver_memory,
        "spark.driver.extraJavaOptions": " ".join(f'"{o}"' for o in java_opts),
        "spark.ui.showConsoleProgress": "false",
        f"spark.sql.catalog.{lh.catalog_name}": SPARK_CATALOG_CLASS,
    }
    if master.startswith("local"):
        confs.update(
            {
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "8",
                "spark.driver.host": HOST,
                "spark.driver.bindAddress": HOST,
            }
        )
    class_path = jvm.driver_class_path(plan, local=master.startswith("local"))  # its `last` jars: server_env
    confs["spark.jars"] = ",".join([str(connect_jar()), *class_path.shipped])
    if plan.packages:
        confs["spark.jars.packages"] = ",".join(plan.packages)
    for k, v in catalog_properties(cfg).items():
        confs[f"spark.sql.catalog.{lh.catalog_name}.{k}"] = v
    if s3_spark.uses_s3(cfg):
        for k, value in s3_spark.hadoop_settings(s3_spark.s3_settings(cfg)).items():
            if value is not None:
                confs[f"spark.hadoop.{k}"] = value
    for key, val in lh.spark_conf.items():
        confs[key] = str(val).lower() if isinstance(val, bool) else str(val)
    if extra := class_path.extra_class_path(confs.get(jvm.EXTRA_CLASS_PATH)):
        confs[jvm.EXTRA_CLASS_PATH] = extra
    return confs


def server_env(cfg: WapConfig, plan: jvm.JarPlan) -> dict[str, str]:
    """The server's environment: pyspark as SPARK_HOME, the jars after Spark's own on its class path
    (jvm.DriverClassPath), loopback, and wap.toml's S3 keys (AWS default chain)."""
    from wapflow.lakehouse import spark_s3 as s3_spark

    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE", "MASTER")}
    env["SPARK_HOME"] = str(spark_home())
    dist = jvm.driver_class_path(plan, local=True).dist_classpath(env.get(jvm.DIST_CLASSPATH))  # `last` only
    if dist:
        env[jvm.DIST_CLASSPATH] = dist
    env.setdefault("SPARK_LOCAL_IP", HOST)
    env.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    if s3_spark.uses_s3(cfg):
        s = s3_spark.s3_settings(cfg)
        names = {
            "access_key_id": "AWS_ACCESS_KEY_ID",
            "secret_access_key": "AWS_SECRET_ACCESS_KEY",
            "session_token": "AWS_SESSION_TOKEN",
        }
        for field, name in names.items():
            secret = getattr(s, field)
            if secret is not None:
                env[name] = secret.get_secret_value()
    return env


class ConnectServer:
    """One Spark Connect server process (its own process group) for one config."""

    def __init__(
        self,
        cfg: WapConfig,
        port: int = DEFAULT_PORT,
        *,
        progress: Progress | None = None,
        startup_timeout: float = 180.0,
        record: bool = True,
    ) -> None:
        self.cfg = cfg
        self.port = port
        self.progress = progress or (lambda _m: None)
        self.startup_timeout = startup_timeout
        # Whether to write the state file other `wap` commands look for (tests' shared servers do not).
        self.record = record
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_in: float | None = None
        folder = cfg.state_dir() / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        self.log_path = folder / f"connect-server-{port}.log"

    @property
    def endpoint(self) -> str:
        return endpoint(self.port)

    def command(self, confs: dict[str, str]) -> list[str]:
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS]
        for k, v in confs.items():
            cmd += ["--conf", f"{k}={v}"]
        # spark-submit needs a primary resource: the Connect jar itself (it holds SERVER_CLASS).
        return [*cmd, str(connect_jar())]

    def start(self) -> ConnectServer:
        """Start the server and wait until its gRPC port answers (the SparkContext is up by then)."""
        state_dir = self.cfg.state_dir()
        other = running(self.cfg)
        if other is not None and self.record:
            raise UsageError(
                f"a Spark Connect server for this config already runs at {other.endpoint} (pid {other.pid})",
                hint="use it as it is, or stop it with `wap serve --stop`",
            )
        if not (1 <= self.port <= 65535):
            raise UsageError(f"--port {self.port} is not a TCP port", hint="use a port between 1024 and 65535")
        if not _port_free(self.port):
            raise UsageError(
                f"port {self.port} on {HOST} is already in use",
                hint="pick another with --port, or stop what listens there",
            )
        jvm.check_java()
        plan = jvm.plan_for(self.cfg, self.progress)
        confs = server_confs(self.cfg, self.port, plan, self.log_path)
        self.progress(f"starting a Spark Connect server on {self.endpoint} ({confs['spark.master']})")
        t0 = time.perf_counter()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(confs),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=server_env(self.cfg, plan),
                start_new_session=True,
            )
        if not self._wait_ready():
            code = self.proc.poll()
            self.stop()
            tail = self.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-4:]
            why = (
                f"exited with code {code}" if code is not None else f"did not answer within {self.startup_timeout:.0f}s"
            )
            raise EnvironmentProblem(
                f"the Spark Connect server {why}: " + " | ".join(t.strip() for t in tail)[:600],
                hint=f"see {self.log_path}; `wap setup` checks Java and the jars",
            )
        self.started_in = time.perf_counter() - t0
        if self.record:
            ServerState(self.proc.pid, self.port, self.endpoint, str(self.log_path), str(self.cfg.base_dir)).write(
                state_dir
            )
        return self

    def _wait_ready(self) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if port_answers(self.port):
                return True
            time.sleep(0.2)
        return False

    def wait(self) -> int:
        """Block until the server exits (or this process is interrupted); its exit code."""
        assert self.proc is not None
        return self.proc.wait()

    def stop(self) -> None:
        """SIGTERM to the server's process group (Spark's shutdown hook stops the context), SIGKILL after 20 s."""
        if self.proc is not None:
            proc = self.proc
            terminate(proc.pid, lambda: proc.poll() is not None, group=True)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            self.proc = None
        if self.record:
            state = ServerState.read(self.cfg.state_dir())
            if state is not None and state.port == self.port:
                (self.cfg.state_dir() / STATE_FILE).unlink(missing_ok=True)


def status(cfg: WapConfig) -> dict[str, object]:
    """Whether a `wap serve` server for this config runs and answers."""
    state = ServerState.read(cfg.state_dir())
    if state is None or not alive(state.pid):
        return {"running": False, "state_dir": str(cfg.state_dir())}
    return {
        "running": True,
        "answering": port_answers(state.port),
        "pid": state.pid,
        "endpoint": state.endpoint,
        "log": state.log,
    }


def stop_recorded(cfg: WapConfig) -> ServerState | None:
    """Stop the server another `wap serve` recorded for this config (`wap serve --stop`); None if none runs."""
    state = ServerState.read(cfg.state_dir())
    if state is None:
        return None
    (cfg.state_dir() / STATE_FILE).unlink(missing_ok=True)
    if not alive(state.pid):
        return None
    terminate(state.pid, lambda: not alive(state.pid), group=True)
    return state
