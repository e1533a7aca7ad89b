"""`wap demo --s3`: the demo with files landing in one bucket and the lakehouse in another.

A local S3 server (moto) is started on 127.0.0.1, the buckets are created with `wap storage init`'s
code, the two generated files are uploaded to the landing bucket, and WAP reads them from there
into an Iceberg warehouse on the lake bucket. The server is stopped at the end, and its buckets
with it; only the local catalog and run store (under <dir>/.wap) remain.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from wapflow._dev.s3_server import LocalS3Server
from wapflow.config import load_config
from wapflow.demo.run import DEMO_CONFIG, DemoOutcome, prepare_dir, run_pair
from wapflow.lakehouse.spark_s3 import s3_settings
from wapflow.service.storage import init_storage
from wapflow.storage.s3 import S3Store
from wapflow.storage.settings import parse_s3_uri

LAKE = "s3://lake/warehouse"
LANDING = "s3://landing/2026/11"

_S3_HEAD = """# Written by `wap demo --s3`: warehouse and landing files on a local S3 server (moto) that the demo
# started on {endpoint} and stopped again. The keys below are moto's dummies, not real credentials.
[lakehouse]
warehouse = "{lake}"
master = "local[2]"

[s3]
endpoint = "{endpoint}"
region = "us-east-1"
access_key_id = "wap-demo"
secret_access_key = "wap-demo-secret"
landing = "{landing}"
"""


def demo_s3_config(endpoint: str) -> str:
    """The demo's wap.toml with the lakehouse on S3; the table section is the local demo's."""
    tables = DEMO_CONFIG[DEMO_CONFIG.index('[tables."nyc.trips"]') :]
    return _S3_HEAD.format(endpoint=endpoint, lake=LAKE, landing=LANDING) + "\n" + tables


def _quiet(_message: str) -> None:
    return None


def run_demo_s3(directory: Path, rows: int = 10_000, *, progress: Callable[[str], None] | None = None) -> DemoOutcome:
    """Upload the two files to a landing bucket on a local S3 server, then the demo's two runs from there."""
    say = progress or _quiet
    cfg_path, clean, dirty = prepare_dir(directory, rows)
    # The catalog of an earlier S3 demo points at buckets that died with its server.
    shutil.rmtree(cfg_path.parent / ".wap", ignore_errors=True)
    say("starting a local S3 server (moto) on 127.0.0.1")
    with LocalS3Server() as server:
        cfg_path.write_text(demo_s3_config(server.endpoint))
        cfg = load_config(cfg_path)
        buckets = init_storage(cfg, progress=say)
        store = S3Store(s3_settings(cfg))
        landing = parse_s3_uri(LANDING)
        uris: list[str] = []
        for local in (clean, dirty):
            key = f"{landing.key}/{local.name}"
            say(f"uploading {local.name} to s3://{landing.bucket}/{key}")
            store.client.upload_file(str(local), landing.bucket, key)
            uris.append(f"s3://{landing.bucket}/{key}")
        outcome = run_pair(cfg, directory, uris[0], uris[1], progress=progress)
        outcome.storage = {
            "server": "moto (local S3 API server, stopped after the demo)",
            "endpoint": server.endpoint,
            "warehouse": LAKE,
            "landing": LANDING,
            "buckets": [b.to_dict() for b in buckets],
            "landing_files": [f.to_dict() for f in store.list(LANDING + "/")],
        }
    return outcome
