"""One exception family, so callers (CLI, schedulers, retries) can act on the kind of failure.

Each error knows its CLI exit code and whether retrying the same thing can help
(the Terminal/Transient split): a typo in wap.toml will not fix itself, a Spark
executor lost to OOM or a concurrent commit might.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# Exit codes, documented in the README.
EXIT_PUBLISHED = 0
EXIT_BLOCKED = 1
EXIT_USAGE = 2
EXIT_RUNTIME = 3
EXIT_CONFLICT = 4


class WapError(Exception):
    """Base of every error wapflow raises on purpose."""

    exit_code: int = EXIT_RUNTIME
    retryable: bool = False
    kind: str = "error"

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
            "step": self.step,
            "retryable": self.retryable,
            "exit_code": self.exit_code,
        }


class TerminalError(WapError):
    """Retrying the same input and configuration gives the same failure."""


class TransientError(WapError):
    """A retry may succeed (lost executor, busy catalog, concurrent commit)."""

    retryable = True


class ConfigError(TerminalError):
    """wap.toml, a command-line option or a check declaration is wrong."""

    exit_code = EXIT_USAGE
    kind = "config"


class UsageError(ConfigError):
    """A command was called with arguments that cannot work."""

    kind = "usage"


class InvalidIdentifier(ConfigError):
    """A table, namespace or branch name that would not be safe to put into SQL."""

    kind = "identifier"


class EnvironmentProblem(TerminalError):
    """The machine lacks something wapflow needs (Java 17+, JVM jars)."""

    exit_code = EXIT_RUNTIME
    kind = "environment"


class InputError(TerminalError):
    """A source file is missing, empty, corrupt, or does not match the table."""

    exit_code = EXIT_RUNTIME
    kind = "input"


class SchemaMismatch(InputError):
    kind = "schema"


class EngineError(TransientError):
    """Spark or the catalog failed while doing work that was valid."""

    exit_code = EXIT_RUNTIME
    kind = "engine"


class PublishConflict(TransientError):
    """Main moved in a way this run's snapshots cannot be re-applied onto."""

    exit_code = EXIT_CONFLICT
    kind = "conflict"


class NotFound(TerminalError):
    """A table, branch, run or snapshot the user named does not exist."""

    exit_code = EXIT_USAGE
    kind = "not_found"


def did_you_mean(word: str, options: Iterable[str], *, n: int = 3) -> str:
    """A ' (did you mean ...?)' suffix, or '' when nothing is close."""
    opts = list(options)
    lowered = {o.lower(): o for o in opts}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=0.6)
    if not close:
        return ""
    names = " or ".join(f"'{lowered[c]}'" for c in close)
    return f" (did you mean {names}?)"
