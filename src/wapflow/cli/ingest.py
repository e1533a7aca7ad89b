"""`wap ingest` (a source's new files, exactly once), and the file ledger: `wap files`, `wap skip`, `wap retry`."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated

import typer

from wapflow.cli.common import ConfigOpt, JsonOpt, on_lakehouse, open_lakehouse
from wapflow.cli.output import Output, out, print_error, rows_table
from wapflow.cli.run import NoChecksOpt
from wapflow.errors import UsageError, WapError

if TYPE_CHECKING:
    from wapflow.outer.ingest import IngestResult

FILE_COLUMNS = ["source", "uri", "state", "run_id", "snapshot_id", "attempts", "reason"]


def ingest(
    source: Annotated[str, typer.Argument(help="A [sources.NAME] section of wap.toml.")],
    no_checks: NoChecksOpt = False,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List SOURCE's location, skip files the ledger knows, run the new ones in batches, record each file.

    Exit 0: every new file published (or nothing new); 1: a file was blocked; 3: a file failed; 2: bad usage, or
    every failed file failed on wap.toml (a model's SQL).
    """
    from wapflow import api

    o = Output(as_json)
    res = on_lakehouse(config, o, lambda lh: api.ingest(lh, source, no_checks=no_checks))

    o.result(res.to_dict(), lambda: _show_ingest(res))
    raise typer.Exit(res.exit_code)


def _show_ingest(res: IngestResult) -> None:
    """What ingest and backfill print: the planned batches (dry run), the files run, and a summary line."""
    for i, batch in enumerate(res.planned, start=1):
        out.print(f"batch {i}: {len(batch)} file(s): {', '.join(batch[:3])}{' ...' if len(batch) > 3 else ''}")
    if res.files:
        out.print(rows_table(None, [f.to_dict() for f in res.files], FILE_COLUMNS))
    out.print(res.message())
    # Each failed file's error whole, as one run's would be: the table's cell is cut to fit the terminal.
    for f in res.files:
        if f.state == "failed" and f.error:
            hint = f"\n  hint: {f.error['hint']}" if f.error.get("hint") else ""
            print_error(f"{f.uri}: {f.error.get('message') or f.reason}{hint}")


def backfill(
    source: Annotated[str, typer.Argument(help="A [sources.NAME] section of wap.toml.")],
    since: Annotated[str | None, typer.Option("--since", help="Files modified at or after (date, UTC).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Files modified before (date, UTC).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the batches; run and record nothing.")] = False,
    no_checks: NoChecksOpt = False,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """SOURCE's historical files in a time window, oldest first, in batches; resumable (the ledger knows).

    Exit codes as for `wap ingest`.
    """
    from wapflow import api
    from wapflow.outer.ingest import parse_when

    o = Output(as_json)
    res = on_lakehouse(
        config,
        o,
        lambda lh: api.backfill(
            lh,
            source,
            since=parse_when(since, "--since"),
            until=parse_when(until, "--until"),
            dry_run=dry_run,
            no_checks=no_checks,
        ),
    )

    o.result(res.to_dict(), lambda: _show_ingest(res))
    raise typer.Exit(res.exit_code)


def files(
    source: Annotated[str | None, typer.Argument(help="Only this source's files.")] = None,
    state: Annotated[
        str | None, typer.Option("--state", help="pending, claimed, published, blocked, failed, skipped, reverted")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit")] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The file ledger: every file a source has seen and where it is (no Spark needed)."""
    from wapflow.service.files import list_files

    o = Output(as_json)
    rows = on_lakehouse(config, o, lambda lh: list_files(lh.ledger, lh.config, source, state, limit))
    o.result({"files": rows}, lambda: out.print(rows_table("files", rows, FILE_COLUMNS)))


def retry(
    target: Annotated[str, typer.Argument(help="A file (as `wap files` shows it) or a run id.")],
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Put a blocked, failed, skipped or reverted file (or a run's files) back in line for the next ingest."""
    from wapflow.service.files import retry as retry_files

    o = Output(as_json)
    rows = on_lakehouse(config, o, lambda lh: retry_files(lh.ledger, target))

    def show() -> None:
        out.print(f"{len(rows)} file(s) back in line; the next `wap ingest` runs them")

    o.result({"files": rows}, show)


def skip(
    target: Annotated[str, typer.Argument(help="The file to leave out (this version of it).")],
    reason: Annotated[str, typer.Option("--reason", help="Why; shown in `wap files`.")],
    source: Annotated[str | None, typer.Option("--source", help="Its source, if the ledger has not seen it.")] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Never ingest this version of a file."""
    from wapflow.service.files import skip as skip_file

    o = Output(as_json)
    doc = on_lakehouse(config, o, lambda lh: skip_file(lh.ledger, lh.config, lh.storage, target, reason, source))
    o.result(doc, lambda: out.print(f"skipped {doc['uri']}: {doc['reason']}"))


def revert(
    run_id: Annotated[str, typer.Argument(help="A published run (see `wap runs`).")],
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Take a published run's rows back off main (one new snapshot; other runs' rows untouched)."""
    from wapflow.outer.revert import revert as revert_run

    o = Output(as_json)
    doc = on_lakehouse(config, o, lambda lh: revert_run(lh, run_id))
    o.result(doc, lambda: out.print(doc["message"]))


def watch(
    sources: Annotated[list[str] | None, typer.Argument(help="[sources.NAME] sections (default: all).")] = None,
    once: Annotated[
        bool, typer.Option("--once", help="List once, run what is new and what was interrupted, then exit.")
    ] = False,
    worker: Annotated[
        str | None, typer.Option("--worker", help="This worker's name (default [watch] worker); one per process.")
    ] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A long-running worker: lists sources (every [watch] interval or on their schedule), reads their S3
    events, and runs each batch as a durable workflow (DBOS) that resumes after a crash.

    Stops cleanly on SIGTERM or Ctrl-C (exit 0). With --once, exit codes as for `wap ingest`. A source whose
    table has no checks is refused (exit 2) unless its section says checks = [] (watch takes no --no-checks:
    a worker's consent to publish unaudited belongs in wap.toml).
    """
    from wapflow.outer.ingest import check_consent
    from wapflow.outer.watch import Watcher

    o = Output(as_json)
    try:
        lh = open_lakehouse(config, o)
        for name in sources or list(lh.config.sources):
            check_consent(lh, lh.config.resolve_source(name), no_checks=False, flag=None)
        if worker is not None:
            if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", worker):
                raise UsageError(f"--worker {worker!r} is not a worker name", hint="letters, digits, _.- (64 at most)")
            lh.config.watch = lh.config.watch.model_copy(update={"worker": worker})
        w = Watcher(lh, list(sources or []), once=once, say=o.progress)
        res = w.run()
    except WapError as e:
        o.fail(e)

    def show() -> None:
        if res.files:
            out.print(rows_table(None, [f.to_dict() for f in res.files], FILE_COLUMNS))
        counts = ", ".join(f"{n} {s}" for s, n in sorted(res.to_dict()["counts"].items()))
        out.print(f"watch stopped: {len(res.runs)} run(s) finished" + (f"; files: {counts}" if counts else ""))

    o.result(res.to_dict(), show)
    raise typer.Exit(res.exit_code if once else 0)
