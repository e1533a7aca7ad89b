"""Files of odd names and formats for the tests of what a run reads (tests/unit/test_sources.py without Spark,
tests/spark/test_sources.py with it): a small parquet table written locally or put on the local S3 server, and a
Storage on that server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from support.data import write_parquet

_ids = iter(range(1_000, 10_000_000, 1_000))


def simple(n: int = 5) -> pa.Table:
    start = next(_ids)
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "name": [f"n{i}" for i in range(n)],
            "amount": [float(i) + 0.5 for i in range(n)],
        }
    )


def pq_write(path: Path, table: pa.Table | None = None) -> Path:
    return write_parquet(path, table if table is not None else simple())


def s3_put(
    env: Any, bucket: str, key: str, table: pa.Table | None = None, body: bytes | None = None
) -> tuple[str, pa.Table | None]:
    if body is None:
        table = table if table is not None else simple()
        buf = pa.BufferOutputStream()
        pq.write_table(table, buf)
        body = buf.getvalue().to_pybytes()
    env.client().put_object(Bucket=bucket, Key=key, Body=body)
    return f"s3://{bucket}/{key}", table


def s3_storage(env: Any) -> Any:
    from support.s3_server import REGION
    from wapflow.config import parse_config
    from wapflow.storage import Storage

    return Storage(parse_config({"s3": {"endpoint": env.endpoint, "region": REGION, **env.admin.as_dict()}}).s3)
