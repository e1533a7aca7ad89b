"""Every failure comes out as one of six kinds a scheduler can act on, through `wap run --json`.

input / config / environment / bug are terminal, conflict is terminal with its own exit code, and only
transient (exit 5) is worth retrying unchanged. Each kind is produced here by a real cause: a corrupt
file, a check on a missing column, a bad wap.toml, a wrong S3 secret and a lake user who may not write
the warehouse (moto with IAM enforced), a Nessie URL on a closed port, an S3 endpoint that answers
503 SlowDown (a small proxy in front of moto), an exception injected where nobody names it
(WAP_RAISE_AT), and main moving under a branch whose snapshot is not an append (library level: no
CLI path rewrites a run's branch).
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import httpx
import pytest

from support.cli_harness import Proc, wap, write_config
from support.data import trips_file, write_parquet
from support.s3_server import REGION, Keys, S3Env, start_s3_env
from wapflow.demo.generate import generate_trips
from wapflow.errors import KINDS, bug
from wapflow.lakehouse.processes import free_port
from wapflow.spark import errors as spark_errors
from wapflow.spark.chain import walk

pytestmark = pytest.mark.spark

TRIPS = '[tables."nyc.trips"]\nchecks = [{ check = "not_null", column = "passenger_count" }]\n'
PROBE = ".wapflow-probe-"  # the warehouse write probe every S3 run makes before Spark (storage/s3.py)


def failed(p: Proc, *, kind: str, code: int, retryable: bool) -> dict[str, Any]:
    """The JSON error of a failed run, after checking what a scheduler reads first."""
    assert p.code == code, p.text
    doc = p.doc
    err = doc["error"]
    assert doc["status"] == "failed", doc
    assert err["kind"] == kind and err["kind"] in KINDS, err
    assert err["retryable"] is retryable and err["exit_code"] == code, err
    assert "Traceback" not in p.stderr
    return err


# --- no JVM: classification of real exceptions --------------------------------------------------


def test_classify_names_python_connection_failures_and_nothing_else() -> None:
    port = free_port()
    with pytest.raises(httpx.ConnectError) as refused:
        httpx.get(f"http://127.0.0.1:{port}/api/v2/config", timeout=5)
    err = spark_errors.classify(refused.value, doing="reading Nessie's configuration")
    assert err is not None and err.to_dict()["type"] == "Unreachable"
    assert err.kind == "transient" and err.retryable and err.exit_code == 5
    assert "reading Nessie's configuration" in err.message
    try:
        try:
            {}["missing"]
        except KeyError as e:
            raise RuntimeError("wrapped") from e
    except RuntimeError as e:
        assert spark_errors.classify(e, doing="auditing") is None  # a bug is never guessed to be transient
        b = bug(e, run_id="r1", step="audit").to_dict()
    assert b["kind"] == "bug" and b["retryable"] is False and b["exit_code"] == 3
    assert b["run_id"] == "r1" and b["step"] == "audit" and "bug in wapflow" in str(b["message"])
    assert "RuntimeError" in str(b["message"])


@pytest.mark.parametrize(
    ("code", "status", "expected", "kind", "exit_code"),
    [
        ("SlowDown", 503, "Throttled", "transient", 5),
        ("InternalError", 500, "ServiceError", "transient", 5),
        ("AccessDenied", 403, "EnvironmentProblem", "environment", 3),
        ("SignatureDoesNotMatch", 403, "EnvironmentProblem", "environment", 3),
        ("NoSuchBucket", 404, "EnvironmentProblem", "environment", 3),
        ("NoSuchKey", 404, None, None, None),  # not named here: the caller reports a bug
    ],
)
def test_classify_reads_s3_answers_by_code_and_status(
    code: str, status: int, expected: str | None, kind: str | None, exit_code: int | None
) -> None:
    from botocore.exceptions import ClientError

    e = ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject"
    )
    err = spark_errors.classify(e, doing="writing nyc.trips")
    if expected is None:
        assert err is None
        return
    assert err is not None and type(err).__name__ == expected
    assert err.kind == kind and err.exit_code == exit_code and err.retryable is (kind == "transient")
    assert "writing nyc.trips" in err.message and code in err.message


class _FakeClass:
    def __init__(self, name: str) -> None:
        self._name = name

    def getName(self) -> str:
        return self._name


class _FakeThrowable:
    """What Py4J hands over for a Java throwable: getClass, getMessage, getCause, toString (and a Spark condition)."""

    def __init__(self, cls: str, message: str, cause: _FakeThrowable | None = None, condition: str | None = None):
        self.cls, self.message, self.cause, self.condition = cls, message, cause, condition

    def getClass(self) -> _FakeClass:
        return _FakeClass(self.cls)

    def getMessage(self) -> str:
        return self.message

    def getCause(self) -> _FakeThrowable | None:
        return self.cause

    def getCondition(self) -> str | None:
        return self.condition

    def getMessageParameters(self) -> dict[str, str]:
        return {"path": "/landing/a.csv"} if self.condition else {}

    def toString(self) -> str:
        return f"{self.cls}: {self.message}"


class _Py4JLike(Exception):
    def __init__(self, message: str, java: _FakeThrowable) -> None:
        super().__init__(message)
        self.java_exception = java


class _ConnectLike(Exception):
    """A Spark Connect error: no Java side, its condition on the Python exception."""

    def getCondition(self) -> str:
        return "TABLE_OR_VIEW_ALREADY_EXISTS"


def test_one_walker_sees_python_causes_java_causes_and_conditions() -> None:
    root = _FakeThrowable("java.net.ConnectException", "Connection refused")
    java = _FakeThrowable(
        "org.apache.spark.SparkException", "[FAILED_READ_FILE.NO_HINT] x", root, "FAILED_READ_FILE.NO_HINT"
    )
    try:
        try:
            raise _ConnectLike("[TABLE_OR_VIEW_ALREADY_EXISTS] exists")
        except _ConnectLike as inner:
            raise _Py4JLike("An error occurred while calling o1.load", java) from inner
    except _Py4JLike as e:
        links = list(walk(e))
        assert [(link.java, link.cls.rsplit(".", 1)[-1]) for link in links] == [
            (False, "_Py4JLike"),
            (True, "SparkException"),
            (True, "ConnectException"),
            (False, "_ConnectLike"),
        ]
        assert links[1].condition == "FAILED_READ_FILE.NO_HINT" and links[1].parameters == {"path": "/landing/a.csv"}
        assert links[2].condition is None and links[2].parameters == {}
        assert spark_errors.conditions(e) == {"TABLE_OR_VIEW_ALREADY_EXISTS"}  # Python links only, as Connect has them
        assert spark_errors.raised(e, "java.net.ConnectException")
        assert not spark_errors.raised(e, "java.net.SocketTimeoutException")
        assert (
            spark_errors.describe(e)
            == "SparkException: [FAILED_READ_FILE.NO_HINT] x (cause: ConnectException: Connection refused)"
        )
        err = spark_errors.classify(e, doing="reading")
        assert err is not None and type(err).__name__ == "Unreachable"
    try:
        try:
            raise _ConnectLike("hidden")
        except _ConnectLike:
            raise RuntimeError("plain") from None
    except RuntimeError as e:
        assert [link.cls for link in walk(e)] == ["builtins.RuntimeError"]  # `from None` ends the chain
        assert spark_errors.conditions(e) == set()


# --- local lakehouse: input, config, bug ----------------------------------------------------------


def test_corrupt_parquet_is_input(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "lake", TRIPS, catalog="kinds_input")
    bad = tmp_path / "landing" / "broken.parquet"
    bad.parent.mkdir()
    bad.write_bytes(b"PAR1" + b"not really parquet" * 20)
    err = failed(
        wap("run", "nyc.trips", str(bad), "--config", str(cfg), "--json"), kind="input", code=3, retryable=False
    )
    assert "broken.parquet" in err["message"] and "parquet" in err["message"]


def test_check_on_missing_column_and_bad_toml_are_config(tmp_path: Path) -> None:
    src = trips_file(tmp_path / "landing", "ok.parquet", 20)
    cfg = write_config(
        tmp_path / "lake",
        '[tables."nyc.trips"]\nchecks = [{ check = "not_null", column = "no_such_col" }]\n',
        catalog="kinds_config",
    )
    err = failed(
        wap("run", "nyc.trips", str(src), "--config", str(cfg), "--json"), kind="config", code=2, retryable=False
    )
    assert "no_such_col" in err["message"]
    broken = tmp_path / "broken.toml"
    broken.write_text('[lakehouse]\nmaster = "local[2]"\nwarehouse = \n')  # not TOML
    err = failed(
        wap("run", "nyc.trips", str(src), "--config", str(broken), "--json"), kind="config", code=2, retryable=False
    )
    assert "broken.toml" in err["message"]


def test_unnamed_exception_is_a_bug_naming_run_and_step(tmp_path: Path) -> None:
    src = trips_file(tmp_path / "landing", "ok.parquet", 20)
    cfg = write_config(tmp_path / "lake", TRIPS, catalog="kinds_bug")
    p = wap("run", "nyc.trips", str(src), "--config", str(cfg), "--json", "--run-id", "bugrun1", WAP_RAISE_AT="audit")
    err = failed(p, kind="bug", code=3, retryable=False)
    assert err["type"] == "BugError" and err["run_id"] == "bugrun1" and err["step"] == "audit"
    assert "bug in wapflow" in err["message"] and "RuntimeError" in err["message"]
    assert "injected fault at audit" in err["message"]
    assert "run bugrun1, step audit" in p.doc["message"]


# --- Nessie on a closed port ---------------------------------------------------------------------


def test_nessie_refusing_connections_is_transient(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/api/v2"
    cfg = write_config(
        tmp_path / "lake", TRIPS, lakehouse=f'catalog = "nessie"\nnessie_uri = "{url}"\n', catalog="kinds_nessie"
    )
    src = trips_file(tmp_path / "landing", "ok.parquet", 20)
    err = failed(
        wap("run", "nyc.trips", str(src), "--config", str(cfg), "--json"), kind="transient", code=5, retryable=True
    )
    assert err["type"] == "Unreachable" and url in err["message"] and "not reachable" in err["message"]


# --- S3 (moto): environment and throttling --------------------------------------------------------


@dataclass
class SlowDownProxy:
    """127.0.0.1 HTTP proxy in front of moto: 503 SlowDown for every write under `prefix`, except the
    probe when `spare_probe`; everything else is passed through byte for byte (SigV4 stays valid)."""

    upstream: str
    prefix: str = "/nothing/"
    spare_probe: bool = False
    refused: list[str] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> SlowDownProxy:
        proxy = self
        up = urlsplit(self.upstream)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet: the test output is the assertions
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline().strip():
                                pass
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _handle(self) -> None:
                body = self._body()
                path = self.path.split("?", 1)[0]
                write = self.command in ("PUT", "POST")
                if write and path.startswith(proxy.prefix) and not (proxy.spare_probe and PROBE in path):
                    proxy.refused.append(path)
                    xml = (
                        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
                        b"<Message>Please reduce your request rate.</Message><RequestId>proxy</RequestId></Error>"
                    )
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(xml)))
                    self.end_headers()
                    self.wfile.write(xml)
                    return
                skip = {"connection", "keep-alive", "expect", "transfer-encoding", "content-length"}
                headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
                if body or write:
                    headers["Content-Length"] = str(len(body))
                conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                if self.command == "HEAD":
                    self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
                    self.end_headers()
                    return
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture(scope="module")
def s3env() -> Iterator[S3Env]:
    env = start_s3_env()
    yield env
    env.server.stop()


@pytest.fixture(scope="module")
def proxy(s3env: S3Env) -> Iterator[SlowDownProxy]:
    p = SlowDownProxy(s3env.endpoint).start()
    yield p
    p.stop()


def s3_config(folder: Path, endpoint: str, lake: str, keys: Keys, *, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cfg = folder / "wap.toml"
    cfg.write_text(
        f'[lakehouse]\nwarehouse = "s3://{lake}/warehouse"\ncatalog_name = "kinds_s3"\nmaster = "local[2]"\n'
        f'driver_memory = "1g"\n{extra}\n[lakehouse.spark_conf]\n"spark.sql.shuffle.partitions" = "2"\n\n'
        f'[s3]\nendpoint = "{endpoint}"\nregion = "{REGION}"\n{keys.toml()}\n\n{TRIPS}'
    )
    return cfg


def probe_only_user(env: S3Env) -> Keys:
    """A lake user who passes the pre-write probe but may not write anything else under the warehouse."""
    iam = boto3.session.Session().client(
        "iam",
        endpoint_url=env.endpoint,
        region_name=REGION,
        aws_access_key_id=env.admin.access_key_id,
        aws_secret_access_key=env.admin.secret_access_key,
    )
    read = ["s3:ListBucket", "s3:HeadBucket", "s3:GetObject", "s3:GetBucketLocation"]
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": read, "Resource": ["arn:aws:s3:::lake-*", "arn:aws:s3:::lake-*/*"]},
            {
                "Effect": "Allow",
                "Action": ["s3:PutObject", "s3:DeleteObject"],
                "Resource": [f"arn:aws:s3:::lake-*/warehouse/{PROBE}*"],
            },
        ],
    }
    iam.create_user(UserName="wap-probe-only")
    iam.put_user_policy(UserName="wap-probe-only", PolicyName="probe-only", PolicyDocument=json.dumps(policy))
    k = iam.create_access_key(UserName="wap-probe-only")["AccessKey"]
    return Keys(k["AccessKeyId"], k["SecretAccessKey"])


def test_wrong_secret_key_is_environment(tmp_path: Path, s3env: S3Env) -> None:
    _, lake = s3env.buckets()
    keys = Keys(s3env.admin.access_key_id, "not-the-secret-5e2a")
    cfg = s3_config(tmp_path, s3env.endpoint, lake, keys)
    src = trips_file(tmp_path / "landing", "ok.parquet", 20)
    p = wap("run", "nyc.trips", str(src), "--config", str(cfg), "--json")
    err = failed(p, kind="environment", code=3, retryable=False)
    assert "SignatureDoesNotMatch" in err["message"] and lake in err["message"]
    assert keys.secret_access_key not in p.text


def test_warehouse_access_denied_is_environment_not_input(tmp_path: Path, s3env: S3Env) -> None:
    """The probe passes, Iceberg's own writes to the warehouse are denied: the file is not at fault."""
    _, lake = s3env.buckets()
    keys = probe_only_user(s3env)
    cfg = s3_config(tmp_path, s3env.endpoint, lake, keys)
    src = trips_file(tmp_path / "landing", "ok.parquet", 20)
    p = wap("run", "nyc.trips", str(src), "--config", str(cfg), "--json")
    err = failed(p, kind="environment", code=3, retryable=False)
    assert err["type"] == "EnvironmentProblem", err
    assert "AccessDenied" in err["message"] or "403" in err["message"], err
    assert not any(k.startswith("warehouse/nyc/") for k in s3env.keys_in(lake))
    assert keys.secret_access_key not in p.text


def test_s3_slowdown_on_the_warehouse_is_transient(tmp_path: Path, s3env: S3Env, proxy: SlowDownProxy) -> None:
    """503 SlowDown, first on the pre-write probe (boto3), then only on Iceberg's writes (the Java SDK)."""
    _, lake = s3env.buckets()
    proxy.prefix, proxy.spare_probe = f"/{lake}/warehouse/", False
    cfg = s3_config(tmp_path / "probe", proxy.endpoint, lake, s3env.admin)
    src = trips_file(tmp_path / "landing", "ok.parquet", 20)
    err = failed(
        wap("run", "nyc.trips", str(src), "--config", str(cfg), "--json"), kind="transient", code=5, retryable=True
    )
    assert err["type"] == "Throttled" and "slow down" in err["message"] and lake in err["message"], err
    assert any(PROBE in r for r in proxy.refused)

    proxy.refused.clear()
    proxy.spare_probe = True
    # Iceberg's S3FileIO retries 5 times with up to 20 s waits by default; a user may shorten that.
    quick = (
        'catalog_properties = { "s3.retry.num-retries" = "1", "s3.retry.min-wait-ms" = "50", '
        '"s3.retry.max-wait-ms" = "100" }'
    )
    cfg = s3_config(tmp_path / "data", proxy.endpoint, lake, s3env.admin, extra=quick)
    err = failed(
        wap("run", "nyc.trips", str(src), "--config", str(cfg), "--json"), kind="transient", code=5, retryable=True
    )
    assert err["type"] == "Throttled" and "SlowDown" in err["message"], err
    assert proxy.refused and not any(PROBE in r for r in proxy.refused)


# --- publish conflict (library level) -----------------------------------------------------------


def test_unreplayable_publish_is_a_terminal_conflict(trips_lakehouse: Any, landing: Path) -> None:
    from wapflow.pipeline import WapRun, run_wap
    from wapflow.sql.identifiers import TableName

    table = TableName.parse("nyc.trips")
    lh = trips_lakehouse
    run_wap(lh, "nyc.trips", [str(trips_file(landing, "seed.parquet", 10))])
    a = WapRun(lh, "nyc.trips", [str(trips_file(landing, "a.parquet", 20, start_id=100))])
    b = WapRun(lh, "nyc.trips", [str(write_parquet(landing / "b.parquet", generate_trips(30, start_id=200, seed=2)))])
    a.prepare()
    a.write()
    b.prepare()
    b.write()
    # B's branch gets an overwrite (not an append), then A moves main: B cannot be re-applied.
    lh.tables.read(table, b.branch).where("trip_id >= 210").writeTo(lh.iceberg.write_target(table, b.branch)).option(
        "snapshot-property.wapflow.run-id", b.run_id
    ).overwritePartitions()
    a.audit()
    a.publish()
    res = run_wap(lh, "nyc.trips", [str(landing / "b.parquet")], run_id=b.run_id)
    err = res.error or {}
    assert res.status == "failed" and res.exit_code == 4, res.message
    assert err["kind"] == "conflict" and err["retryable"] is False and err["type"] == "PublishConflict", err
    assert b.branch in err["message"] and "not appends" in err["message"]
