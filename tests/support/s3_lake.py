"""A lakehouse on the local S3 server (moto), for the S3 tests and the dashboard's S3 test: trips uploaded
to a bucket, a wap.toml as a user writes it, an in-process Lakehouse on the shared SparkSession."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from support.data import TRIPS_CHECKS
from support.s3_server import REGION, Keys, S3Env
from wapflow.config import parse_config
from wapflow.demo.generate import generate_trips
from wapflow.lakehouse.lakehouse import Lakehouse


def upload_trips(env: S3Env, bucket: str, key: str, rows: int, *, null_rate: float = 0.0, start_id: int = 1) -> str:
    buf = io.BytesIO()
    pq.write_table(generate_trips(rows, null_rate=null_rate, start_id=start_id, seed=start_id), buf)
    env.client().put_object(Bucket=bucket, Key=key, Body=buf.getvalue())
    return f"s3://{bucket}/{key}"


def toml_config(
    tmp: Path,
    env: S3Env,
    *,
    lake: str,
    catalog: str,
    keys: Keys | None,
    landing: str | None = None,
    endpoint: str | None = None,
    name: str = "wap.toml",
) -> Path:
    """A wap.toml as a user writes it: lakehouse on s3://<lake>/warehouse, the README's checks."""
    s3 = [f'endpoint = "{endpoint or env.endpoint}"', f'region = "{REGION}"']
    if keys is not None:
        s3.append(keys.toml())
    if landing:
        s3.append(f'landing = "s3://{landing}/2026/11"')
    checks = "\n".join("  { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in c.items()) + " }," for c in TRIPS_CHECKS)
    text = (
        f'[lakehouse]\nwarehouse = "s3://{lake}/warehouse"\ncatalog_name = "{catalog}"\nmaster = "local[2]"\n'
        f'driver_memory = "1g"\n\n[s3]\n' + "\n".join(s3) + f'\n\n[tables."nyc.trips"]\nchecks = [\n{checks}\n]\n'
    )
    p = tmp / name
    p.write_text(text)
    return p


def lakehouse(
    spark: Any, tmp: Path, env: S3Env, *, lake: str, catalog: str, keys: Keys, warehouse: str | None = None
) -> Lakehouse:
    """A lakehouse on s3://<lake>/warehouse (or `warehouse`, e.g. a local folder, with S3 for its sources)."""
    cfg = parse_config(
        {
            "lakehouse": {
                "warehouse": warehouse or f"s3://{lake}/warehouse",
                "catalog_name": catalog,
                "master": "local[2]",
            },
            "s3": {"endpoint": env.endpoint, "region": REGION, **keys.as_dict()},
            "tables": {"nyc.trips": {"checks": TRIPS_CHECKS}},
        }
    )
    cfg.base_dir = tmp
    return Lakehouse(cfg, spark=spark)
