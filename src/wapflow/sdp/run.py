"""`wap pipelines run` / `dry-run`: one run of a Spark Declarative Pipelines project, audited and published
all or nothing.

1. The spec is read and the run chosen: a new run id, or the one an interrupted run of this spec left (a
   marker in the state dir, removed when the run ends), so a rerun after a crash goes on on the same branch.
2. SDP runs the project in a Connect session of its own (wapflow.sdp.engine) whose writes go to the run's
   branch (`spark.wap.branch`, and `write.wap.enabled` on every table it creates or writes), with each commit
   naming the run (PIPELINE_RUN_PROP). Downstream datasets read their upstream as staged.
3. No main moved: checked, table by table, against main's heads before the run.
4. Every table that has the run's branch is one member of one group (OpenGroup.add_written), audited and
   published by the one publish: in one commit, or none. A project that does not run (a SQL error, a missing
   upstream, a cycle) publishes nothing, drops the branch and exits 2 with the engine's message.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from wapflow.config import Check
from wapflow.errors import UsageError, WapError
from wapflow.faults import crash_point
from wapflow.lakehouse.model import (
    PIPELINE_RUN_PROP,
    SNAPSHOT_PROPERTY_CONF,
    TABLE_DEFAULT_PREFIX,
    WAP_ENABLED_PROP,
)
from wapflow.pipeline.opengroup import OpenGroup
from wapflow.pipeline.state import new_run_id
from wapflow.pipeline.steps.context import CHECKS
from wapflow.sdp import engine, project
from wapflow.sql.identifiers import TableName
from wapflow.vocabulary import ENGINE_SDP, run_branch

if TYPE_CHECKING:
    from wapflow.lakehouse.lakehouse import Lakehouse
    from wapflow.pipeline.result import MultiRunResult


@dataclass
class DryRun:
    """`wap pipelines dry-run`: the graph checked by the engine, nothing written."""

    spec: str
    datasets: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "datasets": self.datasets, "exit_code": self.exit_code}


def run_pipeline(
    lh: Lakehouse,
    spec: str | Path | None = None,
    *,
    refresh: Sequence[str] = (),
    full_refresh: Sequence[str] = (),
    full_refresh_all: bool = False,
    dry: bool = False,
    run_id: str | None = None,
    no_checks: bool = False,
) -> MultiRunResult | DryRun:
    """Run the project whose spec is `spec` (or found from the working folder); see the module's doc."""
    if full_refresh_all and (full_refresh or refresh):
        raise UsageError(
            "--full-refresh-all refreshes every dataset: it does not go with --refresh or --full-refresh",
            hint="give --full-refresh-all alone, or name the datasets",
        )
    path = project.find_spec(spec)
    engine.require_client()
    proj = project.load(path)
    if proj.catalog is not None and proj.catalog != lh.catalog:
        raise UsageError(
            f"{proj.spec_path} names catalog {proj.catalog!r}; this lakehouse's catalog is {lh.catalog!r}",
            hint=f"set catalog: {lh.catalog} in the spec, or leave it out ([lakehouse] in wap.toml picks it)",
        )
    database = proj.database or "default"
    namespace = TableName.parse(f"{database}.x")
    tables = lh.tables
    tables.ensure_namespace(namespace)
    marker = _Marker(lh, proj)
    rid = run_id or (None if dry else marker.interrupted()) or new_run_id()
    if not dry:
        lh.progress(f"pipeline {proj.name}: run {rid}")
        marker.write(rid)
    branch = run_branch(rid)
    heads = _main_heads(lh, namespace)
    confs = {
        "spark.sql.connect.serverStacktrace.enabled": "false",
        **proj.configuration,
        "spark.wap.branch": branch,
        f"spark.sql.catalog.{lh.catalog}.{TABLE_DEFAULT_PREFIX}{WAP_ENABLED_PROP}": "true",
        f"{SNAPSHOT_PROPERTY_CONF}{PIPELINE_RUN_PROP}": rid,
    }
    cs = engine.session(lh, confs)
    try:
        _define_and_run(lh, cs, proj, database, confs, refresh, full_refresh, full_refresh_all, dry, heads, namespace)
    except WapError as e:
        if dry:
            raise
        _discard(lh, branch, namespace, proj, database)
        marker.clear()
        raise e.at(run_id=rid, step="write") from None
    finally:
        engine.close(cs)
    if dry:
        return DryRun(str(proj.spec_path), [_dataset_doc(d, database) for d in proj.datasets.values()])
    crash_point("pipeline:ran")
    _main_unchanged(lh, heads, _tables(lh, namespace, proj, database), rid)
    written = _written(lh, branch, namespace, proj, database)
    group = OpenGroup(lh, run_id=rid, no_checks=no_checks)
    try:
        for t in written:
            ds = _declared(proj, t, database)
            checks = _checks(ds) if ds is not None else []
            group.add_written(t.dotted, base=heads.get(t.dotted), engine=ENGINE_SDP, checks=checks)
    except WapError:
        assert group.outcome is not None  # the member's prepare or write failed: recorded, nothing published
        marker.clear()
        return group.outcome
    res = group.finish()
    marker.clear()
    return res


def _define_and_run(
    lh: Lakehouse,
    cs: Any,
    proj: project.Project,
    database: str,
    confs: dict[str, str],
    refresh: Sequence[str],
    full_refresh: Sequence[str],
    full_refresh_all: bool,
    dry: bool,
    heads: dict[str, int | None],
    namespace: TableName,
) -> None:
    from pyspark.pipelines.cli import register_definitions
    from pyspark.pipelines.spark_connect_graph_element_registry import SparkConnectGraphElementRegistry
    from pyspark.pipelines.spark_connect_pipeline import create_dataflow_graph, start_run

    try:
        gid = create_dataflow_graph(cs, default_catalog=lh.catalog, default_database=database, sql_conf=confs)
        registry = project.recording(SparkConnectGraphElementRegistry(cs, gid), proj)
        with engine.as_active(engine.endpoint(lh)), _said(lh):
            register_definitions(proj.spec_path, registry, proj.spec, cs, gid)
    except WapError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's files: said as what is wrong, where
        raise _project_error(proj, e) from None
    if not dry:
        _refuse_streaming(proj, database)
        _enable_wap(lh, proj, database)
    failures: list[str] = []
    try:
        events = start_run(
            cs,
            gid,
            full_refresh=list(full_refresh),
            full_refresh_all=full_refresh_all,
            refresh=list(refresh),
            dry=dry,
            storage=proj.storage,
        )
        for result in events:
            if "pipeline_event_result" in result:
                message = str(result["pipeline_event_result"].event.message)
                lines = [ln for ln in message.splitlines() if ln.strip()]
                lh.progress(" ".join(lines[:2]))  # the rest is the query plan: in Spark's log
                if _FLOW_FAILED.search(lines[0] if lines else ""):
                    failures.append(" ".join(lines[:2]))
    except Exception as e:  # noqa: BLE001 - the engine refused the graph or a flow failed: nothing is published
        raise _project_error(proj, e, failures) from None


@contextlib.contextmanager
def _said(lh: Lakehouse) -> Iterator[None]:
    """pyspark's registration prints its steps on stdout: they go to the run's progress lines instead."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            yield
    finally:
        for line in buf.getvalue().splitlines():
            if line.strip():
                lh.progress(line.split(": ", 1)[-1])


_FLOW_FAILED = re.compile(r"^Failed to resolve flow|^Flow .* has FAILED|^Failed to analyze flow")
_FLOW_NAME = re.compile(r"flow:? '?`?([\w.`]+?)'?`?[.:]?(?:\s|$)", re.IGNORECASE)


def _project_error(proj: project.Project, e: BaseException, failures: Sequence[str] = ()) -> UsageError:
    """One clear error for a project that does not run: the engine's own reason (the first flow that failed,
    where it is declared), not its summary; a Python file's error at its line."""
    import traceback

    text = project._one_line(str(e)) or type(e).__name__
    where = ""
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        if frame.filename.startswith(str(proj.root)):
            where = f"{frame.filename}:{frame.lineno}: "
            break
    if failures:
        text = failures[0].replace(" Error: ", " ").replace(".: ", ": ")
        m = _FLOW_NAME.search(failures[0])
        if m:
            flow = m.group(1).replace("`", "").split(".")[-1]
            ds = next((d for d in proj.datasets.values() if d.name.split(".")[-1] == flow), None)
            if ds is not None:
                where = f"{ds.where}: "
    return UsageError(
        f"pipeline {proj.name} ({proj.spec_path}) does not run: {where}{text}",
        hint="nothing was published; fix the project (`wap pipelines dry-run` checks it) and run it again",
    )


def _main_heads(lh: Lakehouse, namespace: TableName) -> dict[str, int | None]:
    tables = lh.tables
    out: dict[str, int | None] = {}
    for t in tables.list_tables():
        if t.namespace == namespace.namespace:
            tables.refresh(t)
            out[t.dotted] = tables.head(t, "main")
    return out


def _declared(proj: project.Project, t: TableName, database: str) -> project.Dataset | None:
    for ds in proj.datasets.values():
        if TableName.parse(".".join(_parts(ds.name, database))).dotted == t.dotted:
            return ds
    return None


def _parts(name: str, database: str) -> list[str]:
    parts = name.split(".")
    if len(parts) > 2:
        parts = parts[1:]
    return parts if len(parts) > 1 else [database, parts[0]]


def _refuse_streaming(proj: project.Project, database: str) -> None:
    """Iceberg 1.11's streaming sink commits to main whatever `spark.wap.branch` says (tried: a `writeStream` of
    a WAP-enabled table lands on main): a streaming table's rows would reach readers unaudited. Refused before
    anything runs, until the sink writes branches."""
    streaming = [d for d in proj.datasets.values() if d.kind == "streaming_table"]
    if streaming:
        names = ", ".join(f"{'.'.join(_parts(d.name, database))} ({d.where})" for d in streaming)
        raise UsageError(
            f"pipeline {proj.name} has streaming table(s) {names}: Iceberg's streaming sink writes them on main, "
            "not on the run's branch, so their rows cannot be audited before readers see them",
            hint="nothing ran; write a stream with wapflow.stream_to (each micro-batch audited), or make the "
            "dataset a materialized view; `wap pipelines dry-run` still checks the whole graph",
        )


def _enable_wap(lh: Lakehouse, proj: project.Project, database: str) -> None:
    """A dataset's table that exists without write.wap.enabled (made by a plain `spark-pipelines run`) gets it:
    Iceberg writes a table's `spark.wap.branch` writes to main otherwise."""
    tables = lh.tables
    for ds in proj.datasets.values():
        t = TableName.parse(".".join(_parts(ds.name, database)))
        if tables.exists(t):
            lh.spark.sql(f"ALTER TABLE {tables.ident(t)} SET TBLPROPERTIES ('{WAP_ENABLED_PROP}' = 'true')")


def _written(lh: Lakehouse, branch: str, namespace: TableName, proj: project.Project, database: str) -> list[TableName]:
    """Every table that has the run's branch: the datasets this run wrote, in name order."""
    return [t for t in _tables(lh, namespace, proj, database) if lh.tables.head(t, branch) is not None]


def _tables(lh: Lakehouse, namespace: TableName, proj: project.Project, database: str) -> list[TableName]:
    """The tables a run may have written: the spec's namespace's and every declared dataset's, in name order."""
    tables = lh.tables
    names = {t.dotted: t for t in tables.list_tables() if t.namespace == namespace.namespace}
    for ds in proj.datasets.values():
        t = TableName.parse(".".join(_parts(ds.name, database)))
        names.setdefault(t.dotted, t)
    out = []
    for dotted in sorted(names):
        t = names[dotted]
        if tables.exists(t):
            tables.refresh(t)
            out.append(t)
    return out


def _main_unchanged(lh: Lakehouse, heads: dict[str, int | None], candidates: list[TableName], rid: str) -> None:
    """Never on main first: a main that holds this run's commit is a table Iceberg did not write on the branch."""
    tables = lh.tables
    for t in candidates:
        head = tables.head(t, "main")
        if head is None or head == heads.get(t.dotted):
            continue
        snap = tables.snapshots(t).get(head)
        if snap is not None and snap.summary.get(PIPELINE_RUN_PROP) == rid:
            raise UsageError(
                f"the pipeline wrote {t} on main, not on branch {run_branch(rid)}",
                hint=f"set {WAP_ENABLED_PROP}=true on {t} (its table properties) and run the pipeline again",
            )


def _discard(lh: Lakehouse, branch: str, namespace: TableName, proj: project.Project, database: str) -> None:
    written = _written(lh, branch, namespace, proj, database)
    if written:
        lh.iceberg.discard(branch, written)


def _checks(ds: project.Dataset) -> list[Check]:
    out = []
    for fields in ds.checks:
        try:
            out.append(CHECKS.validate_python(fields))
        except ValidationError as e:
            first = e.errors()[0]
            raise UsageError(
                f"{ds.where}: check {fields!r} on {ds.name}: {first['msg']}",
                hint="write it as wap.toml writes a check, e.g. wapflow.expect('positive', 'amount > 0')",
            ) from None
    return out


def _dataset_doc(ds: project.Dataset, database: str) -> dict[str, Any]:
    return {
        "dataset": ".".join(_parts(ds.name, database)),
        "kind": ds.kind,
        "declared_at": ds.where,
        "checks_in_code": len(ds.checks),
    }


class _Marker:
    """The run an interrupted `wap pipelines run` of this spec left: the next run of it goes on with it."""

    def __init__(self, lh: Lakehouse, proj: project.Project) -> None:
        key = hashlib.sha256(str(proj.spec_path.resolve()).encode()).hexdigest()[:16]
        self.lh = lh
        self.path = lh.config.state_dir() / "pipelines" / f"{proj.name}-{key}.json"

    def interrupted(self) -> str | None:
        if not self.path.is_file():
            return None
        try:
            rid = str(json.loads(self.path.read_text())["run_id"])
        except (ValueError, KeyError, OSError):
            return None
        rec = self.lh.store.get(f"{rid}-1")
        if rec is not None and rec.status == "published":
            self.clear()  # it published before it could say so: a new run
            return None
        self.lh.progress(f"resuming interrupted pipeline run {rid}")
        return rid

    def write(self, rid: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"run_id": rid}))
        tmp.replace(self.path)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
