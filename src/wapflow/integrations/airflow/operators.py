"""Airflow operators for wapflow runs: what a platform team expects of a quality gate in a DAG.

- published (or nothing new to ingest): the task succeeds; XCom `return_value` is the run's summary (run id,
  status, report command, snapshots), and `run_id`, `status`, `report_command` are XComs of their own;
- blocked by its audit: the task fails at once, never retried (AirflowFailException); downstream tasks do not run;
- failed, and a retry may help (exit 5: commit conflict, throttling, a publish lock held too long): a retryable
  failure, so the task's own `retries` / `retry_delay` apply, and the retry resumes the same wapflow run;
- failed otherwise (bad input, a bad wap.toml, a bug): the task fails at once, never retried;
- held for review (the table's `review`): the task defers to ReviewTrigger, holding no worker slot while a person
  decides; approved: it succeeds (downstream runs); rejected, or the review timed out: it fails.

Each operator runs wapflow in the task's own process through the Python API, with one lakehouse (one Spark
session) per wap.toml and process. The wapflow run id is derived from the DAG run, the task and its map index,
so a retry after a transient failure resumes the same run and publishes it at most once; a try after a blocked
or rejected run gets a run id of its own.

OpenLineage (apache-airflow-providers-openlineage): each operator reports the files and tables it reads as
inputs and the Iceberg tables it writes as outputs (the warehouse's namespace, as wapflow's own events name
them), with the published snapshot (`version`) and each check's verdict (`dataQualityAssertions`); the run facet
`wapflow_run` names the wapflow run and the OpenLineage run id of wapflow's own events ([lineage] in wap.toml).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

import attr
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from openlineage.client.facet_v2 import RunFacet

from wapflow import api
from wapflow.errors import WapError
from wapflow.integrations import outcome as oc
from wapflow.integrations.airflow.triggers import ReviewTrigger, statuses
from wapflow.vocabulary import AWAITING_REVIEW, FINAL_STATUSES, PUBLISHED, parse_duration

if TYPE_CHECKING:
    from airflow.sdk import Context

    from wapflow.lakehouse.lakehouse import Lakehouse

_RUN_ID_CHARS = re.compile(r"[^a-z0-9_-]+")
_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?([+-]\d{2}:\d{2}|Z)?")


def _task_as_parent(context: Context) -> AbstractContextManager[None]:
    """wapflow's own OpenLineage events ([lineage] in wap.toml) name the Airflow task's run as their parent, as
    Airflow's OpenLineage provider names it (nothing without the provider)."""
    try:
        from airflow.providers.openlineage.conf import namespace
        from airflow.providers.openlineage.plugins.macros import lineage_run_id
    except ImportError:
        return nullcontext()
    from wapflow.pipeline.lineage import parent_run

    ti = context["ti"]
    return parent_run(namespace(), f"{ti.dag_id}.{ti.task_id}", lineage_run_id(ti))


class WapRunFailed(AirflowException):
    """A wapflow run that failed in a way a retry may clear (exit 5): Airflow retries the task."""


@attr.define
class WapflowRunFacet(RunFacet):
    """The wapflow run behind an Airflow task: its id, status, report command and the OpenLineage run id that
    wapflow's own events carry (so a lineage backend joins the two)."""

    runId: str  # OpenLineage's camelCase
    openlineageRunId: str
    status: str
    reportCommand: str

    @staticmethod
    def _get_schema() -> str:
        return "https://pypi.org/project/wapflow/#WapflowRunFacet"


class WapOperator(BaseOperator):
    """What every wapflow operator shares: the lakehouse, the run id, the outcome's mapping onto the task, the
    wait for a review, XCom and OpenLineage. Subclasses say what to run (`run_wap`) and what they read."""

    template_fields: Sequence[str] = ("config",)
    ui_color = "#dceefb"
    kind: ClassVar[str] = "run"

    def __init__(
        self,
        *,
        config: str | None = None,
        wait_for_review: bool = True,
        review_timeout: str | timedelta | None = None,
        review_poll_interval: float = 30.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.config = config
        self.wait_for_review = wait_for_review
        self.review_timeout = review_timeout
        self.review_poll_interval = review_poll_interval
        self._outcome: oc.Outcome | None = None

    # --- what a subclass defines -----------------------------------------------------------------------------

    def run_wap(self, lh: Lakehouse, run_id: str) -> oc.Outcome:  # pragma: no cover - every operator overrides it
        raise NotImplementedError

    def planned_tables(self) -> list[str]:
        """The tables it writes, known before it runs (OpenLineage's START event)."""
        return []

    def planned_inputs(self) -> list[tuple[str, str]]:
        """(namespace, name) of what it reads, known before it runs."""
        return []

    # --- the task ----------------------------------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        lh = oc.lakehouse(self.config, progress=self.log.info)
        try:
            with _task_as_parent(context):
                out = self.run_wap(lh, self._run_id(context, lh))
        except WapError as e:
            if e.retryable:
                raise WapRunFailed(f"wapflow: {e}") from None
            raise AirflowFailException(f"wapflow: {e}") from None
        return self._settle(context, lh, out)

    def _settle(self, context: Context, lh: Lakehouse, out: oc.Outcome) -> dict[str, Any]:
        self._outcome = out
        summary = out.summary()
        ti = context["ti"]
        ti.xcom_push(key="run_id", value=out.run_id)
        ti.xcom_push(key="status", value=out.status)
        ti.xcom_push(key="report_command", value=out.report_command())
        if out.published or out.status == "nothing new":
            self.log.info("wapflow: %s %s %s: %s", out.kind, out.run_id, out.status, out.message)
            return summary
        if out.awaiting_review:
            ti.xcom_push(key="summary", value=summary)
            if not self.wait_for_review:
                raise AirflowFailException(out.reason() + " (wait_for_review=False)")
            self._defer_review(lh, out)
        self.log.error("%s", out.reason())
        if out.retryable:
            raise WapRunFailed(out.reason())
        raise AirflowFailException(out.reason())

    def _run_id(self, context: Context, lh: Lakehouse) -> str:
        """`af_<dag>_<task>[_<map index>]_<dag run, its time compacted>_<hash of the dag run id>`: the same for
        every try, so a retry resumes the run; a try after a blocked, rejected or published run of it gets
        `-t<try>` (its own run)."""
        ti = context["ti"]
        dag_run = str(context["run_id"])
        parts = [self.dag_id, self.task_id, _TIME.sub(r"\1\2\3t\4\5\6", dag_run)]
        index = getattr(ti, "map_index", -1)
        if index is not None and index >= 0:
            parts.insert(2, str(index))
        digest = hashlib.sha256(f"{self.dag_id}/{self.task_id}/{index}/{dag_run}".encode()).hexdigest()[:6]
        base = _RUN_ID_CHARS.sub("_", "af_" + "_".join(parts).lower()).strip("_-")
        base = re.sub(r"_+", "_", base)[:100] + "_" + digest
        tried = int(getattr(ti, "try_number", 1) or 1)
        if tried > 1 and statuses(lh.store, [base])[base] in FINAL_STATUSES:
            return f"{base}-t{tried}"
        return base

    # --- a run held for review ------------------------------------------------------------------------------

    def _deadline(self, lh: Lakehouse, out: oc.Outcome) -> str | None:
        """When to stop waiting: the operator's review_timeout, else the table's when its on_review_timeout
        rejects (with "alert" a held run waits: wapflow alerts again, and the task stays deferred)."""
        from wapflow.service.review import held_since

        rec = lh.store.get(out.held[0]) or next(iter(lh.store.group(out.held[0])), None)
        if rec is None:
            return None
        seconds: float | None = None
        if self.review_timeout is not None:
            t = self.review_timeout
            seconds = t.total_seconds() if isinstance(t, timedelta) else parse_duration(str(t))
        else:
            cfg = lh.config.table(rec.table_name)
            if cfg.on_review_timeout == "reject":
                seconds = cfg.review_timeout_seconds()
        if seconds is None:
            return None
        return (held_since(rec) + timedelta(seconds=seconds)).isoformat()

    def _defer_review(self, lh: Lakehouse, out: oc.Outcome) -> None:
        self.log.warning(
            "wapflow: %s %s awaits review: wap approve %s --reason ... (or wap reject); waiting, no worker slot held",
            out.kind,
            out.run_id,
            out.held[0],
        )
        trigger = ReviewTrigger(
            out.held, oc.config_text(self.config), self.review_poll_interval, self._deadline(lh, out)
        )
        self.defer(trigger=trigger, method_name="review_decided")

    def review_decided(self, context: Context, event: Mapping[str, Any]) -> dict[str, Any]:
        """Resumed by the trigger: the runs were approved (published, or blocked by their second audit), rejected,
        or the wait timed out (a table whose on_review_timeout is "reject" has its run rejected as wapflow's
        timeout does)."""
        lh = oc.lakehouse(self.config, progress=self.log.info)
        held = list(event.get("statuses") or {})
        if event.get("timed_out"):
            from wapflow.outer.review import expire_reviews

            for doc in expire_reviews(lh, tables=sorted(set(self._tables_of(lh, held)))):
                self.log.warning("wapflow: %s", doc["message"])
        out = self._reread(context, lh, held)
        if event.get("timed_out") and out.awaiting_review:
            self._outcome = out
            raise AirflowFailException(f"{out.reason()}: the review timed out; the run still awaits a decision")
        return self._settle(context, lh, out)

    def _tables_of(self, lh: Lakehouse, run_ids: list[str]) -> list[str]:
        out = []
        for rid in run_ids:
            rec = lh.store.get(rid)
            out += [rec.table_name] if rec else [m.table_name for m in lh.store.group(rid)]
        return out

    def _reread(self, context: Context, lh: Lakehouse, run_ids: list[str]) -> oc.Outcome:
        """The outcome after the decision, read from the run store (no Spark)."""
        base = context["ti"].xcom_pull(task_ids=self.task_id, key="summary") or {}
        now = statuses(lh.store, run_ids)
        still = [r for r, s in now.items() if s == AWAITING_REVIEW]
        worst = next((s for s in ("failed", "rejected", "blocked", AWAITING_REVIEW) if s in now.values()), PUBLISHED)
        codes = {PUBLISHED: 0, "blocked": 1, "rejected": 1, "failed": 3, AWAITING_REVIEW: 6}
        out = oc.Outcome(
            kind=str(base.get("kind") or self.kind),
            run_id=str(base.get("run_id") or run_ids[0]),
            status=worst,
            exit_code=codes[worst],
            retryable=False,
            message=f"after review: {', '.join(f'{r} {s}' for r, s in now.items())}",
            config=oc.config_text(self.config),
            tables=list(base.get("tables") or []),
            run_ids=dict(base.get("run_ids") or {}),
            held=still,
        )
        for rid in run_ids:
            rec = lh.store.get(rid)
            for r in [rec] if rec else lh.store.group(rid):
                out.checks[r.table_name] = list(r.checks)
                out.snapshots[r.table_name] = r.snapshot_id if r.status == PUBLISHED else None
        return out

    # --- OpenLineage -----------------------------------------------------------------------------------------

    def _namespace(self) -> str:
        from wapflow.config import load_config
        from wapflow.pipeline.lineage import table_namespace

        return table_namespace(load_config(self.config))

    def get_openlineage_facets_on_start(self) -> Any:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import Dataset

        ns = self._namespace()
        return OperatorLineage(
            inputs=[Dataset(namespace=n, name=name) for n, name in self.planned_inputs()],
            outputs=[Dataset(namespace=ns, name=t) for t in self.planned_tables()],
        )

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self._lineage()

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return self._lineage()

    def _lineage(self) -> Any:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import Dataset
        from openlineage.client.facet_v2 import data_quality_assertions_dataset, dataset_version_dataset

        from wapflow.pipeline.lineage import assertions, file_dataset, run_uuid

        out = self._outcome
        if out is None:
            return self.get_openlineage_facets_on_start()
        ns = self._namespace()
        inputs = [Dataset(namespace=n, name=name) for n, name in (file_dataset(f) for f in out.files)]
        inputs += [Dataset(namespace=ns, name=t) for t in out.upstream]
        outputs = []
        for t in out.tables or self.planned_tables():
            facets: dict[str, Any] = {}
            if out.checks.get(t):
                facets["dataQualityAssertions"] = data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(
                    assertions=[data_quality_assertions_dataset.Assertion(**a) for a in assertions(out.checks[t])]
                )
            if out.snapshots.get(t) is not None:
                facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
                    datasetVersion=str(out.snapshots[t])
                )
            outputs.append(Dataset(namespace=ns, name=t, facets=facets))
        run_facets: dict[str, Any] = {}
        if out.run_id:
            run_facets["wapflow_run"] = WapflowRunFacet(
                runId=out.run_id, openlineageRunId=run_uuid(out.run_id), status=out.status,
                reportCommand=out.report_command(),
            )  # fmt: skip
        return OperatorLineage(inputs=inputs, outputs=outputs, run_facets=run_facets)


class WapRunOperator(WapOperator):
    """`wap run TABLE FILES...`: write, audit and publish files (paths, globs, s3:// URIs) into one table."""

    template_fields: Sequence[str] = ("config", "table", "files", "run_id_override")
    kind = "run"

    def __init__(
        self,
        *,
        table: str,
        files: Sequence[str] | str,
        branch: str | None = None,
        no_checks: bool = False,
        run_id_override: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.files = files
        self.branch = branch
        self.no_checks = no_checks
        self.run_id_override = run_id_override

    def _files(self) -> list[str]:
        return [self.files] if isinstance(self.files, str) else list(self.files)

    def run_wap(self, lh: Lakehouse, run_id: str) -> oc.Outcome:
        res = api.run(
            lh, self.table, self._files(), branch=self.branch, run_id=self.run_id_override or run_id,
            no_checks=self.no_checks,
        )  # fmt: skip
        return oc.from_run(res, oc.config_text(self.config))

    def planned_tables(self) -> list[str]:
        return [self.table]

    def planned_inputs(self) -> list[tuple[str, str]]:
        from wapflow.pipeline.lineage import file_dataset

        return [file_dataset(f) for f in self._files()]


class WapRunTablesOperator(WapOperator):
    """`wap run-tables T1=F1 T2=F2`: several tables audited together, published in one atomic commit or none."""

    template_fields: Sequence[str] = ("config", "tables")
    kind = "run-tables"

    def __init__(
        self, *, tables: Mapping[str, Sequence[str] | str], branch: str | None = None, no_checks: bool = False,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.tables = tables
        self.branch = branch
        self.no_checks = no_checks

    def _specs(self) -> list[tuple[str, list[str]]]:
        return [(t, [f] if isinstance(f, str) else list(f)) for t, f in self.tables.items()]

    def run_wap(self, lh: Lakehouse, run_id: str) -> oc.Outcome:
        res = api.run_tables(lh, self._specs(), branch=self.branch, run_id=run_id, no_checks=self.no_checks)
        return oc.from_group(res, oc.config_text(self.config))

    def planned_tables(self) -> list[str]:
        return list(self.tables)

    def planned_inputs(self) -> list[tuple[str, str]]:
        from wapflow.pipeline.lineage import file_dataset

        return [file_dataset(f) for _, files in self._specs() for f in files]


class WapModelsOperator(WapOperator):
    """`wap run-models [NAMES]`: wap.toml's [models.*] (those named and what is downstream), one commit or none."""

    template_fields: Sequence[str] = ("config", "models")
    kind = "models"

    def __init__(self, *, models: Sequence[str] | None = None, no_checks: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.models = list(models) if models else None
        self.no_checks = no_checks

    def run_wap(self, lh: Lakehouse, run_id: str) -> oc.Outcome:
        res = api.run_models(lh, self.models, run_id=run_id, no_checks=self.no_checks)
        cfg = lh.config
        upstream = sorted({i for r in res.tables if r.table in cfg.models for i in cfg.models[r.table].inputs()})
        return oc.from_group(res, oc.config_text(self.config), kind="models", upstream=upstream)

    def planned_tables(self) -> list[str]:
        from wapflow.config import load_config
        from wapflow.config.models import model_order

        return model_order(load_config(self.config).models, self.models)


class WapPipelineOperator(WapOperator):
    """`wap pipelines run`: an SDP project (spark-pipeline.yml) run unchanged, each dataset audited, all published
    in one commit or none."""

    template_fields: Sequence[str] = ("config", "spec")
    kind = "pipeline"

    def __init__(
        self, *, spec: str | None = None, refresh: Sequence[str] | None = None,
        full_refresh: Sequence[str] | None = None, full_refresh_all: bool = False, no_checks: bool = False,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.spec = spec
        self.refresh = list(refresh or [])
        self.full_refresh = list(full_refresh or [])
        self.full_refresh_all = full_refresh_all
        self.no_checks = no_checks

    def run_wap(self, lh: Lakehouse, run_id: str) -> oc.Outcome:
        res = oc.run_pipeline(
            lh,
            self.spec,
            run_id=run_id,
            refresh=self.refresh,
            full_refresh=self.full_refresh,
            full_refresh_all=self.full_refresh_all,
            no_checks=self.no_checks,
        )
        return oc.from_group(res, oc.config_text(self.config), kind="pipeline")


class WapIngestOperator(WapOperator):
    """`wap ingest SOURCE`: what landed in a [sources.NAME] location, each new file published exactly once (the
    ledger decides what is new, so the task needs no run id of its own)."""

    template_fields: Sequence[str] = ("config", "source")
    kind = "ingest"

    def __init__(self, *, source: str, no_checks: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.no_checks = no_checks

    def run_wap(self, lh: Lakehouse, run_id: str) -> oc.Outcome:
        return oc.from_ingest(api.ingest(lh, self.source, no_checks=self.no_checks), oc.config_text(self.config))

    def _run_id(self, context: Context, lh: Lakehouse) -> str:
        return ""

    def planned_tables(self) -> list[str]:
        from wapflow.config import load_config

        src = load_config(self.config).sources.get(self.source)
        return [src.table] if src else []

    def planned_inputs(self) -> list[tuple[str, str]]:
        from wapflow.config import load_config
        from wapflow.pipeline.lineage import file_dataset

        src = load_config(self.config).sources.get(self.source)
        return [file_dataset(src.location)] if src else []
