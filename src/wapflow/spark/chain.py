"""One walker of exception chains: Python causes, the Java throwables behind Py4J errors, Spark's conditions.

Every place that looks into an exception's causes (classification and readable text in
spark_errors, a run's input errors in wapflow.writing.input_errors) walks it with `walk`, so they all
see the same chain: the same Python links (__cause__, else __context__ unless suppressed), the same
Java causes, the same depth limits.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

# Java classes that answer more than a message: statusCode() / awsErrorDetails() (AWS SDK v2 and S3A
# wrappers), getStatus() (Nessie), getErrorCode() (SQLite's result code) and getSQLState() (PostgreSQL).
AWS_PREFIXES = ("software.amazon.awssdk.", "org.apache.hadoop.fs.s3a.")
NESSIE_PREFIX = "org.projectnessie."
SQLITE = frozenset({"org.sqlite.SQLiteException"})
POSTGRES = frozenset({"org.postgresql.util.PSQLException"})


@dataclass(frozen=True, eq=False)
class Link:
    """One exception of a chain: a Python exception, or a Java throwable behind one (through Py4J).

    What more a link says is read only when asked (a Py4J call each): Spark's condition and its
    parameters, and the HTTP status or error code a service answered.
    """

    error: Any  # the BaseException, or the Py4J object of the Java throwable
    java: bool
    cls: str  # fully qualified class name
    message: str  # Python: str(e); Java: getMessage()

    @cached_property
    def names(self) -> frozenset[str]:
        """Python: every class name of its MRO (so optional packages need not be imported); Java: just cls."""
        if self.java:
            return frozenset({self.cls})
        return frozenset(c.__name__ for c in type(self.error).__mro__)

    @cached_property
    def condition(self) -> str | None:
        """Spark's error condition (e.g. TABLE_OR_VIEW_ALREADY_EXISTS); None when the exception has none."""
        get = getattr(self.error, "getCondition", None)
        if not callable(get):
            return None
        try:
            cond = get()
        except Exception:  # noqa: BLE001 - older Spark errors and non-Spark throwables lack conditions
            return None
        return str(cond) if cond else None

    @cached_property
    def parameters(self) -> dict[str, str]:
        """The parameters of Spark's condition (e.g. the path of FAILED_READ_FILE); {} when none."""
        get = getattr(self.error, "getMessageParameters", None)
        if not callable(get):
            return {}
        try:
            params = get()
            return {str(k): str(v) for k, v in dict(params or {}).items()}
        except Exception:  # noqa: BLE001 - older Spark errors and non-Spark throwables lack parameters
            return {}

    @cached_property
    def answer(self) -> tuple[int | None, str | None]:
        """(HTTP status, error code) a service answered: S3 (AWS SDK, S3A), Nessie, SQLite's result code
        (not HTTP) or PostgreSQL's SQLSTATE (not an S3 code); (None, None) for anything else."""
        e, cls = self.error, self.cls
        if not self.java:
            response = getattr(e, "response", None)
            if isinstance(response, dict):  # botocore ClientError
                err = response.get("Error") or {}
                return _int((response.get("ResponseMetadata") or {}).get("HTTPStatusCode")), (
                    str(err.get("Code") or "") or None
                )
            if response is not None:  # httpx.HTTPStatusError
                return _int(getattr(response, "status_code", None)), None
            return None, None
        if cls.startswith(AWS_PREFIXES):
            c = _call(e, "awsErrorDetails", "errorCode")
            return _int(_call(e, "statusCode")), str(c) if c is not None else None
        if cls in SQLITE:
            return _int(_call(e, "getErrorCode")), None
        if cls in POSTGRES:
            state = _call(e, "getSQLState")
            return None, str(state) if state is not None else None
        if cls.startswith(NESSIE_PREFIX):
            return _int(_call(e, "getStatus")) or _int(_call(e, "getError", "getStatus")), None
        return None, None

    @property
    def status(self) -> int | None:
        return self.answer[0]

    @property
    def code(self) -> str | None:
        return self.answer[1]


def walk(e: BaseException, *, limit: int = 48) -> Iterator[Link]:
    """The exception and its causes, outermost first: each Python exception, then the Java chain behind it.

    Python: __cause__, else __context__ unless suppressed (`raise ... from None`). Java: Py4J's
    java_exception or a PySpark captured error's _origin, then getCause() (at most 16 deep; a dead
    gateway ends it). A captured error's own _cause is not followed: it mirrors the Java causes
    already walked. Spark Connect errors have no Java side; their condition and parameters are on
    the Python exception (Link.condition). Lazy, so a caller that finds what it looks for stops
    early; at most `limit` links are started.
    """
    seen: set[int] = set()
    n = 0
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen and n < limit:
        seen.add(id(cur))
        n += 1
        yield Link(cur, False, f"{type(cur).__module__}.{type(cur).__qualname__}", str(cur))
        java = getattr(cur, "java_exception", None) or getattr(cur, "_origin", None)
        if java is not None:
            for link in _java_links(java):
                n += 1
                yield link
        cur = cur.__cause__ or (None if cur.__suppress_context__ else cur.__context__)


def _java_links(j: Any, depth: int = 16) -> Iterator[Link]:
    for _ in range(depth):
        if j is None:
            return
        try:
            cls = str(j.getClass().getName())
            message = str(j.getMessage() or "")
        except Exception:  # noqa: BLE001 - a dead gateway must not hide the original error
            return
        yield Link(j, True, cls, message)
        try:
            j = j.getCause()
        except Exception:  # noqa: BLE001 - a dead gateway must not hide the original error
            return


def _call(obj: Any, *names: str) -> Any:
    """obj.a().b() through Py4J, or None when any step is missing (a class without that method)."""
    try:
        for n in names:
            obj = getattr(obj, n)()
            if obj is None:
                return None
        return obj
    except Exception:  # noqa: BLE001 - a getter the SDK exception lacks (or a dead gateway): no status to read
        return None


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None
