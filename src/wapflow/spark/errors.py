"""What failed, from an exception of Spark, the catalog, storage or Nessie: readable text and a classification.

The chain is walked by wapflow.spark.chain (the one walker). `describe` turns a JVM
exception chain into one readable line. `classify` decides, by exception CLASS
NAME and status code (never by words in messages), whether a failure is a named transient condition
(commit conflict after Iceberg's retries, connection refused/reset/timeout, S3 throttling, a 5xx) or
the environment (credentials and permissions on the warehouse, a missing bucket). Anything else is
None: the caller raises `errors.bug(...)`, because an exception nobody named must not be retried.
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass

from wapflow.errors import (
    EXIT_STOPPED,
    BugError,
    CommitConflict,
    DiskFull,
    EnvironmentProblem,
    ServiceError,
    Throttled,
    Unreachable,
    WapError,
    bug,
)
from wapflow.spark.chain import AWS_PREFIXES, POSTGRES, SQLITE, Link, walk

_PKG = re.compile(r"\b(?:[a-z_][a-z0-9_]*\.)+([A-Z][A-Za-z0-9_$]*(?:Exception|Error))")
_NOISE = ("An error occurred while calling", "Job aborted due to stage failure")


def _short(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return _PKG.sub(r"\1", line)[:400]


def conditions(e: BaseException) -> set[str]:
    """Spark's error conditions (e.g. TABLE_OR_VIEW_ALREADY_EXISTS) of the exception and its Python causes: what
    a Spark Connect client gets where a classic session has the Java exception's class."""
    return {link.condition for link in walk(e) if not link.java and link.condition}


def raised(e: BaseException, *java_classes: str) -> bool:
    """The exception, or one of its causes (Python or Java), is one of these classes (fully qualified)."""
    wanted = set(java_classes)
    return any(link.cls in wanted for link in walk(e))


# --- readable text ------------------------------------------------------------------------------


def chain(e: BaseException) -> list[str]:
    """Messages of the exception and the Java chain behind it (toString: class and message), then its own text."""
    out: list[str] = []
    links = walk(e)
    next(links)  # e itself: its text comes last
    for link in links:
        if not link.java:
            break
        try:
            out.append(str(link.error.toString()))
        except Exception:  # noqa: BLE001 - a dead gateway must not hide the original error
            break
    text = str(e).strip()
    if text:
        out.append(text)
    return out


def describe(e: BaseException) -> str:
    msgs = [m for m in chain(e) if m.strip()]
    useful = [_short(m) for m in msgs if not any(n in m.splitlines()[0] for n in _NOISE)]
    useful = [u for i, u in enumerate(useful) if u and u not in useful[:i]]
    if not useful:
        return _short(msgs[0]) if msgs else type(e).__name__
    # A cause that says what the first message says already (Java's `AnalysisException: X` and Python's `X`)
    # is not repeated.
    causes = [u for u in useful[1:] if u not in useful[0] and useful[0] not in u]
    if not causes:
        return useful[0]
    return f"{useful[0]} (cause: {causes[-1]})"


def full_text(e: BaseException) -> str:
    return "\n".join(chain(e))


# --- classification ---------------------------------------------------------------------------

# Java classes, by fully qualified name.
_COMMIT_CONFLICT = frozenset(
    {"org.apache.iceberg.exceptions.CommitFailedException", "pyiceberg.exceptions.CommitFailedException"}
)
# PyIceberg builds a snapshot on the metadata it loaded; when a commit to another branch of the table lands first,
# the catalog's check of the branch still passes but applying the snapshot fails with this ValueError: stale too.
_PYICEBERG_STALE = "older than last sequence number"
# The SQLite JDBC catalog: SQLITE_BUSY (5) and SQLITE_LOCKED (6), also as extended codes (low byte).
_SQLITE_BUSY = (5, 6)
_UNREACHABLE_JAVA = frozenset(
    {
        "java.net.ConnectException",
        "java.net.SocketTimeoutException",
        "java.net.NoRouteToHostException",
        "java.net.http.HttpConnectTimeoutException",
        "java.net.http.HttpTimeoutException",
        "org.apache.http.conn.ConnectTimeoutException",
        "org.apache.http.conn.HttpHostConnectException",
        "org.apache.http.NoHttpResponseException",
        # Iceberg's REST client: Apache HttpClient 5, shaded into the runtime jar.
        "org.apache.iceberg.shaded.org.apache.hc.client5.http.HttpHostConnectException",
        "org.apache.iceberg.shaded.org.apache.hc.client5.http.ConnectTimeoutException",
        "org.apache.iceberg.shaded.org.apache.hc.core5.http.NoHttpResponseException",
        "org.apache.hadoop.net.ConnectTimeoutException",
        "software.amazon.awssdk.core.exception.ApiCallTimeoutException",
        "software.amazon.awssdk.core.exception.ApiCallAttemptTimeoutException",
    }
)
# A SocketException is transient only when it is a reset or a broken pipe; its class says no more.
_SOCKET_EXCEPTIONS = frozenset({"java.net.SocketException", "javax.net.ssl.SSLException"})
_RESET = ("Connection reset", "Broken pipe")
_THROTTLED_JAVA = frozenset({"org.apache.hadoop.fs.s3a.AWSServiceThrottledException"})
_SERVICE_JAVA = frozenset(
    {
        "org.apache.iceberg.exceptions.ServiceUnavailableException",
        "org.apache.iceberg.exceptions.ServiceFailureException",
        "org.apache.hadoop.fs.s3a.AWSStatus500Exception",
    }
)
# A refused token: Iceberg's REST client and Nessie's client raise these for HTTP 401 (Nessie's for 403 too).
# A Spark Connect server that demands a token (spark.connect.authenticate.token) answers a missing or wrong one
# with this gRPC status; named here by the status, as the JVM's refusals are by class.
CONNECT_SERVER = "the Spark Connect server"
_UNAUTHORISED_GRPC = "UNAUTHENTICATED"


def grpc_status(link: Link) -> str | None:
    """The gRPC status name of a Spark Connect client's error (grpc.RpcError, PySpark's SparkConnectGrpcException)."""
    if link.java:
        return None
    for getter in ("getGrpcStatusCode", "code"):
        fn = getattr(link.error, getter, None)
        if callable(fn):
            try:
                code = fn()
            except Exception:  # noqa: BLE001 - an RpcError that is not a call has no code
                continue
            name = getattr(code, "name", None)
            if isinstance(name, str):
                return name
    return None


_UNAUTHORISED_JAVA = frozenset(
    {
        "org.apache.iceberg.exceptions.NotAuthorizedException",
        "org.projectnessie.client.rest.NessieNotAuthorizedException",
    }
)
# A server certificate no trusted CA signed: what the JDK's PKIX validation throws under SSLHandshakeException.
_TLS_UNTRUSTED_JAVA = frozenset(
    {
        "sun.security.provider.certpath.SunCertPathBuilderException",
        "sun.security.validator.ValidatorException",
        "java.security.cert.CertPathValidatorException",
        "java.security.cert.CertificateExpiredException",
        "java.security.cert.CertificateNotYetValidException",
    }
)
_TLS_UNTRUSTED_PY = "SSLCertVerificationError"  # ssl's, under httpx's ConnectError
_ENVIRONMENT_JAVA = {
    "org.apache.iceberg.exceptions.ForbiddenException": "the catalog refused the request (forbidden)",
    "java.nio.file.AccessDeniedException": "access was denied",
    "org.apache.hadoop.fs.s3a.UnknownStoreException": "the bucket does not exist",
    "org.apache.hadoop.fs.s3a.CredentialInitializationException": "no usable S3 credentials were found",
    "org.apache.hadoop.fs.s3a.auth.NoAuthWithAWSException": "no usable S3 credentials were found",
}

# A full filesystem or quota. The JVM reports ENOSPC / EDQUOT only as the OS's text (strerror) inside an
# IOException, FSError or whatever wraps them, so there, and only there, the text decides; Python has the errno,
# SQLite its result code SQLITE_FULL (13), or SQLITE_IOERR_SHMSIZE (4874: a WAL database's shared-memory file
# could not grow, which is what opening one on a full filesystem gives).
_DISK_FULL_TEXT = ("No space left on device", "Disk quota exceeded")
_DISK_FULL_ERRNO = frozenset({errno.ENOSPC, errno.EDQUOT})
_SQLITE_FULL = 13
_SQLITE_IOERR_SHMSIZE = 4874
_DISK_FULL_HINT = (
    "free space on that filesystem (or raise its quota), then run again: a run resumes by its run id and a "
    "file ledger retries the file; nothing was published"
)

# The thread was interrupted: what a user's `query.stop()` does to a streaming query's thread while a batch runs
# (Spark interrupts it, and the next blocking call of the batch's run throws); Spark's own StreamExecution takes
# these classes for a stop too (isInterruptedByStop).
_INTERRUPTED_JAVA = frozenset(
    {
        "java.lang.InterruptedException",
        "java.io.InterruptedIOException",
        "java.nio.channels.ClosedByInterruptException",
    }
)


class Interrupted(WapError):
    """The work was stopped from outside (a streaming query's stop interrupted its thread): not a defect, and
    not a failure of the data. Exit 130, as a stop signal's; what was under way runs again when restarted."""

    exit_code = EXIT_STOPPED
    retryable = True
    kind = "transient"


# The JVM out of memory: the driver (a collect, a broadcast, metadata of a huge table) or a task's memory.
_OUT_OF_MEMORY_JAVA = frozenset({"java.lang.OutOfMemoryError", "org.apache.spark.memory.SparkOutOfMemoryError"})

# S3 error codes.
_THROTTLE_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests", "ServiceUnavailable"}
)
_ENVIRONMENT_CODES = {
    "AccessDenied": "access was denied",
    "AllAccessDisabled": "access was denied",
    "AccountProblem": "the account cannot be used",
    "InvalidAccessKeyId": "the access key id is unknown",
    "SignatureDoesNotMatch": "the secret key does not match the access key id",
    "ExpiredToken": "the session token has expired",
    "ExpiredTokenException": "the session token has expired",
    "InvalidToken": "the session token was rejected",
    "TokenRefreshRequired": "the session token was rejected",
    "NoSuchBucket": "the bucket does not exist",
}

# Python classes, by name anywhere in the exception's MRO (httpx, botocore, builtins), so that
# nothing here has to import optional packages.
_UNREACHABLE_PY = frozenset(
    {
        # httpx
        "ConnectError",
        "ConnectTimeout",
        "ReadTimeout",
        "WriteTimeout",
        "PoolTimeout",
        "RemoteProtocolError",
        "ReadError",
        "WriteError",
        # botocore
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionClosedError",
        # builtins: ConnectionRefusedError, ConnectionResetError, BrokenPipeError, ... and socket timeouts
        "ConnectionError",
        "TimeoutError",
    }
)

_LOCATION = re.compile(r"\b(?:s3a?|gs|abfss?|hdfs|file):/{1,3}[^\s'\"<>),;]+")
_ENV_HINT = (
    "check the credentials ([s3] keys in wap.toml or the AWS_* variables) and that they may read and "
    "write the warehouse; nothing was published"
)
_RETRY_HINT = "retry the run (`wap run ... --run-id` resumes it); nothing was published"


def commit_conflict(e: BaseException) -> bool:
    """Another writer committed to the table (or the catalog database) first: refresh and commit again.

    The one place that recognises a commit conflict, by type: Iceberg's CommitFailedException anywhere in
    the chain, or a SQLite catalog busy or locked by its result code (both as `classify` names them). Spark
    Connect hands the client no Java exception, only the server's class names inside the message text
    ("(org.apache.iceberg.exceptions.CommitFailedException) ...", a SQLiteException's "[SQLITE_BUSY] ...",
    "Commit failed: ..."), and no Spark error condition for it; so there, and only there, the text decides.
    PyIceberg (the commits a Connect client makes itself) names its stale sequence number by text only.
    """
    if raised(e, *_COMMIT_CONFLICT) or isinstance(classify(e, doing="committing"), CommitConflict):
        return True
    if isinstance(e, ValueError) and _PYICEBERG_STALE in str(e):
        return True
    from_connect = any(c.__module__.startswith("pyspark.errors.exceptions.connect") for c in type(e).__mro__)
    text = str(e)
    return from_connect and any(t in text for t in ("CommitFailedException", "Commit failed", "SQLITE_BUSY"))


# Iceberg's validation of a row-level change (a DELETE, a MERGE) that another commit to the same rows'
# files beat: its plan is stale, so planning it again on the refreshed table is safe.
_CONCURRENT_CHANGE = (
    "Found conflicting files",
    "Found new conflicting delete files",
    "Found conflicting deleted files",
)


def concurrent_change(e: BaseException) -> bool:
    """A row-level change lost Iceberg's validation to a concurrent commit (its files or deletes moved)."""
    text = full_text(e)
    return raised(e, "org.apache.iceberg.exceptions.ValidationException") and any(t in text for t in _CONCURRENT_CHANGE)


def _simple(cls: str) -> str:
    return cls.rsplit(".", 1)[-1]


def _first_line(text: str, n: int = 200) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return _PKG.sub(r"\1", line)[:n]


def _service(link: Link) -> str:
    """Which service a link is about, from its package or Python module."""
    cls = link.cls
    if "projectnessie" in cls or "nessie" in cls.lower():
        return "the Nessie server"
    if cls.startswith((*AWS_PREFIXES, "botocore.", "boto3.")) or link.code:
        return "S3 storage"
    if cls.startswith("org.apache.iceberg."):
        return "the Iceberg catalog"
    if cls.startswith("org.postgresql."):
        return "the catalog's PostgreSQL database"
    return "the server"


def _target(links: list[Link], i: int) -> str:
    """The service the matching link (or one that wraps it) talks to."""
    for link in reversed(links[: i + 1]):
        s = _service(link)
        if s != "the server":
            return s
    return "the server"


def _location(links: list[Link]) -> str:
    """' (at s3://...)' when some message of the chain names a storage location, else ''."""
    for link in links:
        m = _LOCATION.search(link.message)
        if m:
            return f" (at {m.group(0).rstrip('.')})"
    return ""


def _status_text(link: Link) -> str:
    parts = [p for p in (link.code, f"HTTP {link.status}" if link.status else None) if p]
    return ", ".join(parts) if parts else _simple(link.cls)


def _by_status(link: Link, links: list[Link], i: int, doing: str) -> WapError | None:
    """An error answered by S3 (or Nessie): throttled, 5xx, or refused credentials/permissions."""
    status, code = link.status, link.code or ""
    if (status is None and not code) or link.cls in SQLITE or link.cls in POSTGRES:
        return None
    what = _target(links, i)
    where = _location(links)
    if code in _THROTTLE_CODES or status in (503, 429):
        return Throttled(
            f"{what} asked to slow down ({_status_text(link)}) while {doing}{where}, even after the client's retries",
            hint=_RETRY_HINT,
        )
    if status is not None and status >= 500:
        return ServiceError(
            f"{what} failed with a server error ({_status_text(link)}) while {doing}{where}", hint=_RETRY_HINT
        )
    if code in _ENVIRONMENT_CODES or status == 403:
        reason = _ENVIRONMENT_CODES.get(code, "access was denied")
        hint = (
            "create the bucket (`wap storage init`) or fix the warehouse location; nothing was published"
            if code == "NoSuchBucket"
            else _ENV_HINT
        )
        return EnvironmentProblem(
            f"{what} refused the request while {doing}{where}: {reason} ({_status_text(link)})", hint=hint
        )
    return None


# A JDBC catalog on PostgreSQL: the driver's exception carries the SQLSTATE (getSQLState), a class of five
# characters: 08 connection, 28 authorization, 3D no such database, 40 a transaction rolled back, 53 out of
# resources (too many connections), 57P0x the server shutting down or starting.
def _postgres(link: Link, doing: str) -> WapError | None:
    """The JDBC catalog's PostgreSQL, by SQLSTATE class; None for a state nobody named (a bug)."""
    state = link.code or ""
    what = f"the catalog's PostgreSQL database ({_first_line(link.message)}, SQLSTATE {state or 'none'})"
    if state.startswith("08") or state in ("57P01", "57P02", "57P03"):
        return Unreachable(
            f"could not reach {what} while {doing}",
            hint="check that the database server is running and reachable, then retry; nothing was published",
        )
    if state.startswith("28") or state == "3D000":
        return EnvironmentProblem(
            f"{what} refused the connection while {doing}",
            hint='check catalog_properties uri, "jdbc.user" and "jdbc.password" (the database must exist); '
            "`wap doctor` checks them",
        )
    if state.startswith(("40", "53")):
        return ServiceError(f"{what} could not take the request while {doing}", hint=_RETRY_HINT)
    return None


def disk_full(link: Link) -> bool:
    """The link says a filesystem is full or over quota (see _DISK_FULL_TEXT for why the JVM's text decides)."""
    if link.java:
        return (link.cls in SQLITE and _sqlite_full(link.status)) or any(t in link.message for t in _DISK_FULL_TEXT)
    e = link.error
    if isinstance(e, OSError) and e.errno in _DISK_FULL_ERRNO:
        return True
    return _sqlite_full(getattr(e, "sqlite_errorcode", None))  # Python's sqlite3 (3.11+)


def _sqlite_full(code: int | None) -> bool:
    return code is not None and (code & 0xFF == _SQLITE_FULL or code == _SQLITE_IOERR_SHMSIZE)


@dataclass(frozen=True)
class Endpoint:
    """Where a service of this process's config is, and which settings hold its token (named, never shown)."""

    url: str
    token_setting: str


# The catalog's endpoints by the service name `_service` gives them ("the Iceberg catalog", "the Nessie server"):
# set once the config is known (wapflow.lakehouse.session), read when an error of that service is named.
_ENDPOINTS: dict[str, Endpoint] = {}


def name_endpoint(service: str, url: str, token_setting: str) -> None:
    """Errors of `service` name its URL and, for a refused token, the setting to check."""
    _ENDPOINTS[service] = Endpoint(url, token_setting)


def tls_untrusted(e: BaseException) -> str | None:
    """Why the server's certificate was not trusted (the validator's own words), or None when that is not the
    failure: the JDK's PKIX exceptions, or Python's SSLCertVerificationError, anywhere in the chain."""
    for link in walk(e):
        if link.cls in _TLS_UNTRUSTED_JAVA or _TLS_UNTRUSTED_PY in link.names:
            reason = (None if link.java else getattr(link.error, "verify_message", None)) or _first_line(link.message)
            return str(reason or "certificate verify failed")
        # httpcore wraps the ssl error as its exception's argument, not as its cause.
        wrapped = getattr(link.error, "args", ()) if not link.java else ()
        inner = wrapped[0] if wrapped and isinstance(wrapped[0], BaseException) else None
        if inner is not None and _TLS_UNTRUSTED_PY in {c.__name__ for c in type(inner).__mro__}:
            return str(getattr(inner, "verify_message", None) or _first_line(str(inner)) or "certificate verify failed")
    return None


def untrusted_tls_error(url: str, reason: str) -> EnvironmentProblem:
    """The one message for a certificate that is not trusted, on every path (JVM, httpx, `wap doctor`)."""
    return EnvironmentProblem(
        f"TLS verification failed for {url}: its certificate is not signed by a CA this machine trusts ({reason})",
        hint="set [lakehouse] ca_bundle to the PEM file of the CA that signed the server's certificate "
        "(a private CA), or fix the URL",
    )


def unauthorised_error(url: str, token_setting: str, doing: str) -> EnvironmentProblem:
    """The one message for a missing or refused token, on every path (JVM, httpx, `wap doctor`)."""
    return EnvironmentProblem(
        f"unauthorised: {url} refused the token while {doing} (missing, wrong or expired)",
        hint=f"check {token_setting}; the token itself is never printed",
    )


def _one(link: Link, links: list[Link], i: int, doing: str) -> WapError | None:
    cls = link.cls
    if grpc_status(link) == _UNAUTHORISED_GRPC:
        known = _ENDPOINTS.get(CONNECT_SERVER)
        if known is not None:
            return unauthorised_error(f"{CONNECT_SERVER} at {known.url}", known.token_setting, doing)
        return unauthorised_error(CONNECT_SERVER, "the Spark Connect token", doing)
    if cls in _UNAUTHORISED_JAVA:
        service = _target(links, i)
        known = _ENDPOINTS.get(service)
        if known is not None:
            return unauthorised_error(f"{service} at {known.url}", known.token_setting, doing)
        return unauthorised_error(service, "the catalog's token settings", doing)
    if cls in _COMMIT_CONFLICT:
        return CommitConflict(
            f"another writer committed to the catalog first while {doing}, and Iceberg's own retries did not "
            f"get through ({_simple(cls)}: {_first_line(link.message)})",
            hint=_RETRY_HINT,
        )
    if cls in SQLITE and link.status is not None and link.status & 0xFF in _SQLITE_BUSY:
        return CommitConflict(
            f"the catalog database stayed busy (locked by another writer) while {doing}, even after waiting "
            f"({_simple(cls)}: {_first_line(link.message)})",
            hint=_RETRY_HINT,
        )
    if cls in POSTGRES:
        return _postgres(link, doing)
    if cls in _INTERRUPTED_JAVA:
        return Interrupted(
            f"stopped while {doing}: the thread running it was interrupted ({_simple(cls)}), as a streaming "
            "query's stop() does to the batch in flight",
            hint="nothing was published; the work runs again when restarted (a stream's batch under the same "
            "run id, from its checkpoint)",
        )
    if cls in _OUT_OF_MEMORY_JAVA:
        return EnvironmentProblem(
            f"Spark ran out of memory while {doing} ({_simple(cls)}: {_first_line(link.message) or 'no detail'})",
            hint="raise [lakehouse] driver_memory (or spark_conf spark.executor.memory on a cluster), or take fewer "
            "files per run ([sources] max_files_per_run), then run again; nothing was published",
        )
    if cls in _THROTTLED_JAVA:
        return Throttled(
            f"S3 storage asked to slow down while {doing}{_location(links)} ({_simple(cls)})", hint=_RETRY_HINT
        )
    if cls in _SERVICE_JAVA:
        return ServiceError(
            f"{_target(links, i)} failed with a server error while {doing} "
            f"({_simple(cls)}: {_first_line(link.message)})",
            hint=_RETRY_HINT,
        )
    if cls in _ENVIRONMENT_JAVA:
        return EnvironmentProblem(
            f"{_target(links, i)} refused the request while {doing}{_location(links)}: {_ENVIRONMENT_JAVA[cls]} "
            f"({_simple(cls)})",
            hint=_ENV_HINT,
        )
    by_status = _by_status(link, links, i, doing)
    if by_status is not None:
        return by_status
    unreachable = cls in _UNREACHABLE_JAVA or bool(link.names & _UNREACHABLE_PY)
    if cls in _SOCKET_EXCEPTIONS and any(r in link.message for r in _RESET):
        unreachable = True
    if unreachable:
        return Unreachable(
            f"could not reach {_target(links, i)} while {doing}: "
            f"{_simple(cls)} ({_first_line(link.message) or 'no detail'})",
            hint="check that the server is running and reachable, then retry; nothing was published",
        )
    return None


def classify(e: BaseException, *, doing: str) -> WapError | None:
    """A named condition of the exception or any of its (Java) causes, outermost first; None when nothing is named.

    `doing` says what was attempted ("writing nyc.trips"), for the message.
    """
    if isinstance(e, WapError):
        return e
    links = list(walk(e))
    full = [link for link in links if disk_full(link)]
    if full:  # named by the innermost link that says so: the OS's words, not a wrapper's stage-failure text
        inner = full[-1]
        return DiskFull(
            f"no space left on a filesystem while {doing}{_location(links)} ({_simple(inner.cls)}: "
            f"{_first_line(inner.message) or 'disk full'})",
            hint=_DISK_FULL_HINT,
        )
    untrusted = tls_untrusted(e)
    if untrusted is not None:
        service = next((_target(links, i) for i, link in enumerate(links) if link.cls in _TLS_UNTRUSTED_JAVA), "")
        if service not in _ENDPOINTS and len(_ENDPOINTS) == 1:  # the one https server this config names
            service = next(iter(_ENDPOINTS))
        known = _ENDPOINTS.get(service)
        return untrusted_tls_error(f"{service} at {known.url}" if known else service or "the server", untrusted)
    for i, link in enumerate(links):
        found = _one(link, links, i, doing)
        if found is not None:
            return found
    return None


def named_or_bug(e: BaseException, *, doing: str, run_id: str | None, step: str | None) -> WapError:
    """What every caller makes of an exception it did not expect: a condition `classify` names, else a bug whose
    message carries the chain's useful text (a Java cause, not only the Py4J call that raised it)."""
    return classify(e, doing=doing) or unexpected_bug(e, run_id=run_id, step=step)


def unexpected_bug(e: BaseException, *, run_id: str | None, step: str | None) -> BugError:
    """`errors.bug` with the readable text of the whole chain (`describe`)."""
    try:
        detail = describe(e)
    except Exception:  # noqa: BLE001 - the bug report must not fail on the exception it reports
        detail = None
    return bug(e, run_id=run_id, step=step, detail=detail)
