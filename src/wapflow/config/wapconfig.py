"""The whole of wap.toml (WapConfig): every section, and the answers drawn from several of them (a table's
settings for one run, where the warehouse and the run store are)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from wapflow.config.alerts import AlertsConfig
from wapflow.config.base import _plain_names, _Strict
from wapflow.config.dashboard import DashboardConfig
from wapflow.config.lakehouse import LakehouseConfig
from wapflow.config.lineage import LineageConfig
from wapflow.config.maintenance import MaintenanceConfig
from wapflow.config.models import WRITE_KEYS, ModelConfig, model_order
from wapflow.config.sources import Source, SourceConfig, WatchConfig
from wapflow.config.tables import RunConfig, TableConfig
from wapflow.errors import ConfigError, did_you_mean
from wapflow.storage.settings import S3Config
from wapflow.vocabulary import table_of_quarantine

# The user's word a table without checks publishes on (WapConfig.audit_consent), as reports say it.
NO_CHECKS_DECLARED = "checks = [] in wap.toml"
NO_CHECKS_FLAG = "--no-checks"


class WapConfig(_Strict):
    """Everything wap.toml says: [lakehouse], [tables.*], [runs.*], [sources.*], [watch], [s3], [alerts],
    [maintenance], [lineage], [dashboard]."""

    lakehouse: LakehouseConfig = Field(default_factory=LakehouseConfig)
    tables: dict[str, TableConfig] = Field(default_factory=dict)
    runs: dict[str, RunConfig] = Field(default_factory=dict)
    # [models."ns.table"]: tables derived from others by SQL or Python (wapflow.config.models)
    models: dict[str, ModelConfig] = Field(default_factory=dict)
    sources: dict[str, SourceConfig] = Field(default_factory=dict)
    watch: WatchConfig = Field(default_factory=WatchConfig)
    # [s3]: endpoint, region, credentials for an s3:// warehouse and s3:// sources (None: no S3 jars).
    s3: S3Config | None = None
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    # [lineage]: OpenLineage events of every run (None: none sent).
    lineage: LineageConfig | None = None
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig)

    # Where the file was read from; relative paths in it resolve against its folder.
    source: Path | None = Field(default=None, exclude=True)
    base_dir: Path = Field(default_factory=Path.cwd, exclude=True)

    def run_specs(self, name: str) -> tuple[list[tuple[str, list[str]]], str | None]:
        """A [runs.NAME] section as (table, sources) pairs, relative paths resolved against the config's folder."""
        if name not in self.runs:
            raise ConfigError(
                f"no [runs.{name}] section in {self.source or 'the configuration'}{did_you_mean(name, self.runs)}",
                hint=f"known runs: {', '.join(self.runs) or 'none'}",
            )
        run = self.runs[name]
        specs = []
        for table, sources in run.tables.items():
            resolved = [src if "://" in src or os.path.isabs(src) else str(self.base_dir / src) for src in sources]
            specs.append((table, resolved))
        return specs, run.branch

    @field_validator("sources")
    @classmethod
    def _source_names(cls, v: dict[str, SourceConfig]) -> dict[str, SourceConfig]:
        return _plain_names(v, "source")

    @model_validator(mode="after")
    def _models_form_no_cycle(self) -> WapConfig:
        from wapflow.sql.identifiers import TableName

        for name in self.models:
            try:
                TableName.parse(name)
            except ConfigError as e:
                raise ValueError(f'[models."{name}"]: {e.message}') from None
        try:
            model_order(self.models)
        except ConfigError as e:
            raise ValueError(e.message + (f" ({e.hint})" if e.hint else "")) from None
        return self

    def resolve_source(self, name: str) -> Source:
        """A [sources.NAME] section resolved once (its relative location against the config's folder): the value
        `wap ingest`, `backfill` and `watch` pass down instead of the name."""
        if name not in self.sources:
            raise ConfigError(
                f"no [sources.{name}] section in {self.source or 'the configuration'}"
                f"{did_you_mean(name, self.sources)}",
                hint=f"known sources: {', '.join(self.sources) or 'none'}; declare one with table and location",
            )
        src = self.sources[name]
        loc = src.location
        if "://" not in loc and not os.path.isabs(loc):
            loc = str((self.base_dir / loc).resolve())
        return Source(name, src.model_copy(update={"location": loc}))

    @model_validator(mode="after")
    def _source_modes_fit_their_tables(self) -> WapConfig:
        """A source's mode / key / replace_where overrides are checked against its table's section."""
        for src_name, src in self.sources.items():
            if src.write_overrides():
                try:
                    self.table(src.table, source=src_name)
                except ValueError as e:
                    raise ValueError(f"[sources.{src_name}] (its table {src.table}): {e}") from None
        return self

    def format_version_for(self, name: str) -> int:
        """The format version a new table `name` is created with: its section's, else [lakehouse]'s; a
        quarantine table's is its table's."""
        base = table_of_quarantine(name)
        tbl = self.tables.get(name) or self.tables.get(base)
        own = tbl.format_version if tbl is not None else None
        return own if own is not None else self.lakehouse.format_version

    def maintenance_for(self, name: str) -> MaintenanceConfig:
        """[maintenance] with the table's own overrides ([tables."NAME".maintenance])."""
        tbl = self.tables.get(name)
        return self.maintenance.merged(tbl.maintenance if tbl is not None else None)

    def audit_consent(
        self, name: str, *, checks: int, no_checks: bool = False, flag: str | None = NO_CHECKS_FLAG
    ) -> str | None:
        """Whether a run of table `name` with `checks` checks (its section's and the caller's) may go ahead: None
        when it has checks; when it has none, the user's word it publishes unaudited on (NO_CHECKS_DECLARED:
        `checks = []` written in its section; NO_CHECKS_FLAG: the caller's `no_checks`). Anything else is a
        ConfigError, raised before anything is written:

        - no section for `name`, and a declared section's name is close to it: a typo in a section name would
          turn its audit (and its policies) off, whatever the caller says;
        - no checks, and the user said neither. `flag`: how this command takes the caller's word (None: it
          takes none, as `wap watch`, whose consent belongs in wap.toml).

        The schema contract is no check: it audits columns, never a value."""
        section = f'[tables."{name}"]'
        where = str(self.source) if self.source is not None else "wap.toml"
        tbl = self.tables.get(name)
        typo = self.misspelt_section(name)
        if typo is not None:
            raise typo
        if checks:
            return None
        if tbl is not None and "checks" in tbl.model_fields_set:
            return NO_CHECKS_DECLARED
        if no_checks:
            return NO_CHECKS_FLAG
        has = f"its section {section} declares none" if tbl is not None else f"{where} has no {section} section"
        ways = f"declare checks = [] in {section}" + (f", or pass {flag}" if flag else "")
        raise ConfigError(
            f"{name} has no checks ({has}): wapflow publishes nothing unaudited unless told to",
            hint=f'add checks to {section} (e.g. checks = [{{ check = "not_null", column = "id" }}]); '
            f"to publish without checks, {ways}",
        )

    def misspelt_section(self, name: str) -> ConfigError | None:
        """The error for a run of `name`, which has no section while a declared one's name is close to it: a typo
        in a section name would turn its audit (and its policies) off, whatever the caller says. Read from
        wap.toml alone, so it is said before Spark (or the warm engine) starts."""
        if name in self.tables:
            return None
        near = self._misspelt(name)
        if not near:
            return None
        section = f'[tables."{name}"]'
        where = str(self.source) if self.source is not None else "wap.toml"
        return ConfigError(
            f"no {section} section in {where}{near}: a run of {name} would have none of that section's "
            "checks and policies",
            hint=f"fix the section's name in {where}; if {name} is another table, declare {section} "
            "with its own checks",
        )

    def _misspelt(self, name: str) -> str:
        """' (did you mean [tables."X"]?)' for a declared table `name` is a typo of, else '': one that differs from
        it in its namespace alone or its table name alone, and closely there (two tables of one long namespace,
        shop_eu.orders and shop_eu.items, are not close for sharing it)."""
        ns, _, tbl = name.rpartition(".")
        declared = [(d, *d.rpartition(".")[::2]) for d in self.tables]  # (name, namespace, table name)
        by_table = {dt: d for d, dn, dt in declared if dn.lower() == ns.lower()}
        by_ns = {dn: d for d, dn, dt in declared if dt.lower() == tbl.lower()}
        return did_you_mean(tbl, by_table, n=1, shown=lambda t: f'[tables."{by_table[t]}"]', cutoff=0.8) or (
            did_you_mean(ns, by_ns, n=1, shown=lambda n: f'[tables."{by_ns[n]}"]', cutoff=0.8)
        )

    def table(self, name: str, source: str | None = None, write: Mapping[str, Any] | None = None) -> TableConfig:
        """The table's section, or defaults for a table wap.toml does not mention; for a run of [sources.SOURCE]'s
        files, with the write mode that source sets; `write`: the write mode a caller sets for one run
        (wapflow.write(mode=..., key=...)). Either is checked by the table's own rules."""
        base = self.tables.get(name, TableConfig())
        src = self.sources.get(source) if source else None
        overrides = src.write_overrides() if src is not None else {}
        overrides |= {k: v for k, v in (write or {}).items() if k in WRITE_KEYS and v is not None}
        if not overrides:
            return base
        if overrides.get("mode", base.mode) != base.mode:
            # A source's own mode does not inherit the table's mode-specific keys.
            base = base.model_copy(update={"delete_when": None, "order_by": [], "replace_where": None})
        merged = base.model_copy(update=overrides)
        merged.check_mode()
        return merged

    def warehouse_location(self) -> str:
        """Absolute warehouse URI or path (relative paths resolve against the config's folder)."""
        wh = self.lakehouse.warehouse
        if "://" in wh or wh.startswith("file:"):
            return wh
        return str((self.base_dir / wh).expanduser().resolve())

    def local_warehouse_path(self) -> Path | None:
        wh = self.warehouse_location()
        if wh.startswith("file://"):
            return Path(wh[len("file://") :])
        if wh.startswith("file:"):
            return Path(wh[len("file:") :])
        if "://" in wh:
            return None
        return Path(wh)

    def embedded_catalog_path(self) -> Path:
        """The embedded catalog's SQLite file: beside a local warehouse, else in ./.wap (it must be on a local
        disk even when the data lives on S3)."""
        local = self.local_warehouse_path()
        return (self.base_dir / ".wap" / "catalog.db").resolve() if local is None else local / "catalog.db"

    def state_dir(self) -> Path:
        """wapflow's own files on this machine (run store by default, logs): the local warehouse or ./.wap."""
        local = self.local_warehouse_path()
        return local if local is not None else (self.base_dir / ".wap").resolve()

    def run_store_url(self) -> str:
        """The run store's (and ledger's) SQLAlchemy URL: [lakehouse] run_store, else SQLite beside the catalog."""
        if self.lakehouse.run_store:
            return self.lakehouse.run_store
        return f"sqlite:///{self.state_dir() / 'wapflow_runs.db'}"

    def local_places(self) -> dict[str, Path]:
        """The local folders wapflow and Spark write to, by what they hold: what a full disk is reported
        against (the JVM's "No space left on device" does not say which one)."""
        import tempfile

        places: dict[str, Path] = {}
        local = self.local_warehouse_path()
        if local is not None:
            places["the warehouse"] = local
        store = self.run_store_url()
        if store.startswith("sqlite:///"):
            places["the run store"] = Path(store[len("sqlite:///") :]).parent
        if self.lakehouse.catalog == "sqlite":
            places["the catalog's database"] = self.embedded_catalog_path().parent
        places["Spark's logs"] = self.state_dir() / "logs"
        spark_local = self.lakehouse.spark_conf.get("spark.local.dir") or os.environ.get("SPARK_LOCAL_DIRS")
        places["Spark's local folder"] = (
            Path(str(spark_local).split(",")[0]) if spark_local else Path(tempfile.gettempdir())
        )
        return places
