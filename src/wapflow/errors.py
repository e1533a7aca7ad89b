"""One exception family, so callers (CLI, schedulers, retries) can act on the kind of failure.

Every failure is one of six kinds, and the kind alone says what an automaton should do:

- input: a source file is unreadable, corrupt, empty or does not fit the table (terminal for that file);
- config: wap.toml, a command-line option or a check declaration is wrong (terminal);
- environment: Java, jars, credentials or permissions are missing (terminal until someone acts);
- transient: a named condition a retry may clear (commit conflict after the built-in retries,
  connection refused/reset/timeout, throttling, a 5xx of the catalog or storage);
- conflict: main moved in a way this run's snapshots cannot be re-applied onto, or another process decided
  a run awaiting review first (terminal);
- bug: an exception nobody named; terminal, because retrying code that is wrong does not help.

Errors are classified where what failed is known (see `wapflow.spark.errors.classify`),
never by searching messages for words. This module imports nothing of wapflow.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Any

# Exit codes of every `wap` command and of RunResult / IngestResult.exit_code. The one table of them is
# _EXIT_CODES below (exit_code_table): the CLI's help and the documentation print it.
EXIT_PUBLISHED = 0
EXIT_BLOCKED = 1
EXIT_USAGE = 2
EXIT_RUNTIME = 3
EXIT_CONFLICT = 4
EXIT_TRANSIENT = 5
EXIT_REVIEW = 6
EXIT_STOPPED = 130  # 128 + SIGINT, the shell's convention for "interrupted"

_EXIT_CODES: tuple[tuple[int, str, str], ...] = (
    (
        EXIT_PUBLISHED,
        "published",
        "published (or already published by an earlier attempt of the same run id); for ingest, backfill "
        "and watch --once: every new file published, or nothing new",
    ),
    (
        EXIT_BLOCKED,
        "blocked",
        "blocked by the audit or the schema contract: main unchanged, the branch kept for inspection "
        "(or dropped); for ingest, backfill and watch --once: a file blocked",
    ),
    (
        EXIT_USAGE,
        "usage",
        "bad wap.toml or option, unknown check, column, table, branch or run, invalid name; a source file or "
        "pattern that names nothing (a missing file, a glob matching no file); `wap run` of a file the table "
        "published already, unchanged, without --again; for ingest, backfill and watch --once: every failed file "
        "failed on wap.toml (a model's SQL); a table without checks run "
        "without `checks = []` or --no-checks; approve or reject of a run that is not awaiting review "
        "(published, blocked, failed), or with a blank --reason",
    ),
    (
        EXIT_RUNTIME,
        "runtime",
        "input (an empty, corrupt or unparseable file), environment (Java, jars, credentials, "
        "permissions, a missing bucket) or a bug; for ingest, backfill and watch --once: a file failed",
    ),
    (
        EXIT_CONFLICT,
        "conflict",
        "main moved and the run's snapshots cannot be re-applied onto it; the branch is kept; for approve and "
        "reject: another approve or reject decided the run first (exactly one of them wins); a run id that another "
        "live process is running right now",
    ),
    (
        EXIT_TRANSIENT,
        "transient",
        "a retry may help: a commit conflict after the built-in retries, a connection refused, reset or timed "
        "out, throttling, a 5xx of the catalog or storage, the publish lock's wait timed out; for ingest and "
        "backfill: files still being written after waiting settle_seconds once (run again)",
    ),
    (
        EXIT_REVIEW,
        "review",
        'the audit passed and the table\'s `review` ("always", or "on_warn" with a warning) holds the run for a '
        "person: main unchanged, the branch kept until `wap approve RUN` or `wap reject RUN`; for ingest, "
        "backfill and watch --once: a file awaits review (and none failed or was blocked)",
    ),
    (
        EXIT_STOPPED,
        "stopped",
        "a stop signal (SIGTERM, Ctrl-C) ended a one-off command before it finished: what was under way "
        "resumes when it runs again (watch, serve and dashboard exit 0 when stopped: it is their normal end)",
    ),
)


def exit_code_table() -> list[tuple[int, str, str]]:
    """(code, name, meaning) of every exit code, in order: what `wap --help` and the docs print."""
    return list(_EXIT_CODES)


KINDS = ("input", "config", "environment", "transient", "conflict", "bug")


class WapError(Exception):
    """Base of every error wapflow raises on purpose; raised bare, it is a bug (no kind was named)."""

    exit_code: int = EXIT_RUNTIME
    retryable: bool = False
    kind: str = "bug"

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.kind not in KINDS:
            raise TypeError(f"{cls.__name__}.kind must be one of {KINDS}, not {cls.kind!r}")

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        run_id: str | None = None,
        step: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.run_id = run_id
        self.step = step

    def at(self, *, run_id: str | None = None, step: str | None = None) -> WapError:
        """Attach where the error happened without losing the original message."""
        if run_id and not self.run_id:
            self.run_id = run_id
        if step and not self.step:
            self.step = step
        return self

    def __str__(self) -> str:
        where = []
        if self.run_id:
            where.append(f"run {self.run_id}")
        if self.step:
            where.append(f"step {self.step}")
        text = (", ".join(where) + ": " if where else "") + self.message
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def to_dict(self) -> dict[str, object]:
        return {
            "type": type(self).__name__,
            "kind": self.kind,
            "message": self.message,
            "hint": self.hint,
            "run_id": self.run_id,
            "step": self.step,
            "retryable": self.retryable,
            "exit_code": self.exit_code,
        }


class TerminalError(WapError):
    """Retrying the same input and configuration gives the same failure."""


class TransientError(WapError):
    """A named condition a retry may clear; exit 5. Raise one of the subclasses where one fits."""

    exit_code = EXIT_TRANSIENT
    retryable = True
    kind = "transient"


class CommitConflict(TransientError):
    """The catalog refused a commit because another writer committed first, even after the built-in retries."""


class Unreachable(TransientError):
    """A connection to the catalog, storage or Nessie was refused, reset or timed out."""


class Throttled(TransientError):
    """Storage asked us to slow down (S3 503 SlowDown, throttling)."""


class ServiceError(TransientError):
    """The catalog, storage or Nessie answered with a server error (HTTP 5xx)."""


class LockTimeout(TransientError):
    """Another process held the publish lock for longer than we were willing to wait."""


class ConfigError(TerminalError):
    """wap.toml, a command-line option or a check declaration is wrong."""

    exit_code = EXIT_USAGE
    kind = "config"


class UsageError(ConfigError):
    """A command was called with arguments that cannot work."""


class InvalidIdentifier(ConfigError):
    """A table, namespace or branch name that would not be safe to put into SQL."""


class NotFound(ConfigError):
    """A table, branch, run or snapshot the user named does not exist."""


class EnvironmentProblem(TerminalError):
    """The machine lacks something wapflow needs (Java 17+, JVM jars, credentials, a permission)."""

    exit_code = EXIT_RUNTIME
    kind = "environment"


class DiskFull(EnvironmentProblem):
    """A filesystem wapflow or Spark writes to is full or over its quota (the warehouse, the run store, the
    catalog's database, Spark's local folders, the logs). Not worth retrying until someone frees space."""


class InputError(TerminalError):
    """A source file is missing, empty, corrupt, or does not match the table."""

    exit_code = EXIT_RUNTIME
    kind = "input"


class MissingInput(InputError):
    """A source the user named names nothing: a file that does not exist, a glob matching no file. A usage
    error (exit 2: the command names the wrong thing), though of the input kind for the file ledger."""

    exit_code = EXIT_USAGE


class SchemaMismatch(InputError):
    """The files' columns or types do not fit the table under its schema policy."""


class PublishConflict(TerminalError):
    """Main moved in a way this run's snapshots cannot be re-applied onto; a plain retry meets the same main."""

    exit_code = EXIT_CONFLICT
    kind = "conflict"


class AlreadyDecided(TerminalError):
    """An approve or reject found the run decided by another one (a race: exactly one of them wins)."""

    exit_code = EXIT_CONFLICT
    kind = "conflict"


class RunInProgress(TerminalError):
    """The run id is being run by another live process: that process finishes it (an ingest that found its
    files' claim left by a dead process leaves them to the live one)."""

    exit_code = EXIT_CONFLICT
    kind = "conflict"


class BugError(TerminalError):
    """An exception no part of wapflow named: a defect to report, never something to retry."""

    exit_code = EXIT_RUNTIME
    kind = "bug"

    def __init__(self, message: str, *, cause_type: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.cause_type = cause_type

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "cause_type": self.cause_type}


def _cause_type(e: BaseException) -> str:
    """The exception's class, and for a Py4J error the Java class behind it."""
    name = type(e).__name__
    java = getattr(e, "java_exception", None)
    if java is not None:
        try:
            return f"{name} ({java.getClass().getName()})"
        except Exception:  # noqa: BLE001 - a dead gateway must not hide the original error
            pass
    return name


def bug(e: BaseException, *, run_id: str | None, step: str | None, detail: str | None = None) -> BugError:
    """An exception nobody classified, as a terminal error that says it is a bug and where it happened.

    `detail`: what failed, read from the whole exception chain (wapflow.spark.errors.describe), for a Py4J
    error whose own text only says which Java call it was ("An error occurred while calling o76.tableExists").
    """
    lines = (detail or str(e)).strip().splitlines()
    first = lines[0][:300] if lines else ""
    cause = _cause_type(e)
    return BugError(
        f"this is a bug in wapflow: unexpected {cause}" + (f": {first}" if first else ""),
        hint="retrying will not help; report it with the run id and Spark's log",
        cause_type=cause,
        run_id=run_id,
        step=step,
    )


def did_you_mean(
    word: str,
    options: Iterable[str],
    *,
    n: int = 3,
    shown: Callable[[str], str] | None = None,
    cutoff: float = 0.6,
) -> str:
    """A ' (did you mean ...?)' suffix, or '' when nothing is close (difflib's ratio below `cutoff`). `shown`
    writes an option as the message names it (default: quoted), e.g. as its wap.toml section."""
    opts = list(options)
    lowered = {o.lower(): o for o in opts}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=cutoff)
    if not close:
        return ""
    show = shown or (lambda o: f"'{o}'")
    names = " or ".join(show(lowered[c]) for c in close)
    return f" (did you mean {names}?)"
