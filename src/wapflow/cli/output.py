"""The one output layer of `wap`: every byte a command prints goes through here.

stdout carries results: Rich tables and lines for people, or exactly one JSON document with --json.
Progress and errors for people go to stderr, so a piped `--json` stays parseable. Errors are one block
(what, where, what to do, where the details are), never a stack trace. Commands build no rows
themselves: they get them from wapflow.service (or the core) and hand them to these helpers.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from wapflow import display
from wapflow.display import ID_COLUMNS, is_whole
from wapflow.errors import WapError
from wapflow.service import render

if TYPE_CHECKING:
    from wapflow.lakehouse.progress import Tick
    from wapflow.pipeline.result import MultiRunResult, RunResult


def _out_settings() -> dict[str, Any]:
    # Piped output (CI logs, `| less`) gets wide tables instead of Rich's 80 columns, unless COLUMNS says how
    # wide; ids print whole at any width (IdTable).
    columns = os.environ.get("COLUMNS", "")
    return {"highlight": False, "soft_wrap": True, "width": None if sys.stdout.isatty() or columns.isdigit() else 120}


def _err_settings() -> dict[str, Any]:
    return {"stderr": True, "highlight": False, "soft_wrap": True}


out = Console(**_out_settings())
err = Console(**_err_settings())


def follow_terminal() -> None:
    """Set `out` and `err` up again for this moment's sys.stdout, sys.stderr and environment, as if the
    process had just started: the engine (wapflow.engine) runs each command for another client's terminal.
    In place, because modules hold these two objects."""
    Console.__init__(out, **_out_settings())
    Console.__init__(err, **_err_settings())


STATUS_COLOR = {
    "published": "green",
    "blocked": "yellow",
    "failed": "red",
    "awaiting_review": "cyan",
    "rejected": "magenta",
}
CHECK_STYLE = {"passed": "green", "failed": "bold red", "warned": "yellow", "quarantined": "magenta"}


def log_path() -> str | None:
    """Spark's log file of this process, if Spark started: JSON errors name it so the details can be found."""
    from wapflow.lakehouse.session import log_file

    path = log_file()
    return str(path) if path is not None else None


def emit_json(obj: Any) -> None:
    """The one JSON document of a --json command (datetimes and other values as their str)."""
    sys.stdout.write(json.dumps(obj, default=str, indent=2) + "\n")
    sys.stdout.flush()


def print_error(text: str) -> None:
    """The one error block a person sees: what, where, what to do, and where the details are."""
    from wapflow.lakehouse.session import log_file

    path = log_file()
    note = f"\n  Spark's log: {path}" if path is not None and path.exists() else ""
    # escape(): messages name wap.toml sections like [s3] or [lakehouse], which are not Rich markup.
    err.print(f"[bold red]error:[/bold red] {escape(text + note)}")


class Output:
    """Console or JSON for one command: progress, the result, or the error that ends it."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def progress(self, msg: str) -> None:
        """A step under way (Spark start, jar download): dim, on stderr, in both modes."""
        err.print(f"[dim]· {msg}[/dim]")

    def meter(self) -> BarMeter | None:
        """A progress bar for long Spark work, on a terminal only: --json, pipes and CI logs keep plain lines."""
        if self.as_json or not err.is_terminal:
            return None
        return BarMeter(err)

    def result(self, doc: Any, show: Callable[[], object]) -> None:
        """Print `doc` as JSON, or call `show` to render it for people."""
        if self.as_json:
            emit_json(doc)
        else:
            show()

    def fail(self, e: WapError) -> NoReturn:
        """End the command with `e`: its JSON document (with the log path) or the error block; its exit code."""
        if self.as_json:
            emit_json({"status": "failed", "error": {**e.to_dict(), "log": log_path()}})
        else:
            print_error(str(e))
        raise typer.Exit(e.exit_code)


class BarMeter:
    """wapflow.lakehouse.progress's Meter as a Rich bar on stderr: tasks done of all, and rows read (bytes on
    Spark Connect). Transient: once the step ends the bar goes and the step's own lines stay."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def update(self, tick: Tick) -> None:
        if self.bar is None:
            self.bar = Progress(
                TextColumn("[dim]· {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("tasks"),
                TextColumn("{task.fields[read]}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task(tick.label, total=tick.tasks, read="")
        assert self.task is not None
        read = f"{tick.rows:,} rows read" if tick.rows is not None else f"{(tick.bytes_read or 0) / 1e6:,.1f} MB read"
        self.bar.update(self.task, total=tick.tasks, completed=tick.tasks_done, read=read)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
        self.bar, self.task = None, None


# Columns of free text in a list: one line of at most this many characters, cut with "…" (`wap report`, `wap files
# --json` and the dashboard give the whole text).
TEXT_COLUMNS = frozenset({"reason", "message", "error"})
TEXT_CELL = 60
# The least width (characters) the other columns shrink to before a table grows wider than the terminal.
SHRINK_FLOOR = 5
# The least width a free-text column keeps in a table that drops optional columns to fit (rows_table's
# `optional`): narrower, its words would break inside.
TEXT_FLOOR = 24


class IdTable(Table):
    """A table whose id columns (no_wrap) print whole at any width. When the table is wider than the console,
    the other columns wrap, widest first, down to their floor (SHRINK_FLOOR, or the longest word of their
    header); then the padding at the table's edges and its outer border go; past that the table is wider than
    the console (a terminal wraps its lines, but an id stays one unbroken word to copy)."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        saved = (self.width, self.pad_edge, self.show_edge)
        try:
            if self.width is None:
                for compact in ("pad_edge", "show_edge"):
                    if self._least_width(console, options) <= options.max_width:
                        break
                    setattr(self, compact, False)
                need = self._least_width(console, options)
                if need > options.max_width:
                    self.width = need
            yield from super().__rich_console__(console, options)
        finally:
            self.width, self.pad_edge, self.show_edge = saved

    def _least_width(self, console: Console, options: ConsoleOptions) -> int:
        wide = options.update_width(1_000_000)
        total = self._extra_width
        for column in self.columns:
            natural = self._measure_column(console, wide, column).maximum
            header = max((len(w) for w in str(column.header).split()), default=0)
            floor = max(SHRINK_FLOOR, header) + self._get_padding_width(column._index)
            total += natural if column.no_wrap else min(natural, floor)
        return total


def id_table(
    title: str | None,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    ids: Iterable[str] = (),
    *,
    words: bool = False,
) -> Table:
    """Text cells (Rich markup) under their columns: the id columns (ID_COLUMNS and `ids`) whole, under their
    own name; the others wrap, and with `words` (the CLI's own labels, not a query's or a table's columns) under
    their name in words (`failed checks`), so a narrow header wraps too."""
    whole = ID_COLUMNS | set(ids)
    t = IdTable(title=title, title_justify="left")
    for i, c in enumerate(columns):
        if c in whole:
            longest = max([len(c)] + [Text.from_markup(r[i]).cell_len for r in rows])
            t.add_column(c, no_wrap=True, overflow="ignore", min_width=longest)
        elif is_whole(c):  # words, times and other ids (`..._id`)
            t.add_column(escape(c.replace("_", " ") if words else c), no_wrap=True, overflow="ignore")
        else:
            t.add_column(escape(c.replace("_", " ") if words else c), overflow="fold")
    for r in rows:
        t.add_row(*r)
    return t


def is_id(column: str, ids: Iterable[str] = ()) -> bool:
    """Whether a column holds ids (ID_COLUMNS, `ids`, any `..._id`): their numbers print as they are, never grouped
    (a snapshot id is copied into the next command; 12001 is an order id, not twelve thousand of something)."""
    return display.is_id(column) or column in set(ids)


def cell(v: Any, *, grouped: bool = True) -> str:
    """A value as a table cell (wapflow.service.render.text): nothing for None, lists comma-separated, a number
    with thousands separated (wapflow.display.number: `1,234,567`; not `grouped`: an id's, `1234567`; --json
    keeps the number)."""
    if isinstance(v, int | float | Decimal) and not isinstance(v, bool):
        return display.number(v, grouped=grouped)
    return render.text(v, none="")


def rows_table(
    title: str | None,
    rows: Sequence[Any],
    columns: Sequence[str],
    ids: Iterable[str] = (),
    *,
    optional: Sequence[str] = (),
    more: str = "--json shows them",
) -> Table:
    """Rows (dicts, e.g. from wapflow.service) as a table of the named columns, ids whole (id_table). Columns in
    `optional` are left out, in that order, while the table is wider than the terminal (its ids, words and times
    whole, its text TEXT_FLOOR wide); a caption names them and `more`, where they are."""
    ids = list(ids)
    cells = {c: [escape(_short(c, cell(r.get(c), grouped=not is_id(c, ids)))) for r in rows] for c in columns}
    whole, width = set(ids), out.width
    kept = [c for c in columns if c not in optional]
    for extra in reversed([c for c in optional if c in cells]):  # the last left out first: taken while it fits
        if _least([*kept, extra], cells, whole) <= width:
            kept.append(extra)
    shown = [c for c in columns if c in kept]
    if rows and _least(shown, cells, whole) > width:  # even the ids do not fit side by side: one record a row
        return _records(title, columns, cells, whole, len(rows))
    dropped = [c for c in optional if c in cells and c not in kept]
    t = id_table(title, shown, [[cells[c][i] for c in shown] for i in range(len(rows))], ids, words=True)
    if dropped:
        names = ", ".join(c.replace("_", " ") for c in dropped)
        t.caption, t.caption_justify = escape(f"not shown at {width} columns: {names} ({more})"), "left"
    return t


def _records(title: str | None, columns: Sequence[str], cells: dict[str, list[str]], ids: set[str], n: int) -> Table:
    """Rows for a terminal too narrow for them side by side: each row as its columns' names (in words) beside
    their values, a blank line between rows. Ids, words and times whole; free text wraps."""
    t = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    t.add_column(no_wrap=True, style="bold")
    kept = [Text.from_markup(x).cell_len for c in columns if c in ids or is_whole(c) for x in cells[c]]
    t.add_column(overflow="fold", min_width=max(kept, default=0) or None)  # an id never breaks
    for i in range(n):
        if i:
            t.add_row("", "")
        for c in columns:
            if cells[c][i]:
                t.add_row(escape(c.replace("_", " ")), cells[c][i])
    return t


def _least(columns: Sequence[str], cells: dict[str, list[str]], ids: set[str]) -> int:
    """The width a table of these columns needs with nothing wrapped inside a value: ids (wapflow.display's and
    `ids`), words and times at their longest, free text at TEXT_FLOOR (or its longest cell, if shorter); plus
    padding and borders."""
    total = 1
    for c in columns:
        longest = max([len(w) for w in c.replace("_", " ").split()] + [Text.from_markup(x).cell_len for x in cells[c]])
        total += (longest if c in ids or is_whole(c) else min(longest, TEXT_FLOOR)) + 3
    return total


def _short(column: str, text: str) -> str:
    """A free-text cell (TEXT_COLUMNS) as one line of at most TEXT_CELL characters."""
    if column not in TEXT_COLUMNS:
        return text
    line = " ".join(text.split())
    return line if len(line) <= TEXT_CELL else line[: TEXT_CELL - 1].rstrip() + "…"


def grid(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    """Positional rows (query results) under their column names, untitled."""
    return id_table(None, columns, [[escape(render.datum(v)) for v in r] for r in rows])


def checks_table(checks: list[dict[str, Any]]) -> Table:
    """The audit of a run: one line per check, its status colored, its observed value for people."""
    rows = []
    for c in checks:
        shown = render.check_cells(c)
        rows.append(
            [
                escape(str(c["name"])),
                f"[{CHECK_STYLE.get(c['status'], '')}]{c['status']}[/]",
                escape(shown["observed"]),
                shown["failing_rows"],
                escape(shown["threshold"]),
                str(c["severity"]),
                cell(c.get("source")),
            ]
        )
    return id_table("audit", ["check", "status", "observed", "failing rows", "threshold", "severity", "from"], rows)


def render_failures(checks: list[dict[str, Any]], limit: int = 20) -> None:
    """Samples and a reproduction query for every check that did not pass."""
    for c in checks:
        if c["status"] == "passed" or not (c.get("samples") or c.get("sql")):
            continue
        out.print(f"[bold]{escape(str(c['name']))}[/bold]: {render.text(c.get('failing_rows'))} failing row(s)")
        samples = [render.sample_row(r) for r in c.get("samples") or []]
        if samples:
            cols = list(samples[0])
            shown = [[escape(render.datum(r.get(col))) for col in cols] for r in samples[:limit]]
            out.print(id_table(None, cols, shown))
            if len(samples) > limit:
                out.print(f"  ({len(samples)} sample rows stored; `wap report` shows them all)")
        if c.get("sql"):
            out.print(f"  reproduce: [cyan]{c['sql']}[/cyan]")


def render_run(res: RunResult) -> None:
    """One run's outcome for people: status line, schema notes, audit, failures, rows, message."""
    color = STATUS_COLOR.get(res.status, "white")
    # A failed run's branch is named only when it is kept: before write it never existed, and a failed write drops it.
    shown = res.branch and (res.status != "failed" or res.branch_kept)
    branch = f"  branch {res.branch}" if shown else ""
    out.print(f"[bold {color}]{res.status.upper()}[/] {res.table}  run {res.run_id}{branch}")
    for note in res.schema_changes or []:
        out.print(f"schema: {note}")
    if res.checks:
        out.print(checks_table(res.checks))
        render_failures(res.checks, limit=5)
    if res.rows_written is not None:  # a run held for review or blocked has no snapshot on main
        snapshot = f"   snapshot: {res.snapshot_id}" if res.snapshot_id is not None else ""
        out.print(f"rows written: {res.rows_written}{snapshot}")
    if res.status == "failed":
        print_error(res.message)
    else:
        out.print(res.message)


def render_group(res: MultiRunResult) -> None:
    """A multi-table run's outcome: each table's, then the group's one line."""
    for r in res.tables:
        render_run(r)
    color = STATUS_COLOR.get(res.status, "white")
    out.print(f"[bold {color}]{res.status.upper()}[/] run {res.run_id}: {escape(res.message)}")


def run_doc(res: RunResult) -> dict[str, Any]:
    """A run's JSON document; a failed one also names Spark's log."""
    doc = res.to_dict()
    if doc.get("error"):
        doc["error"] = {**doc["error"], "log": log_path()}
    return doc
