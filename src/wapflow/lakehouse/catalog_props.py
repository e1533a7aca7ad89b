"""The Iceberg catalog's Spark settings for a config: what `wap` sessions register and `wap serve` starts with.

Apart from the session module so that the Spark Connect server (lakehouse/connect.py), which the session
looks up, can use them without importing the session back.
"""

from __future__ import annotations

import os

from wapflow.config import WapConfig, ensure_folder
from wapflow.errors import ConfigError
from wapflow.lakehouse import spark_s3 as s3_spark

SPARK_CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"
# A REST catalog's bearer token outside wap.toml: catalog_properties.token when that is not set.
REST_TOKEN_ENV = "WAP_REST_TOKEN"
# Where a REST catalog's token is set (what a refused one's message tells the user to check).
REST_TOKEN_SETTING = f"[lakehouse] catalog_properties.token or ${REST_TOKEN_ENV} (or credential)"
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


def catalog_properties(cfg: WapConfig) -> dict[str, str]:
    """Iceberg catalog properties for Spark (and, for the embedded catalog, PyIceberg)."""
    lh = cfg.lakehouse
    props: dict[str, str] = {}
    warehouse = cfg.warehouse_location()
    local = cfg.local_warehouse_path()
    if lh.catalog == "sqlite":
        db = cfg.embedded_catalog_path()
        ensure_folder(db.parent, "the catalog's folder")
        props.update(
            {
                "type": "jdbc",
                # WAL + busy timeout: concurrent wap processes wait instead of failing with SQLITE_BUSY.
                "uri": f"jdbc:sqlite:{db}?journal_mode=WAL&busy_timeout=30000",
                "jdbc.schema-version": "V1",
            }
        )
    elif lh.catalog == "nessie":
        # Catalog-level branches (issue 4): Iceberg's NessieCatalog, bound to Nessie's main here.
        from wapflow.lakehouse.nessie_config import catalog_properties as nessie_properties

        props.update(nessie_properties(cfg))
    elif lh.catalog != "custom":
        props["type"] = lh.catalog
    if local is not None:
        ensure_folder(local, "the warehouse")
        props["warehouse"] = "file:" + str(local)
    else:
        props["warehouse"] = warehouse
    # s3:// warehouse: Iceberg's S3FileIO with the [s3] endpoint/region (credentials: see wapflow.lakehouse.spark_s3).
    props.update(s3_spark.iceberg_properties(cfg))
    props.update(lh.catalog_properties)
    token = os.environ.get(REST_TOKEN_ENV)
    if lh.catalog in ("rest", "custom") and token and "token" not in props and "credential" not in props:
        props["token"] = token  # Iceberg's REST client (and wapflow's no-JVM reads) send it as a bearer token
    if lh.catalog == "custom" and "catalog-impl" not in props and "type" not in props:
        raise ConfigError(
            'catalog = "custom" needs catalog_properties.catalog-impl (a Java class name)',
            hint='e.g. catalog_properties = { "catalog-impl" = "org.apache.iceberg.rest.RESTCatalog", uri = "..." }',
        )
    return props
