"""The [s3] section of wap.toml: one S3-compatible endpoint and its credentials.

Kept apart from wapflow.config (which re-exports it) so the storage code depends on nothing but
pydantic. Credentials are SecretStr: they print as '**********' in reprs, errors and dumps, and
wapflow hands them to boto3 and to the JVM only at the moment a client is built.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, SecretStr, field_validator, model_validator

from wapflow.errors import ConfigError

S3_SCHEMES = ("s3", "s3a")
SECRET_FIELDS = ("access_key_id", "secret_access_key", "session_token")
# S3 bucket naming rules (lowercase letters, digits, dots, hyphens; 3-63; no leading/trailing punctuation).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_ENDPOINT = re.compile(r"^(https?)://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(:\d{1,5})?/?$")


class S3Config(BaseModel):
    """Endpoint, region, addressing and credentials for the lake bucket and the landing bucket."""

    model_config = ConfigDict(extra="forbid")

    # S3-compatible server (MinIO, moto, Ceph, ...): "http://127.0.0.1:9000". Unset: AWS S3.
    endpoint: str | None = None
    # Unset: $AWS_REGION / $AWS_DEFAULT_REGION, else us-east-1 for a custom endpoint, else the SDKs decide.
    region: str | None = None
    # Path-style URLs (http://host/bucket/key). Unset: on for a custom endpoint, off for AWS.
    path_style: bool | None = None
    # Unset: the standard AWS credential chain (env vars, ~/.aws profile, SSO, instance/container role).
    access_key_id: SecretStr | None = None
    secret_access_key: SecretStr | None = None  # with access_key_id; never printed or stored
    session_token: SecretStr | None = None  # optional, with temporary keys
    # Where files land, "s3://landing-bucket/prefix": `wap storage init` creates and checks it.
    landing: str | None = None

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if "@" in v:
            raise ValueError("the endpoint must not carry credentials; use access_key_id / secret_access_key")
        if not _ENDPOINT.match(v):
            raise ValueError("must be http(s)://host[:port], e.g. 'http://127.0.0.1:9000'")
        return v.rstrip("/")

    @field_validator("landing")
    @classmethod
    def _landing(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parse_s3_uri(v, what="[s3].landing", error=ValueError)
        return v

    @model_validator(mode="after")
    def _keys(self) -> S3Config:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("access_key_id and secret_access_key go together (or leave both unset for the AWS chain)")
        if self.session_token is not None and self.access_key_id is None:
            raise ValueError("session_token needs access_key_id and secret_access_key")
        return self

    # --- derived settings ---------------------------------------------------------------------

    def uses_path_style(self) -> bool:
        return self.path_style if self.path_style is not None else self.endpoint is not None

    def effective_region(self) -> str | None:
        """The region both SDKs are given; None lets each SDK's own region chain decide."""
        if self.region:
            return self.region
        env = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if env:
            return env
        return "us-east-1" if self.endpoint else None

    def has_keys(self) -> bool:
        return self.access_key_id is not None

    def static_keys(self) -> tuple[str, str, str | None] | None:
        """(access key id, secret, session token or None) when wap.toml names both keys; None: the SDK's own
        credential chain decides (environment, profile, instance role)."""
        if self.access_key_id is None or self.secret_access_key is None:
            return None
        token = self.session_token.get_secret_value() if self.session_token is not None else None
        return self.access_key_id.get_secret_value(), self.secret_access_key.get_secret_value(), token

    def connection(self) -> dict[str, str]:
        """Endpoint, region and the static keys wap.toml names, under neutral names (endpoint, region,
        access_key_id, secret_access_key, session_token) each client maps to its own; what is absent is left
        out, so that client's own chain decides."""
        out: dict[str, str] = {}
        if self.endpoint:
            out["endpoint"] = self.endpoint
        region = self.effective_region()
        if region:
            out["region"] = region
        keys = self.static_keys()
        if keys is not None:
            out["access_key_id"], out["secret_access_key"] = keys[0], keys[1]
            if keys[2] is not None:
                out["session_token"] = keys[2]
        return out

    def secret_values(self) -> list[str]:
        """The configured secrets themselves, so error text can be scrubbed of them."""
        return [s.get_secret_value() for s in (self.access_key_id, self.secret_access_key, self.session_token) if s]

    def describe_endpoint(self) -> str:
        return self.endpoint or "AWS S3"


@dataclass(frozen=True)
class S3Location:
    scheme: str  # s3 | s3a, as the user wrote it
    bucket: str
    key: str  # may be empty (the bucket root) or end with '/'

    @property
    def uri(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}"


def is_s3_uri(text: str) -> bool:
    return any(text.startswith(f"{s}://") for s in S3_SCHEMES)


def parse_s3_uri(uri: str, *, what: str = "S3 location", error: type[Exception] = ConfigError) -> S3Location:
    """Split s3://bucket/key, rejecting bucket names S3 would refuse (before any request is made)."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in S3_SCHEMES:
        raise error(f"{what} {uri!r} is not an s3:// URI")
    bucket, _, key = rest.partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        msg = f"{what} {uri!r}: {bucket!r} is not a valid bucket name (3-63 lowercase letters, digits, '.' and '-')"
        if error is ConfigError:
            raise ConfigError(msg, hint="e.g. s3://landing-bucket/2026/11/*.parquet")
        raise error(msg)
    return S3Location(scheme, bucket, key)
