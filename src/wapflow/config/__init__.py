"""wap.toml: where the lakehouse lives and what each table's audit demands.

Validated up front with errors that name the file, the section and the key, so a
typo is found before any JVM starts or any data moves.

Each section owns a module: base (what the sections share), lakehouse, maintenance, tables ([tables.*] and
[runs.*]), sources ([sources.*] and [watch]), alerts, lineage, dashboard, models ([models.*]), wapconfig (the
whole file) and loading (finding and parsing it). Every name is importable from here, as before the split.
"""

from __future__ import annotations

# Check models live in wapflow.audit.spec; these two stay importable from here for existing callers
# (wapflow.pipeline). New code imports them from wapflow.audit.spec.
from wapflow.audit.spec import Check as Check
from wapflow.audit.spec import NotNullCheck as NotNullCheck
from wapflow.config.alerts import SINK_TYPES, AlertsConfig, AlertSinkConfig
from wapflow.config.base import ensure_folder, parse_bytes
from wapflow.config.dashboard import DashboardConfig, OidcConfig
from wapflow.config.lakehouse import LakehouseConfig
from wapflow.config.lineage import LINEAGE_TRANSPORTS, LineageConfig
from wapflow.config.loading import CONFIG_ENV, DEFAULT_CONFIG_NAME, STARTER, find_config_path, load_config, parse_config
from wapflow.config.maintenance import ORPHAN_MIN_SECONDS, MaintenanceConfig
from wapflow.config.sources import Source, SourceConfig, WatchConfig
from wapflow.config.tables import RunConfig, TableConfig, write_settings
from wapflow.config.wapconfig import NO_CHECKS_DECLARED, NO_CHECKS_FLAG, WapConfig
from wapflow.vocabulary import ALERT_EVENTS as ALERT_EVENTS
from wapflow.vocabulary import parse_duration as parse_duration

__all__ = [
    "ALERT_EVENTS",
    "CONFIG_ENV",
    "DEFAULT_CONFIG_NAME",
    "LINEAGE_TRANSPORTS",
    "NO_CHECKS_DECLARED",
    "NO_CHECKS_FLAG",
    "ORPHAN_MIN_SECONDS",
    "SINK_TYPES",
    "STARTER",
    "AlertSinkConfig",
    "AlertsConfig",
    "Check",
    "DashboardConfig",
    "LakehouseConfig",
    "LineageConfig",
    "MaintenanceConfig",
    "NotNullCheck",
    "OidcConfig",
    "RunConfig",
    "Source",
    "SourceConfig",
    "TableConfig",
    "WapConfig",
    "WatchConfig",
    "ensure_folder",
    "find_config_path",
    "load_config",
    "parse_bytes",
    "parse_config",
    "parse_duration",
    "write_settings",
]
