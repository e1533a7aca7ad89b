"""`wap ingest` (a source's new files, exactly once), and the file ledger: `wap files`, `wap skip`, `wap retry`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from wapflow.cli.common import ConfigOpt, JsonOpt, open_lakehouse
from wapflow.cli.output import Output, out, rows_table
from wapflow.errors import WapError

FILE_COLUMNS = ["source", "uri", "state", "run_id", "snapshot_id", "attempts", "reason"]


def ingest(
    source: Annotated[str, typer.Argument(help="A [sources.NAME] section of wap.toml.")],
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List SOURCE's location, skip files the ledger knows, run the new ones in batches, record each file.

    Exit 0: every new file published (or nothing new); 1: a file was blocked; 3: a file failed; 2: bad usage.
    """
    from wapflow.outer.ingest import ingest as run_ingest

    o = Output(as_json)
    try:
        res = run_ingest(open_lakehouse(config, o), source)
    except WapError as e:
        o.fail(e)

    def show() -> None:
        if res.files:
            out.print(rows_table(None, [f.to_dict() for f in res.files], FILE_COLUMNS))
        out.print(res.message())

    o.result(res.to_dict(), show)
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
    try:
        lh = open_lakehouse(config, o)
        rows = list_files(lh.ledger, lh.config, source, state, limit)
    except WapError as e:
        o.fail(e)
    o.result({"files": rows}, lambda: out.print(rows_table("files", rows, FILE_COLUMNS)))


def retry(
    target: Annotated[str, typer.Argument(help="A file (as `wap files` shows it) or a run id.")],
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Put a blocked, failed, skipped or reverted file (or a run's files) back in line for the next ingest."""
    from wapflow.service.files import retry as retry_files

    o = Output(as_json)
    try:
        rows = retry_files(open_lakehouse(config, o).ledger, target)
    except WapError as e:
        o.fail(e)

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
    doc: dict[str, Any]
    try:
        lh = open_lakehouse(config, o)
        doc = skip_file(lh.ledger, lh.config, lh.storage, target, reason, source)
    except WapError as e:
        o.fail(e)
    o.result(doc, lambda: out.print(f"skipped {doc['uri']}: {doc['reason']}"))
