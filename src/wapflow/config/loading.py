"""Finding and reading wap.toml: --config, $WAP_CONFIG or ./wap.toml, parsed into a WapConfig with errors that
name the file, the section and the key; and the starter file `wap init` writes."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from wapflow.audit.spec import CHECK_MODELS, CHECK_TYPES
from wapflow.config.alerts import AlertsConfig, AlertSinkConfig
from wapflow.config.lakehouse import LakehouseConfig
from wapflow.config.lineage import LineageConfig
from wapflow.config.maintenance import MaintenanceConfig
from wapflow.config.tables import RunConfig, TableConfig
from wapflow.config.wapconfig import WapConfig
from wapflow.errors import ConfigError, did_you_mean
from wapflow.sql.layout import parse_partition_by, parse_sort_by
from wapflow.storage.settings import SECRET_FIELDS, S3Config

CONFIG_ENV = "WAP_CONFIG"
DEFAULT_CONFIG_NAME = "wap.toml"


def find_config_path(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """--config wins, then $WAP_CONFIG, then ./wap.toml; None means built-in defaults."""
    if explicit:
        p = Path(explicit).expanduser()
        if not p.is_file():
            raise ConfigError(
                f"config file {p} does not exist",
                hint="create one with `wap init`, or drop --config to use the defaults",
            )
        return p
    env = os.environ.get(CONFIG_ENV)
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise ConfigError(
                f"config file {p} (from ${CONFIG_ENV}) does not exist",
                hint=f"fix or unset ${CONFIG_ENV}",
            )
        return p
    p = Path.cwd() / DEFAULT_CONFIG_NAME
    return p if p.is_file() else None


def load_config(path: str | os.PathLike[str] | None = None) -> WapConfig:
    found = find_config_path(path)
    if found is None:
        return WapConfig()
    try:
        data = tomllib.loads(found.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{found} is not valid TOML: {e}", hint="fix the syntax at the line named") from e
    cfg = parse_config(data, source=str(found))
    cfg.source = found.resolve()
    cfg.base_dir = found.resolve().parent
    return cfg


def parse_config(data: dict[str, Any], *, source: str = "wap.toml") -> WapConfig:
    _precheck_check_types(data, source)
    _precheck_layout(data, source)
    try:
        return WapConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_describe(e, data, source), hint="see docs/guides/configuration.md") from None


def _precheck_check_types(data: dict[str, Any], source: str) -> None:
    """Name unknown check types with suggestions; pydantic's union error would list every model."""
    tables = data.get("tables")
    if not isinstance(tables, dict):
        return
    for tname, tcfg in tables.items():
        if not isinstance(tcfg, dict):
            continue
        checks = tcfg.get("checks", [])
        if not isinstance(checks, list):
            continue
        for i, chk in enumerate(checks):
            where = f'[tables."{tname}"] checks[{i}]'
            if not isinstance(chk, dict):
                raise ConfigError(f'{source}: {where} must be a table like {{ check = "not_null", column = "x" }}')
            kind = chk.get("check")
            if kind is None:
                raise ConfigError(
                    f"{source}: {where} has no 'check' key",
                    hint=f"add check = one of {', '.join(CHECK_TYPES)}",
                )
            if kind not in CHECK_TYPES:
                raise ConfigError(
                    f"{source}: {where}: unknown check type '{kind}'{did_you_mean(str(kind), CHECK_TYPES)}",
                    hint=f"known check types: {', '.join(CHECK_TYPES)}",
                )


def _precheck_layout(data: dict[str, Any], source: str) -> None:
    """partition_by / sort_by that do not parse: one error naming the table, the key and the entry, with the
    layout module's hint (pydantic's would only say "value error")."""
    tables = data.get("tables")
    for tname, tcfg in tables.items() if isinstance(tables, dict) else ():
        for key, parse in (("partition_by", parse_partition_by), ("sort_by", parse_sort_by)):
            value = tcfg.get(key) if isinstance(tcfg, dict) else None
            if isinstance(value, list):
                try:
                    parse(value)
                except ConfigError as e:
                    raise ConfigError(f'{source}: [tables."{tname}"] {key}: {e.message}', hint=e.hint) from None


def _model_for(parent: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose keys live at `parent`, to suggest valid keys for an unknown one."""
    if not parent:
        return WapConfig
    if parent == ("lakehouse",):
        return LakehouseConfig
    if parent == ("s3",):
        return S3Config
    if parent == ("alerts",):
        return AlertsConfig
    if parent == ("lineage",):
        return LineageConfig
    if parent == ("maintenance",) or (len(parent) == 3 and parent[0] == "tables" and parent[2] == "maintenance"):
        return MaintenanceConfig
    if parent[0] == "alerts" and len(parent) == 3 and parent[1] == "sinks":
        return AlertSinkConfig
    if parent[0] == "runs" and len(parent) == 2:
        return RunConfig
    if parent[0] == "tables" and len(parent) == 2:
        return TableConfig
    if parent[0] == "tables" and len(parent) == 5 and parent[2] == "checks":
        return CHECK_MODELS.get(str(parent[4]))
    return None


def _where(loc: tuple[Any, ...]) -> str:
    if not loc:
        return "top level"
    if loc[0] == "tables" and len(loc) >= 2:
        head = f'[tables."{loc[1]}"]'
        rest = list(loc[2:])
        if len(rest) >= 2 and rest[0] == "checks":
            head += f" checks[{rest[1]}]"
            rest = rest[3:] if len(rest) >= 3 and rest[2] in CHECK_TYPES else rest[2:]
        return head + ("." + ".".join(str(r) for r in rest) if rest else "")
    if loc[0] == "alerts" and len(loc) >= 3 and loc[1] == "sinks":
        return f"[alerts.sinks.{loc[2]}]" + ("." + ".".join(str(r) for r in loc[3:]) if len(loc) > 3 else "")
    if loc[0] in ("lakehouse", "s3", "alerts", "maintenance"):
        return f"[{loc[0]}]" + ("." + ".".join(str(r) for r in loc[1:]) if len(loc) > 1 else "")
    return ".".join(str(x) for x in loc)


def _describe(e: ValidationError, data: dict[str, Any], source: str) -> str:
    lines = [f"{source} has {e.error_count()} problem(s):"]
    for err in e.errors():
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden":
            key = str(loc[-1])
            model = _model_for(loc[:-1])
            known = [f.alias or n for n, f in model.model_fields.items()] if model else []
            known = [k for k in known if k not in ("source", "base_dir")]
            suffix = did_you_mean(key, known) if known else ""
            lines.append(f"  - {_where(loc[:-1])}: unknown key '{key}'{suffix}")
        elif err["type"] == "missing":
            lines.append(f"  - {_where(loc[:-1])}: missing required key '{loc[-1]}'")
        else:
            got = err.get("input")
            got_s = repr(got) if not isinstance(got, dict) else "a table"
            if loc and (
                str(loc[-1]) in (*SECRET_FIELDS, "nessie_token", "url_env", "url", "api_key_env")
                or "password" in str(loc[-1]).lower()
                or (str(loc[-1]) == "endpoint" and "@" in str(got))
            ):
                got_s = "a value not shown, as it is a secret"
            elif loc and str(loc[-1]) in ("run_store", "database", "uri") and isinstance(got, str):
                from wapflow.config.urls import redact_url

                got_s = repr(redact_url(got))
            lines.append(f"  - {_where(loc)}: {err['msg']} (got {got_s})")
    return "\n".join(lines)


STARTER = """# wap.toml: wapflow configuration (see docs/guides/configuration.md).
# Every key is optional; with no file at all wapflow uses these defaults.

[lakehouse]
# Local folder (embedded Iceberg JDBC catalog on SQLite inside it) or a URI such as s3://bucket/warehouse.
warehouse = "./lakehouse"
# "sqlite" (embedded default) or an Iceberg catalog type: "jdbc", "rest", "hive", "glue", "hadoop", "custom".
catalog = "sqlite"
# Spark catalog name; also the name PyIceberg's SqlCatalog must use to read the tables.
catalog_name = "lakehouse"
# Extra Iceberg catalog properties, passed through (uri, credential, io-impl, ...).
# catalog_properties = { uri = "https://rest-catalog.example.com" }
# Spark master: local[*], spark://host:7077, k8s://https://..., or sc://host:15002 (Spark Connect).
master = "local[*]"
driver_memory = "2g"
# spark_conf = { "spark.sql.shuffle.partitions" = "8" }
# Offline clusters: point at jars you already have instead of downloading from Maven Central.
# jars = ["/opt/jars/iceberg-spark-runtime-4.1_2.13-1.11.0.jar", "/opt/jars/sqlite-jdbc-3.50.3.0.jar"]
# run_store = "sqlite:///./lakehouse/wapflow_runs.db"   # any SQLAlchemy URL
# publish_lock_timeout = 600   # seconds a run waits for another run's publish of its table (then: transient)

# S3 for warehouse = "s3://..." and s3:// sources (see docs/guides/s3.md). Without keys here, the standard
# AWS credential chain is used (AWS_* variables, ~/.aws profile, instance or container role).
# [s3]
# endpoint = "http://127.0.0.1:9000"   # S3-compatible server; unset for AWS S3
# region = "us-east-1"
# path_style = true                    # default: true with an endpoint, false for AWS
# landing = "s3://landing-bucket/incoming"   # created and checked by `wap storage init`

[tables."nyc.trips"]
format = "parquet"          # parquet | csv | json (JSON lines); default: from the file extension
on_failure = "keep"         # keep the audit branch for inspection, or "drop" it
# partition_by = ["day(pickup_at)"]  # col, year/month/day/hour(col), bucket(N, col), truncate(N, col)
# sort_by = ["pickup_at", "trip_id DESC"]
checks = [
  { check = "not_null", column = "passenger_count" },
  { check = "between", column = "fare_amount", min = 0, max = 1000, severity = "warn" },
  { check = "accepted_values", column = "payment_type", values = [1, 2, 3, 4, 5, 6] },
  { check = "unique", columns = ["trip_id"] },
  { check = "row_count", min = 1 },
  { check = "expression", sql = "dropoff_at >= pickup_at" },
]
"""
