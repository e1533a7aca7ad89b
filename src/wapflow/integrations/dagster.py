"""wapflow in Dagster (`pip install 'wapflow[dagster]'`): a resource, assets built from wap.toml whose declared
checks are blocking asset checks, and a Component for YAML.

    import dagster as dg
    from wapflow.integrations.dagster import WapflowResource, wap_assets

    defs = dg.Definitions(assets=wap_assets("wap.toml"), resources={"wapflow": WapflowResource(config="wap.toml")})

or, in a project's defs folder, a `defs.yaml`:

    type: wapflow.integrations.dagster.WapflowComponent
    attributes:
      config: wap.toml

What becomes what:
- each table of wap.toml ([tables.*], [sources.*]) is an asset: a table with a [sources.NAME] materializes by
  one ingest pass of it, another by the files given in its run config (`files`);
- wap.toml's [models.*] are one multi-asset, an asset per model, run as wapflow runs them (one transaction,
  published in one commit); an SDP pipeline (`pipelines=`) likewise, an asset per dataset;
- each check a table or model declares is a blocking AssetCheckSpec. Its result is wapflow's own audit report
  of the run (never a second query): passed, or failed with the observed value and threshold as metadata.

A blocked run publishes nothing: its failed checks are reported, the step fails without retry (a retry meets the
same rows), so nothing downstream materializes. A transient failure (exit 5) is raised as a plain error, which
the asset's RetryPolicy retries; the run id is derived from Dagster's run, so a retry resumes the same wapflow
run. A run held for review materializes nothing either: its checks pass, a `review` check warns with the
command that approves it, an observation records it as awaiting review, and its downstream assets are skipped
until someone decides (`wap approve`, then materialize again: the approved run is found published).
"""

# No `from __future__ import annotations`: Dagster reads the asset functions' annotations at definition time (the
# run config class, the context), so they must be objects, not strings.
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field

from wapflow import api
from wapflow.config import WapConfig, load_config
from wapflow.errors import WapError
from wapflow.integrations import outcome as oc
from wapflow.vocabulary import AWAITING_REVIEW

if TYPE_CHECKING:
    from wapflow.audit.spec import Check
    from wapflow.lakehouse.lakehouse import Lakehouse

__all__ = ["WapFiles", "WapflowComponent", "WapflowResource", "check_name", "wap_assets"]

REVIEW_CHECK = "review"  # the warning check of a run held for review
_NAME = re.compile(r"[^A-Za-z0-9_]+")


class WapflowResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """A wap.toml's lakehouse for assets and ops: one per process (its Spark session shared by every step)."""

    config: str | None = None  # the wap.toml (None: $WAP_CONFIG, else ./wap.toml)

    def lakehouse(self) -> "Lakehouse":
        return oc.lakehouse(self.config, progress=_log)

    def run(self, table: str, files: Sequence[str], *, run_id: str | None = None) -> oc.Outcome:
        """`wap run`: files into one table, published only if its checks pass."""
        return oc.from_run(api.run(self.lakehouse(), table, list(files), run_id=run_id), oc.config_text(self.config))

    def run_models(self, names: Sequence[str] | None = None, *, run_id: str | None = None) -> oc.Outcome:
        """`wap run-models`: the models named and their downstream, one commit or none."""
        res = api.run_models(self.lakehouse(), list(names) if names else None, run_id=run_id)
        return oc.from_group(res, oc.config_text(self.config), kind="models")

    def run_pipeline(self, spec: str | None, *, run_id: str | None = None) -> oc.Outcome:
        """`wap pipelines run`: an SDP project, each dataset audited, one commit or none."""
        res = oc.run_pipeline(self.lakehouse(), spec, run_id=run_id)
        return oc.from_group(res, oc.config_text(self.config), kind="pipeline")

    def ingest(self, source: str) -> oc.Outcome:
        """`wap ingest`: each new file of a [sources.NAME] published exactly once."""
        return oc.from_ingest(api.ingest(self.lakehouse(), source), oc.config_text(self.config))


def _log(line: str) -> None:
    dg.get_dagster_logger("wapflow").info(line)


class WapFiles(dg.Config):
    """Run config of a table asset without a [sources.NAME]: the files (paths, globs, s3:// URIs) to publish."""

    files: list[str] = Field(default_factory=list)


def check_name(check: "Check") -> str:
    """A declared check's name as Dagster allows it (letters, digits, _): not_null(passenger_count) ->
    not_null_passenger_count."""
    return _NAME.sub("_", check.display_name()).strip("_") or check.type_name()


def asset_key(table: str) -> dg.AssetKey:
    return dg.AssetKey(table.split("."))


def _declared(cfg: WapConfig, table: str) -> list["Check"]:
    checks: list[Check] = list(cfg.table(table).checks or [])
    if table in cfg.models:
        checks += list(cfg.models[table].checks)
    return checks


def _check_specs(cfg: WapConfig, table: str, *, review: bool) -> list[dg.AssetCheckSpec]:
    key = asset_key(table)
    specs = [
        dg.AssetCheckSpec(check_name(c), asset=key, blocking=True, description=f"wapflow check {c.display_name()}")
        for c in _declared(cfg, table)
    ]
    if review:
        specs.append(dg.AssetCheckSpec(REVIEW_CHECK, asset=key, description="a person approves before main moves"))
    return specs


def _holds(cfg: WapConfig, table: str) -> bool:
    return cfg.table(table).review != "never"


def _check_results(cfg: WapConfig, table: str, out: oc.Outcome) -> Iterator[dg.AssetCheckResult]:
    """Each declared check's verdict, read from the run's audit report (matched by the check's name)."""
    found = {str(c.get("name")): c for c in out.checks.get(table, [])}
    for chk in _declared(cfg, table):
        got = found.get(chk.display_name())
        if got is None:  # the run stopped before its audit (an error), or the check did not apply
            continue
        status = str(got.get("status"))
        severity = dg.AssetCheckSeverity.WARN if got.get("severity") == "warn" else dg.AssetCheckSeverity.ERROR
        yield dg.AssetCheckResult(
            asset_key=asset_key(table),
            check_name=check_name(chk),
            passed=status in ("passed", "quarantined") or (status == "warned"),
            severity=severity,
            metadata=_plain(
                {
                    "status": status,
                    "observed": got.get("observed"),
                    "threshold": got.get("threshold"),
                    "wapflow_run_id": out.run_ids.get(table, out.run_id),
                    "report": out.report_command(),
                }
            ),
        )
    if _holds(cfg, table) and out.awaiting_review:
        yield dg.AssetCheckResult(
            asset_key=asset_key(table),
            check_name=REVIEW_CHECK,
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            description=f"awaiting review: wap approve {out.run_id} --reason ... (or wap reject)",
            metadata={"status": AWAITING_REVIEW, "wapflow_run_id": out.run_id},
        )
    elif _holds(cfg, table) and out.published:
        yield dg.AssetCheckResult(asset_key=asset_key(table), check_name=REVIEW_CHECK, passed=True)


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    """Metadata Dagster takes: scalars as they are, anything else as its text."""
    return {k: v if isinstance(v, (str, int, float, bool)) else str(v) for k, v in d.items() if v is not None}


def _settle(cfg: WapConfig, out: oc.Outcome, tables: Sequence[str]) -> Iterator[Any]:
    """The outcome as Dagster events: materializations of what was published, check results, and a failure
    (no retry when blocked, retried when transient) for what was not."""
    for t in tables:
        yield from _check_results(cfg, t, out)
    if out.published or out.status == "nothing new":
        for t in tables:
            if out.status == "nothing new":
                continue
            yield dg.MaterializeResult(
                asset_key=asset_key(t),
                metadata=_plain(
                    {
                        "wapflow_run_id": out.run_ids.get(t, out.run_id),
                        "status": out.status,
                        "snapshot_id": out.snapshots.get(t),
                        "report": out.report_command(),
                        "message": out.message,
                    }
                ),
            )
        return
    if out.awaiting_review:
        for t in tables:
            yield dg.AssetObservation(
                asset_key=asset_key(t),
                metadata={"status": AWAITING_REVIEW, "wapflow_run_id": out.run_id, "report": out.report_command()},
            )
        dg.get_dagster_logger("wapflow").warning(out.reason())
        return  # nothing materialized: downstream assets are skipped until someone decides
    if out.retryable:
        raise WapRetryable(out.reason())
    raise dg.Failure(description=out.reason(), metadata=_plain(out.summary()), allow_retries=False)


class WapRetryable(Exception):
    """A wapflow run that failed in a way a retry may clear (exit 5): the asset's RetryPolicy retries it."""


def _run_id(context: dg.AssetExecutionContext, name: str) -> str:
    """`dg_<asset or group>_<dagster run id>`: the same on every retry of the step (a retry resumes the run)."""
    return _NAME.sub("_", f"dg_{name}_{context.run.run_id[:8]}").lower()


def _terminal(e: WapError) -> Exception:
    if e.retryable:
        return WapRetryable(f"wapflow: {e}")
    return dg.Failure(description=f"wapflow: {e}", allow_retries=False)


def _table_asset(cfg: WapConfig, table: str, source: str | None, group: str, resource_key: str) -> dg.AssetsDefinition:
    spec = dg.AssetSpec(
        asset_key(table),
        skippable=True,
        group_name=group,
        kinds={"iceberg", "spark"},
        description=f"{table}, published by wapflow" + (f" from [sources.{source}]" if source else ""),
    )

    @dg.multi_asset(
        name=_NAME.sub("_", table),
        specs=[spec],
        check_specs=_check_specs(cfg, table, review=_holds(cfg, table)),
        required_resource_keys={resource_key},
    )
    def _publish(context: dg.AssetExecutionContext, config: WapFiles) -> Iterator[Any]:
        wap: WapflowResource = getattr(context.resources, resource_key)
        try:
            if source is not None and not config.files:
                out = wap.ingest(source)
            else:
                if not config.files:
                    raise dg.Failure(
                        f"{table} has no [sources.NAME]: give the files in the run config", allow_retries=False
                    )
                out = wap.run(table, config.files, run_id=_run_id(context, table))
        except WapError as e:
            raise _terminal(e) from None
        yield from _settle(wap_config(wap), out, [table])

    return _publish


def _group_asset(
    cfg: WapConfig, name: str, tables: Sequence[str], deps: dict[str, list[str]], group: str, resource_key: str,
    *, pipeline: str | None = None,
) -> dg.AssetsDefinition:  # fmt: skip
    specs = [
        dg.AssetSpec(
            asset_key(t),
            skippable=True,
            group_name=group,
            kinds={"iceberg", "spark"},
            deps=[asset_key(d) for d in deps.get(t, [])],
            description=f"{t}, derived by wapflow ({'SDP pipeline ' + pipeline if pipeline else 'wap.toml models'})",
        )
        for t in tables
    ]
    checks = [s for t in tables for s in _check_specs(cfg, t, review=_holds(cfg, t))]

    @dg.multi_asset(name=name, specs=specs, check_specs=checks, required_resource_keys={resource_key}, can_subset=False)
    def _publish(context: dg.AssetExecutionContext) -> Iterator[Any]:
        wap: WapflowResource = getattr(context.resources, resource_key)
        try:
            if pipeline is not None:
                out = wap.run_pipeline(pipeline, run_id=_run_id(context, name))
            else:
                out = wap.run_models(list(tables), run_id=_run_id(context, name))
        except WapError as e:
            raise _terminal(e) from None
        yield from _settle(wap_config(wap), out, tables)

    return _publish


def wap_config(wap: WapflowResource) -> WapConfig:
    return wap.lakehouse().config


def wap_assets(
    config: str | Path | None = None,
    *,
    pipelines: Mapping[str, Sequence[str]] | None = None,
    group: str = "wapflow",
    resource_key: str = "wapflow",
) -> list[dg.AssetsDefinition]:
    """The assets of a wap.toml: a table asset per table and source, one multi-asset of its models, one per SDP
    pipeline (`pipelines`: spec path -> the datasets it writes). Loading reads wap.toml only (no Spark)."""
    cfg = load_config(config)
    sources: dict[str, str] = {}
    for name, src in cfg.sources.items():
        sources.setdefault(src.table, name)
    derived = set(cfg.models) | {d for ds in (pipelines or {}).values() for d in ds}
    tables = [t for t in dict.fromkeys([*cfg.tables, *sources]) if t not in derived]
    out = [_table_asset(cfg, t, sources.get(t), group, resource_key) for t in tables]
    if cfg.models:
        deps = {m: cfg.models[m].inputs() for m in cfg.models}
        out.append(_group_asset(cfg, "wap_models", list(cfg.models), deps, group, resource_key))
    for i, (spec, datasets) in enumerate((pipelines or {}).items()):
        name = _NAME.sub("_", f"sdp_{Path(spec).parent.name or i}").lower()
        out.append(_group_asset(cfg, name, list(datasets), {}, group, resource_key, pipeline=spec))
    return out


class SdpPipeline(dg.Model):
    """An SDP project of the component: its spec and the datasets it writes (each an asset)."""

    spec: str
    datasets: list[str]


class WapflowComponent(dg.Component, dg.Resolvable, dg.Model):
    """wap.toml's tables, models and SDP pipelines as assets, with the wapflow resource, from YAML:

    type: wapflow.integrations.dagster.WapflowComponent
    attributes:
      config: wap.toml              # beside defs.yaml, or an absolute path
      group: lakehouse
      pipelines: [{spec: pipelines/spark-pipeline.yml, datasets: [gold.daily]}]
    """

    config: str = "wap.toml"
    group: str = "wapflow"
    pipelines: list[SdpPipeline] = Field(default_factory=list)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        path = Path(self.config)
        if not path.is_absolute():
            path = context.path / path
        specs = {
            str(p.spec if Path(p.spec).is_absolute() else context.path / p.spec): p.datasets for p in self.pipelines
        }
        return dg.Definitions(
            assets=wap_assets(path, pipelines=specs, group=self.group),
            resources={"wapflow": WapflowResource(config=str(path))},
        )
