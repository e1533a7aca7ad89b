"""wapflow from Python: the functions the `wap` command itself calls, for scripts and orchestrators.

    import wapflow
    from wapflow import checks as C

    lh = wapflow.connect("wap.toml")                     # or connect(warehouse="lake", master="local[2]")
    res = wapflow.run(lh, "nyc.trips", ["landing/a.parquet"], checks=[C.not_null("passenger_count")])
    res.status, res.snapshot_id, res.report              # "published" | "blocked" | "failed" | "awaiting_review"
    wapflow.diff(lh, res.run_id)                         # what publishing a held run would change on main
    wapflow.approve(lh, res.run_id, reason="checked")    # a run its table's `review` held (or wapflow.reject)

    state = wapflow.start("nyc.trips", ["landing/a.parquet"])   # or step by step, one task per step:
    for step in wapflow.steps.ALL:                       # prepare, write, audit, publish
        state = step(lh, state)                          # a RunState: JSON with state.to_json()
    res = wapflow.result(lh, state)

Nothing here starts a JVM until a step needs Spark. A run's outcome is data (`RunResult.status`); these
functions raise only the WapError family (`error.retryable` says whether trying again can help), for
what stops before a run exists: a bad configuration, an unknown source.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from wapflow.config import LakehouseConfig, SourceConfig, TableConfig, WapConfig, load_config
from wapflow.errors import ConfigError, WapError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from wapflow.audit.spec import Check
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.lakehouse.progress import Meter
    from wapflow.outer.ingest import IngestResult
    from wapflow.pipeline.result import MultiRunResult, RunResult
    from wapflow.pipeline.state import RunState
    from wapflow.pipeline.transaction import Transaction
    from wapflow.sdp.run import DryRun
    from wapflow.service.diff import DiffDoc
    from wapflow.service.metrics import MetricRowDoc
    from wapflow.service.runs import GroupReport, RunReport


def connect(
    config: str | os.PathLike[str] | WapConfig | None = None,
    *,
    tables: dict[str, dict[str, Any]] | None = None,
    sources: dict[str, dict[str, Any]] | None = None,
    progress: Callable[[str], None] | None = None,
    spark: SparkSession | None = None,
    meter: Meter | None = None,
    **lakehouse: Any,
) -> Lakehouse:
    """A lakehouse from wap.toml (a path; None: `$WAP_CONFIG`, else ./wap.toml, else defaults) or a
    WapConfig, with [lakehouse] keys, tables and sources given here taking precedence.

    `progress` receives wapflow's progress lines (default: silent); `spark` reuses a running session;
    `meter` (wapflow.lakehouse.progress.Meter) is shown the Spark jobs of writes and audits that take a while.
    """
    from wapflow.lakehouse.lakehouse import Lakehouse

    cfg = config.model_copy(deep=True) if isinstance(config, WapConfig) else load_config(config)
    try:
        if lakehouse:
            cfg.lakehouse = LakehouseConfig.model_validate(cfg.lakehouse.model_dump() | lakehouse)
        for name, table in (tables or {}).items():
            cfg.tables[name] = TableConfig.model_validate(table)
        for name, src in (sources or {}).items():
            cfg.sources[name] = SourceConfig.model_validate(src)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())
        raise ConfigError(f"connect(): {problems}", hint="see docs/guides/configuration.md") from None
    return Lakehouse(cfg, spark=spark, progress=progress, meter=meter)


def start(
    table: str,
    files: Sequence[str | os.PathLike[str]] | None = None,
    *,
    checks: Sequence[Check] = (),
    branch: str | None = None,
    run_id: str | None = None,
    sources: Sequence[str | os.PathLike[str]] | None = None,
    no_checks: bool = False,
    again: bool = False,
) -> RunState:
    """A run nothing has happened to yet: files (paths, globs, s3:// URIs) into `table`, audited with the
    table's checks from wap.toml plus `checks`. A `run_id` given again resumes (or finds published) that run.
    A table with no checks at all publishes only with `checks = []` in its section or `no_checks=True` (`wap run
    --no-checks`); else its run fails with a ConfigError before anything is written.
    A file the table published already (the same path, size and version) is refused (UsageError, exit 2, naming
    the run that published it) unless `again=True` (`wap run --again`); a resumed run id is never refused.
    `sources=` is the deprecated name of `files=` (a [sources.NAME] is a configured landing place)."""
    from wapflow.deprecation import renamed
    from wapflow.pipeline.state import new_state

    named = renamed(files, sources, old_name="sources", new_name="files", where="wapflow.start()")
    if named is None:
        raise TypeError("wapflow.start(): files= is required (the paths, globs or URIs to ingest)")
    return new_state(
        table,
        [str(f) for f in named],
        branch=branch,
        run_id=run_id,
        extra_checks=list(checks),
        no_checks=no_checks,
        once=not again,
    )


def run(
    lh: Lakehouse,
    table: str,
    files: Sequence[str | os.PathLike[str]] | None = None,
    *,
    checks: Sequence[Check] = (),
    branch: str | None = None,
    run_id: str | None = None,
    sources: Sequence[str | os.PathLike[str]] | None = None,
    no_checks: bool = False,
    again: bool = False,
) -> RunResult:
    """Write, audit and publish in one call; the result says which (never raises for a blocked or failed run).
    `no_checks=True`: a table with no checks publishes without (as `checks = []` in its section would allow).
    `again=True`: publish files this table published already (else refused, exit 2: see start).
    A blocked or terminally failed run, or one held for review, is alerted to the [alerts] sinks after its outcome
    is recorded (a sink that is down never changes the result)."""
    from wapflow.alerts import alert_run
    from wapflow.deprecation import renamed
    from wapflow.pipeline.driver import drive

    named = renamed(files, sources, old_name="sources", new_name="files", where="wapflow.run()")
    if run_id is None and named:
        run_id = _interrupted_run(lh, table, named)
    state = start(table, named, checks=checks, branch=branch, run_id=run_id, no_checks=no_checks, again=again)
    res = result(lh, drive(lh, state))
    alert_run(lh, res)
    if res.status == "awaiting_review":  # a person is asked to decide, with what publishing would change
        from wapflow.outer.review import alert_held

        alert_held(lh, res.run_id)
    return res


def _place(
    lh: Lakehouse, table: str, files: Sequence[str | os.PathLike[str]]
) -> tuple[list[str], list[dict[str, Any]]] | None:
    """A table's names (as given, and dotted) and the identities of its files, listed once more (a stat each, an
    S3 listing) to find an interrupted run of them; None when the listing fails (prepare's to report)."""
    from wapflow.files.resolve import resolve_files
    from wapflow.sql.identifiers import TableName

    try:
        found = resolve_files([str(f) for f in files], storage=lh.storage)
        return sorted({table, TableName.parse(table).dotted}), [f.to_dict() for f in found]
    except WapError:
        return None


def _interrupted_run(lh: Lakehouse, table: str, files: Sequence[str | os.PathLike[str]]) -> str | None:
    """The run id of an interrupted run (stopped or killed, its process gone) of this table over exactly these
    files: `wap run` of the same command resumes it, so no new run id and no kept branch to discard by hand."""
    place = _place(lh, table, files)
    rec = lh.store.interrupted_with(*place) if place is not None else None
    if rec is None:
        return None
    lh.progress(f"resuming run {rec.run_id}: the same files, interrupted at {rec.started_at:%Y-%m-%d %H:%M:%S}")
    return rec.run_id


def _interrupted_group(lh: Lakehouse, specs: Sequence[tuple[str, Sequence[str]]], branch: str | None) -> str | None:
    """The id of an interrupted multi-table run of these tables, in this order, each over exactly these files
    (RunStore.interrupted_group): the same `wap run-tables` resumes it, as `wap run` does."""
    places = [_place(lh, table, files) for table, files in specs]
    if any(p is None for p in places):
        return None
    recs = lh.store.interrupted_group([p for p in places if p is not None], branch)
    if not recs:
        return None
    first = min(recs, key=lambda r: r.started_at)
    lh.progress(
        f"resuming run {first.group_id}: the same tables and files, interrupted at {first.started_at:%Y-%m-%d %H:%M:%S}"
    )
    return first.group_id


def run_tables(
    lh: Lakehouse,
    tables: Sequence[tuple[str, Sequence[str | os.PathLike[str]]]],
    *,
    branch: str | None = None,
    run_id: str | None = None,
    no_checks: bool = False,
    again: bool = False,
) -> MultiRunResult:
    """Several tables in one run: each written to its sandbox and audited (checks across them included), then
    every table published in one atomic commit, or none (`wap run-tables`). Refused (ConfigError, exit 2) before
    anything is written on a catalog that cannot commit several tables at once. A file a table published already
    (the same path, size and version) fails the run before anything is written (exit 2, naming the run that
    published it) unless `again=True` (`--again`), as in `run`. A blocked or failed group is
    alerted once per table whose own checks or step failed (not for the tables it held back)."""
    from wapflow.pipeline.driver import drive
    from wapflow.pipeline.group import group_result, tables_group

    specs = [(t, [str(f) for f in files]) for t, files in tables]
    if run_id is None:
        run_id = _interrupted_group(lh, specs, branch)
    group = tables_group(lh, specs, branch=branch, run_id=run_id, no_checks=no_checks, once=not again)
    res = group_result(lh, drive(lh, group))
    _alert_group(lh, res)
    return res


def _alert_group(lh: Lakehouse, res: MultiRunResult) -> None:
    """A multi-table run's alerts: each table whose own checks or step failed; one review request for a held run."""
    from wapflow.alerts import alert_run

    for r in res.tables:
        if r.status in ("blocked", "failed") and not r.message.startswith("not published"):
            alert_run(lh, r)
    if res.status == "awaiting_review":
        from wapflow.outer.review import alert_held

        alert_held(lh, res.run_id)


def run_models(
    lh: Lakehouse, names: Sequence[str] | None = None, *, run_id: str | None = None, no_checks: bool = False
) -> MultiRunResult:
    """Run wap.toml's [models.*] (those named and everything downstream of them; all when None), upstream first,
    in one transaction: each model's output audited, all published in one commit or none (`wap run-models`).
    A blocked or failed model is alerted as a table run is."""
    from wapflow.pipeline.models import run_models as _run_models

    res = _run_models(lh, list(names) if names else None, run_id=run_id, no_checks=no_checks)
    _alert_group(lh, res)
    return res


def run_pipeline(
    lh: Lakehouse,
    spec: str | os.PathLike[str] | None = None,
    *,
    refresh: Sequence[str] = (),
    full_refresh: Sequence[str] = (),
    full_refresh_all: bool = False,
    dry: bool = False,
    run_id: str | None = None,
    no_checks: bool = False,
) -> MultiRunResult | DryRun:
    """Run a Spark Declarative Pipelines project (its spark-pipeline.yml, or the one found from the working
    folder) unchanged, every dataset written on one branch, audited, and all published in one commit or none
    (`wap pipelines run`). `dry`: the engine checks the graph, nothing is written (`wap pipelines dry-run`)."""
    from wapflow.sdp.run import DryRun
    from wapflow.sdp.run import run_pipeline as _run_pipeline

    res = _run_pipeline(
        lh,
        None if spec is None else Path(spec),
        refresh=refresh,
        full_refresh=full_refresh,
        full_refresh_all=full_refresh_all,
        dry=dry,
        run_id=run_id,
        no_checks=no_checks,
    )
    if not isinstance(res, DryRun):
        _alert_group(lh, res)
    return res


def write(
    lh: Lakehouse,
    table: str,
    df: DataFrame,
    *,
    mode: str | None = None,
    key: Sequence[str] | None = None,
    delete_when: str | None = None,
    order_by: Sequence[str] | None = None,
    replace_where: str | None = None,
    checks: Sequence[Check] = (),
    branch: str | None = None,
    run_id: str | None = None,
    no_checks: bool = False,
) -> RunResult:
    """Write a DataFrame to `table` with the same WAP as a file run: to a branch, audited with the table's checks
    (and `checks`), published only if they pass (quarantine, review, alerts, lineage, run store alike). `mode` and
    its keys override the table's section for this run. A re-run with the same `run_id` never publishes twice."""
    from wapflow.alerts import alert_run
    from wapflow.config import write_settings
    from wapflow.pipeline import frames
    from wapflow.pipeline.driver import drive
    from wapflow.pipeline.state import new_state

    settings = write_settings(mode, key, delete_when, order_by, replace_where)
    state = new_state(
        table,
        [],
        branch=branch,
        run_id=run_id,
        extra_checks=list(checks),
        no_checks=no_checks,
        frame=True,
        write_settings=settings,
    )
    frames.hold(state.run_id, df)
    try:
        res = result(lh, drive(lh, state))
    finally:
        frames.release(state.run_id)
    alert_run(lh, res)
    if res.status == "awaiting_review":
        from wapflow.outer.review import alert_held

        alert_held(lh, res.run_id)
    return res


@contextlib.contextmanager
def transaction(
    lh: Lakehouse, *, name: str | None = None, run_id: str | None = None, no_checks: bool = False
) -> Iterator[Transaction]:
    """A block whose `tx.write(table, df)` calls are audited together when it ends and published in one atomic
    commit, or none (`tx.result` says which); `tx.read(table)` and `tx.sql(query)` (read-only) see the tables it
    wrote as staged, others at main. An exception in the block publishes nothing, records the run as failed, and
    propagates. `name` prefixes the run id; the same `run_id` again (after a crash, say) resumes the run and
    publishes it once, or reports it published. Needs a catalog that commits several tables at once."""
    from wapflow.pipeline.opengroup import OpenGroup
    from wapflow.pipeline.state import new_run_id
    from wapflow.pipeline.transaction import Transaction
    from wapflow.sql.identifiers import validate_part

    rid = run_id or (f"{validate_part(name, what='transaction name')}_{new_run_id()}" if name else new_run_id())
    tx = Transaction(OpenGroup(lh, run_id=rid, no_checks=no_checks))
    try:
        yield tx
    except BaseException as e:
        _alert_group(lh, tx.abandon(e))
        raise
    _alert_group(lh, tx.finish())


def result(lh: Lakehouse, state: RunState) -> RunResult:
    """What a run in this state amounts to: status, snapshot, checks, error, timings, message."""
    from wapflow.pipeline.steps.record import result as _result

    return _result(lh, state)


def report(lh: Lakehouse, run_id: str) -> RunReport | GroupReport:
    """A recorded run as `wap report` shows it: status, checks (observed, threshold, samples, SQL), error,
    timings, the command that resumes it; for a run over several tables (its group id), the whole run with
    each table's report. No Spark. NotFound if the run store has no such run."""
    from wapflow.service.runs import group_report, run_report

    group = group_report(lh.store, run_id)
    return group if group is not None else run_report(lh.store, run_id)


def metrics(
    lh: Lakehouse,
    table: str,
    *,
    column: str | None = None,
    metric: str | None = None,
    limit: int = 20,
    backfill: bool = False,
) -> list[MetricRowDoc]:
    """A table's metric history as `wap metrics` shows it: each of its last `limit` audited runs' row count,
    null fractions, min, max... with the run's time and status, newest run first. No Spark. `backfill` first
    gives the appends on main with no recorded metrics (another writer's, an older wapflow's) their row count
    from the snapshots and each column's null_fraction, min and max (numeric columns) from the column metrics
    of the files they added (`--backfill`: metadata only, no JVM where the catalog is read directly and
    PyIceberg is installed); what a run recorded itself is kept, and doing it again records nothing."""
    from wapflow.service.metrics import backfill_metrics, metric_rows

    if backfill:
        backfill_metrics(lh, table)
    return metric_rows(lh.store, table, column=column, metric=metric, limit=limit)


def diff(lh: Lakehouse, run_or_branch: str) -> DiffDoc:
    """What publishing a run not on main yet (blocked, awaiting review, failed after its write; or the run that
    left a kept branch) would change there, as `wap diff` shows it: rows added (updated, deleted, replaced by a
    merge or replace), and per column main beside the batch (null fraction, min, max; mean where recorded).
    Metadata and the run store only, no data scan. A published run says so (`published`, its snapshot).
    Raises NotFound (no such run or branch), UsageError (a run whose branch is gone)."""
    from wapflow.service.diff import diff as _diff

    return _diff(lh, run_or_branch)


def group_diff(lh: Lakehouse, group_id: str) -> list[DiffDoc]:
    """`diff` of every table of a multi-table run, in the order the run named them; [] when `group_id` names no
    multi-table run (then `diff` answers for a run or branch of one table)."""
    from wapflow.service.diff import diff as _diff

    if lh.store.get(group_id) is not None:
        return []
    return [_diff(lh, r.run_id) for r in lh.store.group(group_id)]


def approve(lh: Lakehouse, run_id: str, *, reason: str, by: str | None = None) -> RunResult | MultiRunResult:
    """Publish a run awaiting review (its table's `review` held it), or a blocked run whose failed checks are all
    history-based (anomaly, volume: they then warn, naming who and why): audited again against main as it is now,
    then published, or blocked if it no longer passes its error checks (the result says which). A multi-table
    run's id approves every table of it: a MultiRunResult, all published in one commit or none. `by`: who
    approves (default: the OS user); `reason` is required. Raises UsageError (a blank reason, a run not
    awaiting review), NotFound (no such run), AlreadyDecided (another approve or reject decided it first)."""
    from wapflow.service.review import approve as _approve

    return _approve(lh, run_id, reason=reason, by=by)


def reject(lh: Lakehouse, run_id: str, *, reason: str, by: str | None = None) -> dict[str, Any]:
    """Drop a run awaiting review: its branch goes, its ledger files are `rejected`, main is unchanged. The
    same errors as approve()."""
    from wapflow.service.review import reject as _reject

    return _reject(lh, run_id, reason=reason, by=by)


def read(lh: Lakehouse, table: str, *, branch: str | None = None) -> DataFrame:
    """A table's rows on main (or on a branch) as a Spark DataFrame."""
    from wapflow.sql.identifiers import TableName

    return lh.tables.read(TableName.parse(table), branch)


def ingest(lh: Lakehouse, source: str, *, no_checks: bool = False) -> IngestResult:
    """One pass over a [sources.NAME] location: new files published in batches, each exactly once. Its table
    needs checks, or `checks = []` in its section, or `no_checks=True`; else a ConfigError before any file."""
    from wapflow.outer.ingest import ingest as _ingest

    return _ingest(lh, source, no_checks=no_checks)


def backfill(
    lh: Lakehouse,
    source: str,
    *,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
    dry_run: bool = False,
    no_checks: bool = False,
) -> IngestResult:
    """A source's files whose own time is in [since, until) (datetimes, or ISO dates/times: UTC unless an
    offset is given), oldest first, through the same ledger as `ingest`; `dry_run` plans and records nothing.
    `no_checks` as for ingest()."""
    from wapflow.outer.ingest import backfill as _backfill
    from wapflow.outer.ingest import parse_when

    return _backfill(
        lh,
        source,
        since=parse_when(since, "since"),
        until=parse_when(until, "until"),
        dry_run=dry_run,
        no_checks=no_checks,
    )


def config_path(path: str | os.PathLike[str] | None) -> Path | None:
    """The wap.toml `connect(path)` would read (None: built-in defaults)."""
    from wapflow.config import find_config_path

    return find_config_path(path)
