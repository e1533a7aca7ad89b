"""The test session's S3: moto's server on a free 127.0.0.1 port, with IAM users and enforced auth.

Users are created while the server still accepts anonymous calls; then auth is switched on, so
every later request (boto3, Iceberg's S3FileIO, Hadoop's S3A, PyIceberg) must be SigV4-signed with
one of these keys and allowed by the user's policy. Bucket names are unique per test: Hadoop caches
one S3A client per bucket and JVM, and all tests share one JVM.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.config import Config

from wapflow._dev.s3_server import LocalS3Server

REGION = "us-east-1"
_names = itertools.count()

# moto checks HEAD on a bucket as "s3:HeadBucket" (AWS checks s3:ListBucket), so both are granted.
_READ = ["s3:ListBucket", "s3:HeadBucket", "s3:GetObject", "s3:GetBucketLocation"]
_WRITE = ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:CreateBucket"]


@dataclass(frozen=True)
class Keys:
    access_key_id: str
    secret_access_key: str
    session_token: str | None = None

    def toml(self) -> str:
        lines = [f'access_key_id = "{self.access_key_id}"', f'secret_access_key = "{self.secret_access_key}"']
        if self.session_token:
            lines.append(f'session_token = "{self.session_token}"')
        return "\n".join(lines)

    def as_dict(self) -> dict[str, str]:
        d = {"access_key_id": self.access_key_id, "secret_access_key": self.secret_access_key}
        if self.session_token:
            d["session_token"] = self.session_token
        return d

    def secrets(self) -> list[str]:
        return [s for s in (self.access_key_id, self.secret_access_key, self.session_token) if s]


def _policy(statements: list[dict[str, Any]]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def _allow(actions: list[str] | str, resources: list[str]) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": actions, "Resource": resources}


def _bucket_arns(prefix: str) -> list[str]:
    return [f"arn:aws:s3:::{prefix}*", f"arn:aws:s3:::{prefix}*/*"]


@dataclass
class S3Env:
    server: LocalS3Server
    admin: Keys  # everything
    reader: Keys  # read landing-* and lake-*, write nothing
    lake_only: Keys  # everything on lake-*, nothing on landing-*
    temporary: Keys  # assumed-role credentials with a session token (admin rights)

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def client(self, keys: Keys | None = None, service: str = "s3") -> Any:
        k = keys or self.admin
        return boto3.session.Session().client(
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=k.access_key_id,
            aws_secret_access_key=k.secret_access_key,
            aws_session_token=k.session_token,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )

    def buckets(self) -> tuple[str, str]:
        """A fresh (landing, lake) pair of bucket names, created."""
        n = next(_names)
        landing, lake = f"landing-{n}", f"lake-{n}"
        c = self.client()
        c.create_bucket(Bucket=landing)
        c.create_bucket(Bucket=lake)
        return landing, lake

    def keys_in(self, bucket: str) -> set[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return {o["Key"] for p in pages for o in p.get("Contents", []) or []}


def start_s3_env() -> S3Env:
    server = LocalS3Server().start()
    try:
        anon = Keys("bootstrap", "bootstrap")  # accepted only while auth is off
        iam = boto3.session.Session().client(
            "iam",
            endpoint_url=server.endpoint,
            region_name=REGION,
            aws_access_key_id=anon.access_key_id,
            aws_secret_access_key=anon.secret_access_key,
        )

        def user(name: str, statements: list[dict[str, Any]]) -> Keys:
            iam.create_user(UserName=name)
            iam.put_user_policy(UserName=name, PolicyName=f"{name}-policy", PolicyDocument=_policy(statements))
            k = iam.create_access_key(UserName=name)["AccessKey"]
            return Keys(k["AccessKeyId"], k["SecretAccessKey"])

        admin = user("wap-admin", [_allow("*", ["*"])])
        reader = user("wap-reader", [_allow(_READ, _bucket_arns("landing-") + _bucket_arns("lake-"))])
        lake_only = user("wap-lake-only", [_allow(_READ + _WRITE, _bucket_arns("lake-"))])
        role = iam.create_role(
            RoleName="wap-ingest",
            AssumeRolePolicyDocument=_policy(
                [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]
            ),
        )["Role"]
        iam.put_role_policy(RoleName="wap-ingest", PolicyName="all", PolicyDocument=_policy([_allow("*", ["*"])]))
        server.enforce_auth(True)
        sts = boto3.session.Session().client(
            "sts",
            endpoint_url=server.endpoint,
            region_name=REGION,
            aws_access_key_id=admin.access_key_id,
            aws_secret_access_key=admin.secret_access_key,
        )
        c = sts.assume_role(RoleArn=role["Arn"], RoleSessionName="wapflow-tests")["Credentials"]
        temporary = Keys(c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"])
    except BaseException:
        server.stop()
        raise
    return S3Env(server, admin, reader, lake_only, temporary)


@pytest.fixture(scope="session")
def s3env() -> Iterator[S3Env]:
    """One moto server for the test session, on a free 127.0.0.1 port; stopped at the end."""
    env = start_s3_env()
    yield env
    env.server.stop()
