"""The JVM side of S3: Iceberg's S3FileIO for the warehouse, Hadoop's S3A for source files.

Both read credentials through the AWS SDK's default chain. Credentials written in wap.toml are put
into the driver JVM's system properties (aws.accessKeyId, ...), the first link of that chain, at the
moment a Lakehouse uses the session: they never enter Spark's or Hadoop's configuration, so they
cannot show up in Spark's printed config, its UI, event logs or `SET` output.

S3A settings are Hadoop configuration. They are set on the running SparkContext's Hadoop
configuration, which Spark copies into every new read (and ships to executors), so they apply to a
session that was started before this Lakehouse existed, like the tests' shared session. One caveat:
Hadoop caches one S3A client per bucket and JVM, created with the settings in force at its first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wapflow.errors import ConfigError
from wapflow.storage.settings import S3Config, is_s3_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from wapflow.config import WapConfig

S3FILEIO = "org.apache.iceberg.aws.s3.S3FileIO"
S3A_FS = "org.apache.hadoop.fs.s3a.S3AFileSystem"
SDK_DEFAULT_CHAIN = "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
_CRED_PROPS = {
    "access_key_id": "aws.accessKeyId",
    "secret_access_key": "aws.secretAccessKey",
    "session_token": "aws.sessionToken",
}
# JVM system properties this process has set, so they are cleared (and only they) for a config without keys.
_set_by_wapflow: set[str] = set()


def warehouse_on_s3(cfg: WapConfig) -> bool:
    return is_s3_uri(cfg.warehouse_location())


def uses_s3(cfg: WapConfig) -> bool:
    """S3 jars and settings are needed: the warehouse is on S3, or wap.toml has an [s3] section."""
    return warehouse_on_s3(cfg) or getattr(cfg, "s3", None) is not None


def s3_settings(cfg: WapConfig) -> S3Config:
    return getattr(cfg, "s3", None) or S3Config()


def iceberg_properties(cfg: WapConfig) -> dict[str, str]:
    """Catalog properties for a warehouse on S3 (no credentials: S3FileIO uses the default chain)."""
    if not warehouse_on_s3(cfg):
        return {}
    s = s3_settings(cfg)
    props = {"io-impl": S3FILEIO, "s3.path-style-access": str(s.uses_path_style()).lower()}
    if s.endpoint:
        props["s3.endpoint"] = s.endpoint
    region = s.effective_region()
    if region:
        props["client.region"] = region
    return props


def hadoop_settings(s: S3Config) -> dict[str, str | None]:
    """fs.s3a.* for S3A (None: unset, so an earlier Lakehouse's value does not linger)."""
    return {
        # s3:// sources are read by S3A too (Hadoop 3 has no other s3:// file system).
        "fs.s3.impl": S3A_FS,
        "fs.s3a.impl": S3A_FS,
        "fs.s3a.aws.credentials.provider": SDK_DEFAULT_CHAIN,
        "fs.s3a.endpoint": s.endpoint,
        "fs.s3a.endpoint.region": s.effective_region(),
        "fs.s3a.path.style.access": str(s.uses_path_style()).lower(),
    }


def check_master(cfg: WapConfig) -> None:
    """Keys in wap.toml reach the driver JVM only, which is every JVM just for a local master."""
    s = s3_settings(cfg)
    master = cfg.lakehouse.master
    if s.has_keys() and not master.startswith("local"):
        raise ConfigError(
            f"[s3] access keys in wap.toml only reach the driver, and master = {master!r} runs executors elsewhere",
            hint="on a cluster, give every node credentials through the standard AWS chain (instance or pod role, "
            "AWS_* environment variables, ~/.aws profile) and drop the keys from wap.toml",
        )


def apply_to_session(spark: SparkSession, cfg: WapConfig) -> None:
    """Point the running session's S3A and the AWS SDK's credential chain at this config's S3."""
    if not uses_s3(cfg):
        return
    check_master(cfg)
    from wapflow.spark.kind import is_connect

    if is_connect(spark):
        # Spark Connect (configured, or the `wap serve` server of a local master): S3A settings and keys
        # were given to the server when it started (wapflow.lakehouse.connect); this side has no JVM.
        return
    s = s3_settings(cfg)
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a classic (non-Connect) session has its JVM
    hconf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in hadoop_settings(s).items():
        if value is None:
            hconf.unset(key)
        else:
            hconf.set(key, value)
    system = jvm.java.lang.System
    for field, prop in _CRED_PROPS.items():
        secret = getattr(s, field)
        if secret is not None:
            system.setProperty(prop, secret.get_secret_value())
            _set_by_wapflow.add(prop)
        elif prop in _set_by_wapflow:
            system.clearProperty(prop)
            _set_by_wapflow.discard(prop)
