"""The test session's Iceberg REST catalog: Apache Iceberg's own REST server fixture (the code behind the
apache/iceberg-rest-fixture image), run from its Maven Central jars on a free 127.0.0.1 port, over a JDBC
catalog on a SQLite file and a warehouse folder, both in a temporary folder. Started once per session, only
when a test asks for it, and stopped at the end (its process group killed), even on failure.

A test asks for the `rest_catalog` fixture by name: tests/conftest.py declares this module a pytest plugin.

The jars: org.apache.iceberg:iceberg-open-api:1.11.0:test-fixtures holds the server (RESTCatalogServer,
RESTServerCatalogAdapter); its pom lists no dependencies (the image uses a shadow jar that is not on Maven
Central). The list below is Iceberg 1.11.0's `testFixturesImplementation` of project(':iceberg-open-api')
(its build.gradle at tag apache-iceberg-1.11.0, versions from gradle/libs.versions.toml) resolved with
`mvn dependency:tree` on a throwaway pom whose dependencies were: iceberg-open-api:1.11.0:test-fixtures,
iceberg-core:1.11.0, iceberg-core:1.11.0:tests (RESTCatalogAdapter, RESTCatalogServlet), jetty-ee10-servlet,
jetty-compression-server and jetty-compression-gzip 12.1.8, slf4j-simple 2.0.17. Left out, because this
server never loads them: the aws/gcp/azure/bigquery modules and bundles (cloud FileIOs, vended credentials)
and junit. Two substitutions: hadoop-common 3.4.3 (only Configuration and the local FileSystem of
HadoopFileIO are used) becomes the shaded hadoop-client-api/-runtime 3.4.2 that pyspark 4.1 ships (taken
from pyspark's jars folder when it has that version, else fetched), and sqlite-jdbc 3.53.0.0 becomes the
3.50.3.0 wapflow itself uses (already in the jar cache).

Bound to 127.0.0.1: RESTCatalogServer.main listens on every interface (Jetty's `new Server(port)`), so a
small launcher (LAUNCHER below, compiled by `java` from source at start) runs the fixture's own catalog
set-up (RESTCatalogServer.initializeBackendCatalog, CATALOG_* environment variables) and adapter
(RESTServerCatalogAdapter), reached by reflection as they are package-private, behind the same servlet and
gzip handler on a loopback-only connector. Port 0 lets the kernel pick a free port; the launcher prints it.
It also stops when its stdin (a pipe from the test process) closes, so a test run killed outright leaves no
server behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from wapflow.lakehouse import jvm

HOST = "127.0.0.1"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
ICEBERG = jvm.ICEBERG_VERSION  # 1.11.0: the server speaks the same Iceberg as Spark's runtime jar
JETTY = "12.1.8"
HADOOP = "3.4.2"  # the Hadoop pyspark 4.1 bundles

A = jvm.Artifact
SERVER_ARTIFACTS = (
    A("org.apache.iceberg", "iceberg-open-api", ICEBERG, classifier="test-fixtures"),
    A("org.apache.iceberg", "iceberg-core", ICEBERG),
    A("org.apache.iceberg", "iceberg-core", ICEBERG, classifier="tests"),
    A("org.apache.iceberg", "iceberg-api", ICEBERG),
    A("org.apache.iceberg", "iceberg-common", ICEBERG),
    A("org.apache.iceberg", "iceberg-bundled-guava", ICEBERG),
    A("org.apache.avro", "avro", "1.12.1"),
    A("org.apache.commons", "commons-compress", "1.28.0"),
    A("commons-codec", "commons-codec", "1.19.0"),
    A("commons-io", "commons-io", "2.20.0"),
    A("org.apache.commons", "commons-lang3", "3.18.0"),
    A("io.airlift", "aircompressor", "2.0.3"),
    A("org.apache.httpcomponents.client5", "httpclient5", "5.6.1"),
    A("org.apache.httpcomponents.core5", "httpcore5", "5.4"),
    A("org.apache.httpcomponents.core5", "httpcore5-h2", "5.4"),
    A("com.fasterxml.jackson.core", "jackson-core", "2.21.3"),
    A("com.fasterxml.jackson.core", "jackson-databind", "2.21.3"),
    A("com.fasterxml.jackson.core", "jackson-annotations", "2.21"),
    A("com.github.ben-manes.caffeine", "caffeine", "2.9.3"),
    A("org.checkerframework", "checker-qual", "3.19.0"),
    A("com.google.errorprone", "error_prone_annotations", "2.10.0"),
    A("org.roaringbitmap", "RoaringBitmap", "1.6.14"),
    A("org.slf4j", "slf4j-api", "2.0.17"),
    A("org.slf4j", "slf4j-simple", "2.0.17"),
    A("jakarta.servlet", "jakarta.servlet-api", "6.0.0"),
    A("org.eclipse.jetty.ee10", "jetty-ee10-servlet", JETTY),
    A("org.eclipse.jetty", "jetty-security", JETTY),
    A("org.eclipse.jetty", "jetty-server", JETTY),
    A("org.eclipse.jetty", "jetty-http", JETTY),
    A("org.eclipse.jetty", "jetty-io", JETTY),
    A("org.eclipse.jetty", "jetty-session", JETTY),
    A("org.eclipse.jetty", "jetty-util", JETTY),
    A("org.eclipse.jetty.compression", "jetty-compression-server", JETTY),
    A("org.eclipse.jetty.compression", "jetty-compression-common", JETTY),
    A("org.eclipse.jetty.compression", "jetty-compression-gzip", JETTY),
    jvm.SQLITE_JDBC,
)
HADOOP_ARTIFACTS = (
    A("org.apache.hadoop", "hadoop-client-api", HADOOP),
    A("org.apache.hadoop", "hadoop-client-runtime", HADOOP),
)

LAUNCHER_CLASS = "LoopbackRESTCatalogServer"
LAUNCHER = """\
import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.compression.gzip.GzipCompression;
import org.eclipse.jetty.compression.server.CompressionHandler;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

/** Iceberg's REST fixture (catalog from CATALOG_* variables, its adapter) on one host only: args host port. */
public class LoopbackRESTCatalogServer {
  public static void main(String[] args) throws Exception {
    Class<?> fixture = Class.forName("org.apache.iceberg.rest.RESTCatalogServer");
    Constructor<?> newFixture = fixture.getDeclaredConstructor();
    newFixture.setAccessible(true);
    Method init = fixture.getDeclaredMethod("initializeBackendCatalog");
    init.setAccessible(true);
    Object context = init.invoke(newFixture.newInstance());
    Class<?> adapterClass = Class.forName("org.apache.iceberg.rest.RESTServerCatalogAdapter");
    Constructor<?> newAdapter = adapterClass.getDeclaredConstructor(context.getClass());
    newAdapter.setAccessible(true);
    RESTCatalogAdapter adapter = (RESTCatalogAdapter) newAdapter.newInstance(context);

    ServletContextHandler handler = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    handler.addServlet(new ServletHolder(new RESTCatalogServlet(adapter)), "/*");
    CompressionHandler compression = new CompressionHandler();
    compression.putCompression(new GzipCompression());
    handler.insertHandler(compression);
    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost(args[0]);
    connector.setPort(Integer.parseInt(args[1]));
    server.addConnector(connector);
    server.setHandler(handler);
    server.start();
    System.out.println("LISTENING " + connector.getLocalPort());
    System.out.flush();
    // Stdin is a pipe from the test process: when it closes (that process is gone, even SIGKILLed), stop.
    while (System.in.read() != -1) {}
    System.exit(0);
  }
}
"""


def _pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def server_classpath(progress: jvm.Progress | None = None) -> list[Path]:
    """Every jar of the server, fetched (sha1-verified) into its own folder of wapflow's jar cache."""
    cache = jvm.default_jars_dir()
    bundled = _pyspark_jars()
    local = [bundled / a.filename for a in HADOOP_ARTIFACTS if (bundled / a.filename).is_file()]
    wanted = list(SERVER_ARTIFACTS) + [a for a in HADOOP_ARTIFACTS if bundled / a.filename not in local]

    def fetch(a: jvm.Artifact) -> Path:
        # wapflow's own jars (sqlite-jdbc) where wapflow keeps them; the server's in a folder of their own.
        folder = cache if a in jvm.CORE_ARTIFACTS else cache / "iceberg-rest-fixture"
        return jvm.fetch_artifact(a, folder, MAVEN_CENTRAL, progress)

    with ThreadPoolExecutor(max_workers=6) as pool:
        return list(pool.map(fetch, wanted)) + local


@dataclass
class RestCatalogServer:
    url: str  # what `catalog_properties.uri` gets
    warehouse: Path  # the server's warehouse: table locations are chosen by the server, under this folder
    catalog_db: Path
    log: Path
    proc: subprocess.Popen[bytes]
    started_in: float  # seconds from launch to the first answer of GET /v1/config


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group, SIGKILL if it is still there after 15 s."""
    if proc.stdin is not None:
        proc.stdin.close()
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)


def start_server(folder: Path, timeout: float = 90.0) -> RestCatalogServer:
    """Start the server with its data in `folder`; returns once GET /v1/config answers 200."""
    java = jvm.find_java()
    assert java is not None, "the REST catalog server needs Java 17+ (java on PATH or JAVA_HOME)"
    classpath = os.pathsep.join(str(p) for p in server_classpath())
    source = folder / f"{LAUNCHER_CLASS}.java"
    source.write_text(LAUNCHER, encoding="utf-8")
    warehouse, catalog_db, log = folder / "warehouse", folder / "catalog.db", folder / "server.log"
    warehouse.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    env.update(
        {
            # RCKUtils.environmentCatalogConfig: CATALOG_X_Y -> x.y, CATALOG_X__Y -> x-y.
            "CATALOG_CATALOG__IMPL": "org.apache.iceberg.jdbc.JdbcCatalog",
            "CATALOG_URI": f"jdbc:sqlite:{catalog_db}",
            "CATALOG_WAREHOUSE": str(warehouse),
        }
    )
    cmd = [java, "-Xmx256m", "-XX:+UseSerialGC", "-cp", classpath, str(source), HOST, "0"]
    t0 = time.perf_counter()
    with log.open("wb") as out:
        # A session of its own: stopping it kills its whole process group.
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.PIPE, env=env, start_new_session=True
        )
    try:
        url = _wait_ready(proc, log, t0 + timeout)
    except BaseException:
        _stop(proc)
        raise
    return RestCatalogServer(url, warehouse, catalog_db, log, proc, time.perf_counter() - t0)


def _wait_ready(proc: subprocess.Popen[bytes], log: Path, deadline: float) -> str:
    url = None
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            break
        if url is None:
            for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("LISTENING "):
                    url = f"http://{HOST}:{int(line.split()[1])}"
        if url is not None:
            try:
                if httpx.get(f"{url}/v1/config", timeout=5).status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
        time.sleep(0.2)
    tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-15:])
    state = f"exited with {proc.returncode}" if proc.poll() is not None else "did not answer GET /v1/config"
    raise RuntimeError(f"the Iceberg REST catalog server {state}; its log ends:\n{tail}")


@pytest.fixture(scope="session")
def rest_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestCatalogServer]:
    """One REST catalog server for the session (catalog, warehouse and log in a pytest temporary folder, kept
    for a look after a failure), stopped at the end even on failure."""
    server = start_server(tmp_path_factory.mktemp("rest-catalog"))
    try:
        yield server
    finally:
        _stop(server.proc)
