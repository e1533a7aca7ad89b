"""S3 from Python (boto3): listing, access checks, bucket creation.

Everything here runs before Spark touches a table, so that a wrong endpoint, unknown or wrong
credentials, a missing bucket or a missing permission is one clear message (exit code 3) and
nothing has been written. Messages name the bucket, the key and the S3 error code, never a secret.
"""

from __future__ import annotations

import difflib
import secrets
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from wapflow.errors import InputError, MissingInput, ServiceError, Throttled, WapError
from wapflow.redact import redact
from wapflow.storage.errors import MissingDependency, StorageError, StorageUnavailable
from wapflow.storage.files import (
    FileIdentity,
    FileList,
    Listing,
    SkippedFile,
    glob_literal_prefix,
    glob_regex,
    has_glob,
    skipped_as_bookkeeping,
)
from wapflow.storage.settings import S3Config, S3Location, parse_s3_uri

PROBE_PREFIX = ".wapflow-probe-"
_HEAD_WORKERS = 8
# S3's error codes for "too many requests": transient, unlike every other refusal.
_THROTTLED = (
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequests",
    "ServiceUnavailable",
    "503",
)

_CREDENTIAL_HINT = (
    "set [s3].access_key_id / secret_access_key in wap.toml, or AWS_ACCESS_KEY_ID / "
    "AWS_SECRET_ACCESS_KEY / AWS_PROFILE in the environment"
)


def _import_boto3() -> Any:
    try:
        import boto3
    except ImportError:
        raise MissingDependency(
            "S3 support needs boto3, which is not installed",
            hint='pip install "wapflow[s3]"',
        ) from None
    return boto3


# S3Config.connection()'s names as boto3's client arguments.
_BOTO_NAMES = {
    "endpoint": "endpoint_url",
    "region": "region_name",
    "access_key_id": "aws_access_key_id",
    "secret_access_key": "aws_secret_access_key",
    "session_token": "aws_session_token",
}


class S3Store:
    """One endpoint and one set of credentials (the [s3] section), any number of buckets."""

    def __init__(self, settings: S3Config | None = None) -> None:
        self.settings = settings or S3Config()
        self._client: Any = None

    # --- client and errors ----------------------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.boto_client("s3")
        return self._client

    def boto_client(self, service: str) -> Any:
        """A boto3 client of this endpoint, region and credentials (S3, or SQS for its events)."""
        boto3 = _import_boto3()
        from botocore.config import Config

        s = self.settings
        kw: dict[str, Any] = {_BOTO_NAMES[k]: v for k, v in s.connection().items()}
        cfg = Config(
            s3={"addressing_style": "path" if s.uses_path_style() else "auto"},
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=5,
            read_timeout=60,
            user_agent_extra="wapflow",
        )
        return boto3.session.Session().client(service, config=cfg, **kw)

    def error_for(self, e: BaseException, *, action: str, bucket: str, key: str | None = None) -> WapError:
        """A botocore exception as a wapflow error: what was attempted, where, and what to do."""
        from botocore import exceptions as bx

        ep = self.settings.describe_endpoint()
        where = f"s3://{bucket}/{key}" if key else f"s3://{bucket}"
        if isinstance(e, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError, bx.HTTPClientError)):
            return StorageUnavailable(
                f"cannot reach the S3 endpoint {ep} (trying to {action} {where})",
                hint="check [s3].endpoint in wap.toml and that the S3 server is running and reachable",
            )
        if isinstance(e, (bx.NoCredentialsError, bx.PartialCredentialsError)):
            return StorageError(f"no S3 credentials found (trying to {action} {where})", hint=_CREDENTIAL_HINT)
        if isinstance(e, bx.NoRegionError):
            return StorageError("no AWS region configured", hint="set [s3].region in wap.toml or AWS_REGION")
        if not isinstance(e, bx.ClientError):
            text = redact(f"{type(e).__name__}: {e}", self.settings.secret_values())
            return StorageError(f"S3 request to {action} {where} failed: {text[:300]}")
        err = e.response.get("Error", {})
        code = str(err.get("Code") or "")
        status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in ("NoSuchBucket",) or (code in ("404", "NotFound") and key is None):
            return StorageError(
                f"bucket {bucket!r} does not exist at {ep}",
                hint="create it with `wap storage init` (it creates the lake bucket and [s3].landing), "
                "or fix the bucket name",
            )
        if code in ("NoSuchKey", "404", "NotFound"):
            return InputError(f"{where} does not exist", hint="check the key; `wap storage ls` lists a prefix")
        if code == "InvalidAccessKeyId":
            return StorageError(
                f"the S3 endpoint {ep} does not know the access key id in use (InvalidAccessKeyId; "
                f"trying to {action} {where})",
                hint=_CREDENTIAL_HINT,
            )
        if code == "SignatureDoesNotMatch":
            return StorageError(
                f"the S3 endpoint {ep} rejected the credentials: the secret key does not match the access "
                f"key id (SignatureDoesNotMatch; trying to {action} {where})",
                hint=_CREDENTIAL_HINT,
            )
        if code in ("ExpiredToken", "InvalidToken", "TokenRefreshRequired", "ExpiredTokenException"):
            return StorageError(
                f"the S3 session token was rejected ({code}; trying to {action} {where})",
                hint="refresh the temporary credentials ([s3].session_token or AWS_SESSION_TOKEN)",
            )
        if code in ("AccessDenied", "AllAccessDisabled", "403", "Forbidden") or status == 403:
            return StorageError(
                f"the credentials in use may not {action} {where} (AccessDenied at {ep})",
                hint=f"grant {_permission(action)} on {where} to this user or role, or use other credentials",
            )
        if code in ("PermanentRedirect", "301", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException"):
            return StorageError(
                f"bucket {bucket!r} is in another region than the one configured ({code})",
                hint="set [s3].region (or AWS_REGION) to the bucket's region",
            )
        message = redact(str(err.get("Message") or ""), self.settings.secret_values())
        if code in _THROTTLED or status == 503:
            return Throttled(
                f"the S3 endpoint {ep} asked to slow down ({code or status}; trying to {action} {where}), "
                "even after the client's retries",
                hint="retry later; nothing was published",
            )
        if status >= 500:
            return ServiceError(
                f"the S3 endpoint {ep} failed to {action} {where}: HTTP {status} {code} {message}".strip()[:400],
                hint="retry later; nothing was published",
            )
        return StorageError(f"S3 refused to {action} {where}: {code or status} {message}".strip()[:400])

    def _explain_forbidden(self, bucket: str, action: str, key: str | None) -> WapError:
        """HEAD answers carry no body, so a 400/403 hides whether the key, secret, token or a permission is wrong."""
        try:
            self.client.list_objects_v2(Bucket=bucket, MaxKeys=1)
        except Exception as e:  # noqa: BLE001 - boto3/botocore raise many types; error_for names the S3 condition
            return self.error_for(e, action=action, bucket=bucket, key=key)
        return StorageError(
            f"the credentials in use may not {action} {f's3://{bucket}/{key}' if key else f's3://{bucket}'} "
            f"(403 Forbidden at {self.settings.describe_endpoint()})",
            hint=f"grant {_permission(action)} to this user or role, or use other credentials",
        )

    def _head_error(self, e: BaseException, *, action: str, bucket: str, key: str | None = None) -> WapError:
        from botocore.exceptions import ClientError

        if isinstance(e, ClientError) and str(e.response.get("Error", {}).get("Code")) in ("400", "403", "Forbidden"):
            return self._explain_forbidden(bucket, action, key)
        return self.error_for(e, action=action, bucket=bucket, key=key)

    # --- buckets --------------------------------------------------------------------------------

    def bucket_exists(self, bucket: str) -> bool:
        """True/False for a bucket these credentials may see; other failures raise."""
        from botocore.exceptions import ClientError

        try:
            self.client.head_bucket(Bucket=bucket)
            return True
        except ClientError as e:
            if str(e.response.get("Error", {}).get("Code")) in ("404", "NoSuchBucket", "NotFound"):
                return False
            raise self._head_error(e, action="access bucket", bucket=bucket) from None
        except Exception as e:  # noqa: BLE001 - boto3/botocore raise many types; error_for names the S3 condition
            raise self.error_for(e, action="access bucket", bucket=bucket) from None

    def require_bucket(self, bucket: str) -> None:
        if not self.bucket_exists(bucket):
            raise self.error_for(_no_such_bucket(), action="access bucket", bucket=bucket)

    def create_bucket(self, bucket: str) -> None:
        region = self.settings.effective_region()
        kw: dict[str, Any] = {"Bucket": bucket}
        if region and region != "us-east-1":
            kw["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            self.client.create_bucket(**kw)
        except Exception as e:  # noqa: BLE001 - boto3/botocore raise many types; error_for names the S3 condition
            from botocore.exceptions import ClientError

            if isinstance(e, ClientError) and e.response.get("Error", {}).get("Code") == "BucketAlreadyOwnedByYou":
                return
            if isinstance(e, ClientError) and e.response.get("Error", {}).get("Code") == "BucketAlreadyExists":
                raise StorageError(
                    f"bucket {bucket!r} already exists and belongs to someone else",
                    hint="bucket names are global on AWS: pick another name",
                ) from None
            raise self.error_for(e, action="create bucket", bucket=bucket) from None

    # --- listing --------------------------------------------------------------------------------

    def _identity(self, loc: S3Location, key: str, size: int, etag: str, modified: datetime | None) -> FileIdentity:
        return FileIdentity(
            uri=f"{loc.scheme}://{loc.bucket}/{key}",
            size=int(size),
            version=str(etag or "").strip('"'),
            modified=(modified or datetime.fromtimestamp(0, tz=UTC)).astimezone(UTC),
        )

    def _list_prefix(self, loc: S3Location, prefix: str, *, limit: int | None = None) -> list[FileIdentity]:
        out: list[FileIdentity] = []
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=loc.bucket, Prefix=prefix, PaginationConfig={"MaxItems": limit} if limit else {}
            )
            for page in pages:
                for obj in page.get("Contents", []) or []:
                    key = obj["Key"]
                    if key.endswith("/"):
                        continue  # a "folder" marker, not a file
                    out.append(self._identity(loc, key, obj["Size"], obj.get("ETag", ""), obj.get("LastModified")))
        except Exception as e:  # noqa: BLE001 - boto3/botocore raise many types; error_for names the S3 condition
            raise self.error_for(e, action="list", bucket=loc.bucket, key=prefix or None) from None
        return out

    def _head_object(self, loc: S3Location, key: str) -> dict[str, Any] | None:
        """HEAD of the object, None if it does not exist (in a bucket that does); denied access raises."""
        from botocore.exceptions import ClientError

        try:
            return dict(self.client.head_object(Bucket=loc.bucket, Key=key))
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code"))
            if code in ("404", "NoSuchKey", "NotFound"):
                if not self.bucket_exists(loc.bucket):
                    raise self.error_for(_no_such_bucket(), action="read", bucket=loc.bucket) from None
                return None
            raise self._head_error(e, action="read", bucket=loc.bucket, key=key) from None
        except Exception as e:  # noqa: BLE001 - boto3/botocore raise many types; error_for names the S3 condition
            raise self.error_for(e, action="read", bucket=loc.bucket, key=key) from None

    def _head(self, loc: S3Location, key: str) -> FileIdentity | None:
        """The object's identity, None if it does not exist; denied access raises."""
        h = self._head_object(loc, key)
        if h is None:
            return None
        return self._identity(loc, key, h["ContentLength"], h.get("ETag", ""), h.get("LastModified"))

    def scan(self, location: str, *, what: str = "") -> Listing:
        """Objects under a prefix (recursively), matching a glob, or the one object named.

        The local rules, on keys: a key that exists is that object, whatever characters it holds;
        only a key that names nothing is a glob; otherwise it is a prefix ("folder"). Keys ending
        in '/' (folder markers) are no files; bookkeeping files are skipped and reported. `what`
        prefixes the message for a missing key ("source file s3://... does not exist").
        """
        loc = parse_s3_uri(location)
        if loc.key and has_glob(loc.key):
            # One listing answers both questions: is the text an existing key, and what does it match.
            fixed = glob_literal_prefix(loc.key)
            listed = self._list_prefix(loc, fixed)
            exact = [f for f in listed if f.key == loc.key]
            if exact:
                return Listing("file", exact)
            rx = glob_regex(loc.key)
            found = [f for f in listed if rx.match(f.key)]
            if not found:
                self.require_bucket(loc.bucket)
            base = fixed.rsplit("/", 1)[0] + "/" if "/" in fixed else ""
            return self._sift("glob", found, base, repr(location))
        named = bool(loc.key) and not loc.key.endswith("/")
        if named:
            one = self._head(loc, loc.key)
            if one is not None:
                return Listing("file", [one])
        prefix = loc.key + "/" if named else loc.key
        found = self._list_prefix(loc, prefix)
        if not found:
            self.require_bucket(loc.bucket)
            if named:  # neither an object nor a "folder": say so, as for a missing local path
                named_as = f"{what} {location}" if what else location
                raise MissingInput(f"{named_as} does not exist{self._nearby(loc)}", hint="check the key")
        return self._sift("folder", found, prefix, f"folder {location}")

    @staticmethod
    def _sift(kind: Literal["folder", "glob"], found: FileList, base: str, what: str) -> Listing:
        files: FileList = []
        skipped: list[SkippedFile] = []
        for f in found:
            skip = skipped_as_bookkeeping(f.uri, f.key[len(base) :], what)
            if skip is not None:
                skipped.append(skip)
            else:
                files.append(f)
        return Listing(kind, files, skipped)

    def list(self, location: str) -> FileList:
        return self.scan(location).files

    def check_readable(self, files: FileList) -> None:
        """Listing needs s3:ListBucket, reading needs s3:GetObject: HEAD each file to know before writing."""
        if len(files) == 1:
            self._head(parse_s3_uri(files[0].uri), files[0].key)
            return
        with ThreadPoolExecutor(max_workers=_HEAD_WORKERS) as pool:
            list(pool.map(lambda f: self._head(parse_s3_uri(f.uri), f.key), files))

    def _nearby(self, loc: S3Location) -> str:
        parent = loc.key.rsplit("/", 1)[0] + "/" if "/" in loc.key else ""
        try:
            keys = [f.key for f in self._list_prefix(loc, parent, limit=1000)]
        except WapError:
            return ""
        if not keys:
            self.require_bucket(loc.bucket)
            return f" (nothing under s3://{loc.bucket}/{parent})" if parent else f" (bucket {loc.bucket} is empty)"
        close = difflib.get_close_matches(loc.key, keys, n=1, cutoff=0.7)
        return f" (did you mean {loc.scheme}://{loc.bucket}/{close[0]}?)" if close else ""

    def read_range(self, uri: str, spec: str) -> bytes:
        """The bytes of one HTTP range of the object (`0-3`: the first four; `-4`: the last four)."""
        loc = parse_s3_uri(uri)
        try:
            body: bytes = self.client.get_object(Bucket=loc.bucket, Key=loc.key, Range=f"bytes={spec}")["Body"].read()
        except Exception as e:  # noqa: BLE001 - boto3/botocore raise many types; error_for names the S3 condition
            raise self.error_for(e, action="read", bucket=loc.bucket, key=loc.key) from None
        return body

    def read(self, uri: str) -> bytes:
        """A whole (small) object, e.g. a table's metadata file."""
        loc = parse_s3_uri(uri)
        try:
            body: bytes = self.client.get_object(Bucket=loc.bucket, Key=loc.key)["Body"].read()
        except Exception as e:  # noqa: BLE001 - boto3/botocore raise many types; error_for names the S3 condition
            raise self.error_for(e, action="read", bucket=loc.bucket, key=loc.key) from None
        return body

    def read_if_exists(self, uri: str) -> bytes | None:
        """read(), or None when the key does not exist (a missing bucket or denied access still raise)."""
        loc = parse_s3_uri(uri)
        if self._head(loc, loc.key) is None:
            return None
        return self.read(uri)

    def user_metadata(self, uri: str) -> dict[str, str] | None:
        """The object's user metadata (x-amz-meta-*, names lower-cased as S3 keeps them); None if no object."""
        loc = parse_s3_uri(uri)
        h = self._head_object(loc, loc.key)
        return None if h is None else {str(k).lower(): str(v) for k, v in (h.get("Metadata") or {}).items()}

    def chunks(self, uri: str) -> Iterator[bytes]:
        """An object's content in 1 MiB chunks, streamed (a checksum of a file of any size)."""
        loc = parse_s3_uri(uri)
        try:
            body = self.client.get_object(Bucket=loc.bucket, Key=loc.key)["Body"]
            yield from body.iter_chunks(1 << 20)
        except Exception as e:  # noqa: BLE001 - boto3/botocore raise many types; error_for names the S3 condition
            raise self.error_for(e, action="read", bucket=loc.bucket, key=loc.key) from None

    # --- whole objects moved: a landed file adopted into a table (wapflow.pipeline.steps.adopt) ----------

    def copy_if(self, uri: str, etag: str, to: str) -> bool:
        """A server-side copy of the object, on the condition that its ETag is still `etag`; False when it is
        not (the object was replaced since it was listed)."""
        src, dst = parse_s3_uri(uri), parse_s3_uri(to)
        extra = {"CopySourceIfMatch": f'"{etag}"'}
        return self._if_unchanged(
            lambda: self.client.copy({"Bucket": src.bucket, "Key": src.key}, dst.bucket, dst.key, ExtraArgs=extra),
            action="copy",
            uri=uri,
        )

    def download_if(self, uri: str, etag: str, path: Path) -> bool:
        """The object into a local file, on the condition that its ETag is still `etag`; False when it is not
        (nothing is written then)."""
        src = parse_s3_uri(uri)

        def download() -> None:
            body = self.client.get_object(Bucket=src.bucket, Key=src.key, IfMatch=f'"{etag}"')["Body"]
            with open(path, "wb") as out:
                shutil.copyfileobj(body, out, 8 * 2**20)

        return self._if_unchanged(download, action="read", uri=uri)

    def upload(self, path: str | Path, to: str) -> None:
        """A local file as an object (boto3's managed upload: in parts when it is large)."""
        dst = parse_s3_uri(to)
        try:
            self.client.upload_file(str(path), dst.bucket, dst.key)
        except Exception as e:
            raise self.error_for(e, action="write", bucket=dst.bucket, key=dst.key) from e

    def delete(self, uri: str) -> None:
        loc = parse_s3_uri(uri)
        self.client.delete_object(Bucket=loc.bucket, Key=loc.key)

    def _if_unchanged(self, call: Callable[[], object], *, action: str, uri: str) -> bool:
        try:
            call()
        except Exception as e:
            if "PreconditionFailed" in str(e) or "412" in str(e):
                return False
            loc = parse_s3_uri(uri)
            raise self.error_for(e, action=action, bucket=loc.bucket, key=loc.key) from e
        return True

    # --- access checks ----------------------------------------------------------------------------

    def check_read(self, location: str) -> int:
        """List the prefix and read one byte of its first object; the number of objects seen (at most 1)."""
        loc = parse_s3_uri(location)
        self.require_bucket(loc.bucket)
        first = self._list_prefix(loc, loc.key, limit=1)
        if first:
            try:
                self.client.get_object(Bucket=loc.bucket, Key=first[0].key, Range="bytes=0-0")["Body"].read()
            except Exception as e:  # noqa: BLE001 - boto3/botocore raise many types; error_for names the S3 condition
                raise self.error_for(e, action="read", bucket=loc.bucket, key=first[0].key) from None
        return len(first)

    def check_write(self, location: str) -> None:
        """Write, read back and delete a probe object under the prefix: the same calls Iceberg makes."""
        loc = parse_s3_uri(location)
        self.require_bucket(loc.bucket)
        prefix = loc.key.rstrip("/")
        key = (prefix + "/" if prefix else "") + PROBE_PREFIX + secrets.token_hex(6)
        body = b"wapflow write probe; safe to delete\n"
        steps: tuple[tuple[str, Callable[[], object]], ...] = (
            ("write", lambda: self.client.put_object(Bucket=loc.bucket, Key=key, Body=body)),
            ("read", lambda: self.client.get_object(Bucket=loc.bucket, Key=key)["Body"].read()),
            ("delete", lambda: self.client.delete_object(Bucket=loc.bucket, Key=key)),
        )
        for action, call in steps:
            try:
                call()
            except Exception as e:  # noqa: BLE001 - boto3/botocore raise many types; error_for names the S3 condition
                raise self.error_for(
                    e, action=action, bucket=loc.bucket, key=(prefix + "/") if prefix else None
                ) from None


def _permission(action: str) -> str:
    return {
        "list": "s3:ListBucket",
        "access bucket": "s3:ListBucket",
        "read": "s3:GetObject",
        "write": "s3:PutObject",
        "delete": "s3:DeleteObject",
        "create bucket": "s3:CreateBucket",
    }.get(action, "the needed S3 permission")


def _no_such_bucket() -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": "NoSuchBucket", "Message": ""}}, "HeadBucket")
