"""[lakehouse]: where the tables live and how Spark runs."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from wapflow.audit.checktype import Scalar
from wapflow.config.base import _database_url, _Strict
from wapflow.spark.kind import is_connect_url
from wapflow.vocabulary import parse_duration


class LakehouseConfig(_Strict):
    """Where the tables live and how Spark runs: the catalog, the warehouse, the master, the jars, the run store."""

    # A folder, or s3://bucket/prefix (then an [s3] section configures the endpoint and credentials).
    warehouse: str = "./lakehouse"
    # sqlite: the embedded catalog (Iceberg's JDBC catalog on <warehouse>/catalog.db); or an Iceberg catalog type.
    catalog: Literal["sqlite", "jdbc", "rest", "hive", "glue", "hadoop", "custom", "nessie"] = "sqlite"
    # Spark catalog name; PyIceberg's SqlCatalog must use the same name to see the tables.
    catalog_name: str = "lakehouse"
    # Passed through to Iceberg's Spark catalog (uri, credential, io-impl, ...).
    catalog_properties: dict[str, str] = Field(default_factory=dict)
    # Where Spark runs: local[*], spark://host:7077, k8s://https://..., sc://host:15002 (Spark Connect).
    master: str = "local[*]"
    driver_memory: str = "2g"  # spark.driver.memory of the driver (the `wap` process on a local master)
    # Where the commands that need Spark (run, run-tables, ingest, backfill, query, revert, maintain, discard)
    # run: "auto" hands them to a warm wapflow engine, a background process of this user that keeps one
    # SparkSession for this config (started by the first such command; `wap engine status`, `stop`, `logs`);
    # "off" starts Spark in each command; "sc://host:15002" makes each command a client of that Spark Connect
    # server. `--no-engine`, and WAP_ENGINE=off or auto, override it for one command or a shell.
    engine: str = "auto"
    engine_idle: str = "15m"  # the engine stops after this long without a command (a duration: 90s, 15m, 1h)
    # Any extra Spark conf, e.g. { "spark.sql.shuffle.partitions" = "64" }.
    spark_conf: dict[str, Scalar] = Field(default_factory=dict)
    # JVM jars: by default downloaded once from Maven Central into jars_dir.
    # Offline clusters list local jar paths here instead.
    jars: list[str] = Field(default_factory=list)
    extra_packages: list[str] = Field(default_factory=list)  # more Maven coordinates to fetch (a catalog's driver)
    # download: wapflow fetches the jars into jars_dir; ivy: Spark resolves them (spark.jars.packages).
    jar_resolution: Literal["download", "ivy"] = "download"
    maven_repo: str = "https://repo1.maven.org/maven2"  # or a corporate mirror
    jars_dir: str | None = None  # unset: $WAP_JARS_DIR, else ~/.cache/wapflow/jars
    # Runs, the file ledger, alert deliveries and publish locks: any SQLAlchemy URL (postgresql:// uses
    # psycopg 3). Unset: wapflow_runs.db beside the catalog (in .wap/ beside wap.toml for an S3 warehouse).
    run_store: str | None = None
    # How long a run waits for another run's publish of the same table before failing (transient: retried).
    publish_lock_timeout: float = Field(default=600.0, gt=0)
    format_version: Literal[2, 3] = Field(
        default=2,
        description="the Iceberg format version of the tables wapflow creates (a table's own `format_version` "
        "overrides it); 3 adds deletion vectors and row lineage but needs v3 readers (the Format v3 guide); "
        "an existing table keeps its version until `wap maintain TABLE --upgrade-format 3`",
    )
    # catalog = "nessie": the server's REST API (e.g. http://127.0.0.1:19120/api/v2) and an optional
    # bearer token (or $WAP_NESSIE_TOKEN); the token is never printed.
    nessie_uri: str | None = None
    nessie_token: str | None = Field(default=None, repr=False)  # unset: $WAP_NESSIE_TOKEN
    # A PEM file (relative to wap.toml's folder) of the private CA that signed an https:// catalog server's
    # certificate (catalog = "rest" or "nessie") or a Spark Connect server's (sc://...;use_ssl=true): trusted
    # besides the public CAs, by wapflow, by Spark's JVM and by the Spark Connect client's gRPC channel.
    ca_bundle: str | None = None
    rest_group_commit: Literal["atomic", "table_by_table"] | None = Field(
        default=None,
        description="how the REST catalog server applies a multi-table commit (`wap run-tables`): `atomic`, in one "
        "transaction (Nessie's Iceberg REST endpoint, Apache Polaris, Lakekeeper), or `table_by_table`: every "
        "table validated, then committed one by one (Iceberg's reference server). Unset: wapflow knows Nessie's "
        "by its configuration; through any other server a group's report says its atomicity is not known",
    )

    @field_validator("catalog_name")
    @classmethod
    def _catalog_name(cls, v: str) -> str:
        from wapflow.sql.identifiers import validate_part

        return validate_part(v, what="catalog_name")

    @field_validator("run_store")
    @classmethod
    def _run_store(cls, v: str | None) -> str | None:
        return _database_url(v)

    @field_validator("engine")
    @classmethod
    def _engine(cls, v: str) -> str:
        v = v.strip()
        if v not in ("auto", "off") and not is_connect_url(v):
            raise ValueError(f'{v!r} is not "auto", "off" or a Spark Connect URL (sc://host:15002)')
        return v

    @field_validator("engine_idle")
    @classmethod
    def _engine_idle(cls, v: str) -> str:
        if parse_duration(v) <= 0:
            raise ValueError(f"{v!r} is not a positive duration (e.g. 90s, 15m, 1h)")
        return v.strip()

    @model_validator(mode="after")
    def _jdbc_catalog(self) -> LakehouseConfig:
        """A JDBC catalog needs its database's uri; a password goes in jdbc.password, never in the uri
        (Iceberg and Spark put the uri in their error messages)."""
        uri = self.catalog_properties.get("uri")
        if self.catalog == "jdbc" and not uri:
            raise ValueError(
                'catalog = "jdbc" needs catalog_properties.uri, e.g. catalog_properties = { uri = '
                '"jdbc:postgresql://db-host:5432/lakehouse", "jdbc.user" = "wap", "jdbc.password" = "..." }'
            )
        if self.catalog == "jdbc" and uri and not uri.startswith("jdbc:"):
            raise ValueError(
                f'catalog = "jdbc": catalog_properties.uri must be a JDBC URL (jdbc:postgresql://host:5432/db), '
                f"not {uri.split(':', 1)[0]}:..."
            )
        if uri and uri.startswith("jdbc:") and re.search(r"[?&;]password=", uri, re.IGNORECASE):
            raise ValueError(
                'catalog_properties.uri carries a password: put it in catalog_properties."jdbc.password" '
                "instead (the uri appears in error messages)"
            )
        return self
