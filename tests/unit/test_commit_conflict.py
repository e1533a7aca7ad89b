"""spark_errors.commit_conflict: the one recogniser of a commit conflict, on hand-made exception chains (no JVM)."""

from __future__ import annotations

from typing import Any

from pyspark.errors.exceptions.connect import UnknownException

from wapflow.spark import errors as spark_errors


class _Class:
    def __init__(self, name: str) -> None:
        self.name = name

    def getName(self) -> str:
        return self.name


class FakeThrowable:
    """What Py4J hands Python for a Java exception: class, message, cause (and SQLite's result code)."""

    def __init__(self, cls: str, message: str, cause: FakeThrowable | None = None, code: int | None = None) -> None:
        self.cls, self.message, self.cause, self.code = cls, message, cause, code

    def getClass(self) -> _Class:
        return _Class(self.cls)

    def getMessage(self) -> str:
        return self.message

    def getCause(self) -> FakeThrowable | None:
        return self.cause

    def getErrorCode(self) -> int | None:
        return self.code

    def toString(self) -> str:
        return f"{self.cls}: {self.message}"


def java_error(throwable: FakeThrowable) -> Exception:
    e: Any = Exception("An error occurred while calling o42.sql")
    e.java_exception = throwable
    return e


def test_iceberg_commit_failure_anywhere_in_the_chain_is_a_conflict() -> None:
    inner = FakeThrowable("org.apache.iceberg.exceptions.CommitFailedException", "Cannot commit: stale metadata")
    assert spark_errors.commit_conflict(java_error(FakeThrowable("org.apache.spark.SparkException", "x", inner)))


def test_sqlite_busy_is_a_conflict_by_its_result_code_not_its_text() -> None:
    busy = FakeThrowable("org.sqlite.SQLiteException", "[SQLITE_BUSY] The database file is locked", code=5)
    assert spark_errors.commit_conflict(java_error(busy))
    other = FakeThrowable("org.sqlite.SQLiteException", "[SQLITE_BUSY] words only", code=1)  # SQLITE_ERROR
    assert not spark_errors.commit_conflict(java_error(other))


def test_words_decide_only_for_spark_connect_which_has_no_java_exception() -> None:
    text = "Cannot commit: CommitFailedException somewhere in a message"
    assert not spark_errors.commit_conflict(RuntimeError(text))
    assert not spark_errors.commit_conflict(java_error(FakeThrowable("java.lang.IllegalStateException", text)))
    connect = UnknownException("Cannot commit: stale", reason="org.apache.iceberg.exceptions.CommitFailedException")
    assert spark_errors.commit_conflict(connect)
    assert not spark_errors.commit_conflict(UnknownException("Table not found", reason="java.lang.RuntimeException"))
