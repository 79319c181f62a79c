"""S3 specifics of the trace store: URI checks, settings from the AWS environment, immutable puts.

Where the settings come from — the standard AWS environment and config files only, never the store
URI, the experiment settings or the catalog (a URI carrying credentials, an endpoint or any query
parameter is refused with a ConfigError). The names read, in every process that opens an ``s3://``
store (the driver and each Ray worker):

  AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL  endpoint of an S3-compatible server (the first wins; else AWS)
  AWS_REGION, AWS_DEFAULT_REGION         region (the first wins; else the profile's; else us-east-1)
  AWS_PROFILE, AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE     a profile (keys, region, endpoint_url)
  AWS_CA_BUNDLE, AWS_EC2_METADATA_DISABLED                      TLS trust, instance-metadata lookups
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN   static or temporary credentials (secret)

Ray workers: a local Ray started by the job inherits the driver's environment. On a cluster the
non-secret names travel in the Ray ``runtime_env`` ``env_vars`` (``forwarded_env()`` gives them); the
secret ones do not — a runtime env is stored with the job and shown on the dashboard — so the nodes
carry credentials themselves (instance profile / IRSA, or a profile file or Secret-provided variables).

boto3 resolves endpoint, region and credentials (its standard chain, profiles included). pyarrow 26's
``S3FileSystem`` does not read AWS_ENDPOINT_URL (measured: it went to ``<bucket>.s3.amazonaws.com``),
so the endpoint and region are passed to it explicitly; its credentials come from the same standard
chain (environment, profile files, instance roles — refreshed by the AWS SDK, and never held in the
filesystem object, which therefore pickles without secrets).

Writes — ``S3Objects.put`` writes the final key directly (S3 has no rename) with ``If-None-Match: *``:
an existing object is never replaced (412 → FileExistsError) and a single PUT is all-or-nothing, so no
half-written object is ever visible. Objects over ``MULTIPART_THRESHOLD`` go as a multipart upload,
invisible until completed (the completion also carries If-None-Match) and aborted on failure;
``remove_incomplete`` aborts uploads a crashed writer left. Transient failures (connection refused or
cut, timeouts, 5xx, SlowDown) are retried with exponential backoff for at most ``RETRY_DEADLINE_S``.
A retried request whose first try landed although its answer was lost meets 412 (or NoSuchUpload for a
multipart completion): the stored object is then compared with ours (size, then ETag, else the bytes)
and an identical one counts as our write — never a duplicate, never an error.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from mirrorscan.grid.errors import ConfigError

log = logging.getLogger(__name__)

SETTINGS_ENV_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE",
                     "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CA_BUNDLE", "AWS_EC2_METADATA_DISABLED")
"""Non-secret environment variables an ``s3://`` store reads (directly or through boto3/pyarrow)."""
SECRET_ENV_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
"""The credential variables it reads: never forwarded, logged or stored."""
ENV_VARS = SETTINGS_ENV_VARS + SECRET_ENV_VARS
"""Every environment variable an ``s3://`` store reads."""
MULTIPART_THRESHOLD = 64 << 20
"""Bytes above which an object goes as a multipart upload (a single PUT is fine, and atomic, below)."""
MULTIPART_PART_SIZE = 16 << 20
"""Bytes per uploaded part of a multipart upload (S3's minimum is 5 MiB except for the last part)."""
RETRY_DEADLINE_S = 120.0
"""Seconds a write keeps retrying transient failures (a server restart takes a few seconds)."""
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.2, 5.0
"""Backoff between retries: doubles from the first to the max, ±25 % jitter, in seconds."""
RETRYABLE_CODES = {"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "OperationAborted",
                   "ConditionalRequestConflict", "RequestTimeTooSkewed"}
CREDENTIAL_CODES = {"InvalidAccessKeyId": "AWS_ACCESS_KEY_ID", "SignatureDoesNotMatch": "AWS_SECRET_ACCESS_KEY",
                    "InvalidToken": "AWS_SESSION_TOKEN", "ExpiredToken": "AWS_SESSION_TOKEN"}
CREDENTIAL_FIX = ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment of every "
                  "process that opens the store (on a Ray cluster: the nodes' own environment, instance profile or "
                  "IRSA, never the job's runtime env, which the dashboard shows); never in the store URI")


def forwarded_env(environ: dict | None = None) -> dict[str, str]:
    """The non-secret AWS settings of this process (``SETTINGS_ENV_VARS`` that are set), for a Ray
    ``runtime_env={"env_vars": ...}``; credentials are left out (the nodes hold their own)."""
    environ = os.environ if environ is None else environ
    return {k: environ[k] for k in SETTINGS_ENV_VARS if environ.get(k)}


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` → (bucket, prefix without slashes at either end); refuses credentials,
    endpoints or options in the URI with a ConfigError naming the part and the environment variable to use."""
    parts = urlsplit(uri)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ConfigError("", "store", f"the S3 URI carries credentials ({parts.scheme}://…@{parts.hostname}/…)",
                          "remove them from the URI; " + CREDENTIAL_FIX)
    if parts.query:
        names = sorted({kv.split("=", 1)[0] for kv in parts.query.split("&") if kv})
        raise ConfigError("", "store", f"the S3 URI carries query parameters ({', '.join(names)}); endpoint, "
                          "region and credentials never go in the URI",
                          "use s3://bucket/prefix and set AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3), AWS_REGION "
                          "and AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment")
    if parts.fragment:
        raise ConfigError("", "store", "the S3 URI has a '#' fragment", "use s3://bucket/prefix")
    bucket = parts.netloc
    if not bucket or ":" in bucket:
        raise ConfigError("", "store", f"no valid bucket in {uri!r}" + (" (a port means an endpoint)" if ":" in bucket else ""),
                          "use s3://bucket/prefix; an S3-compatible server's endpoint goes in AWS_ENDPOINT_URL")
    return bucket, parts.path.strip("/")


@dataclass(frozen=True)
class S3Settings:
    """Where an S3 store lives, resolved from the AWS environment (no secrets held)."""

    endpoint_url: str
    """Endpoint URL boto3 resolved (AWS's own when no AWS_ENDPOINT_URL* / profile endpoint is set)."""
    region: str
    """AWS region (AWS_REGION, else AWS_DEFAULT_REGION, else the profile's, else us-east-1)."""
    custom_endpoint: bool
    """True for an S3-compatible server outside AWS (pyarrow then gets ``endpoint_override``)."""


_LOADER = None
"""botocore's data loader (service models, endpoint rules), shared by every session of this process:
loading them is most of the 1-2 s a new client costs. Credentials are not shared: each session reads
the environment afresh."""


def _session(region: str | None = None):
    """A new boto3 session (fresh credential and config lookup) reusing this process's loaded models."""
    import boto3
    import botocore.session

    global _LOADER
    core = botocore.session.get_session()
    if _LOADER is None:
        _LOADER = core.get_component("data_loader")
    else:
        core.register_component("data_loader", _LOADER)
    return boto3.Session(botocore_session=core, region_name=region)


def resolve_settings() -> S3Settings:
    """Endpoint and region from the standard AWS environment and config (through boto3)."""
    region = (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or _session().region_name
              or "us-east-1")
    endpoint = boto3_client(S3Settings("", region, False)).meta.endpoint_url
    host = urlsplit(endpoint).hostname or ""
    custom = not (host.endswith(".amazonaws.com") or host.endswith(".amazonaws.com.cn"))
    if custom and urlsplit(endpoint).path.strip("/"):
        raise ConfigError("", "AWS_ENDPOINT_URL", f"the endpoint {endpoint!r} has a path",
                          "set AWS_ENDPOINT_URL to scheme://host:port only")
    return S3Settings(endpoint_url=endpoint, region=region, custom_endpoint=custom)


def s3_filesystem(settings: S3Settings):
    """A pyarrow ``S3FileSystem`` for ``settings`` (credentials from the AWS SDK's standard chain)."""
    import pyarrow.fs as pafs

    kwargs: dict = {"region": settings.region,
                    "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=5)}
    if settings.custom_endpoint:
        parts = urlsplit(settings.endpoint_url)
        kwargs.update(endpoint_override=parts.netloc, scheme=parts.scheme or "https")
    return pafs.S3FileSystem(**kwargs)


def boto3_client(settings: S3Settings):
    """A boto3 S3 client for ``settings`` (no endpoint: the one the environment names, else AWS's);
    botocore's own retries are off (``S3Objects`` retries, and must
    know whether an earlier try of a request may have landed)."""
    from botocore.config import Config

    return _session(settings.region).client(
        "s3", endpoint_url=settings.endpoint_url or None,
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=120))


def _md5_etag(data: bytes, part_size: int | None) -> str:
    """The ETag S3 gives ``data``: MD5 hex of a single PUT, or MD5 of the parts' MD5s + ``-N`` for multipart."""
    if part_size is None:
        return hashlib.md5(data).hexdigest()
    digests = [hashlib.md5(data[i:i + part_size]).digest() for i in range(0, len(data), part_size)]
    return f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"


def _response(exc: Exception) -> dict:
    response = getattr(exc, "response", None)   # botocore ClientError only; others may carry None
    return response if isinstance(response, dict) else {}


def _code(exc: Exception) -> str:
    return str(_response(exc).get("Error", {}).get("Code", ""))


def _status(exc: Exception) -> int:
    return int(_response(exc).get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def _transient(exc: Exception) -> bool:
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError, SSLError

    if isinstance(exc, SSLError):
        return False
    if isinstance(exc, (ConnectionError, HTTPClientError)):
        return True
    return isinstance(exc, ClientError) and (_code(exc) in RETRYABLE_CODES or _status(exc) >= 500)


def user_error(exc: Exception, bucket: str) -> ConfigError | None:
    """A ConfigError for a refusal the user can fix (bad credentials, missing bucket), else None."""
    from botocore.exceptions import NoCredentialsError, PartialCredentialsError

    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return ConfigError("", "AWS_ACCESS_KEY_ID", f"no S3 credentials found ({exc})", CREDENTIAL_FIX)
    code = _code(exc)
    if code in CREDENTIAL_CODES:
        return ConfigError("", CREDENTIAL_CODES[code], f"the S3 server refused the credentials ({code})", CREDENTIAL_FIX)
    if code == "NoSuchBucket":
        return ConfigError("", "store", f"bucket {bucket!r} does not exist at this endpoint",
                           "create the bucket, or fix the store URI or AWS_ENDPOINT_URL")
    return None


class S3Objects:
    """Immutable objects in S3 (path = ``bucket/key``): put without overwrite, retried; incomplete uploads."""

    def __init__(self, settings: S3Settings):
        """Hold the settings; the boto3 client is made on first use, once per process."""
        self.settings = settings
        self.multipart_threshold = MULTIPART_THRESHOLD
        self.part_size = MULTIPART_PART_SIZE
        self.retry_deadline_s = RETRY_DEADLINE_S
        self._client = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_client": None}   # clients do not pickle; each process makes its own

    @property
    def client(self):
        """This process's boto3 client."""
        if self._client is None:
            self._client = boto3_client(self.settings)
        return self._client

    def retrying(self, what: str, call: Callable, bucket: str = ""):
        """Run ``call(try_number)`` (0 first) until it succeeds or fails for good: transient errors are
        retried with backoff for at most ``retry_deadline_s`` seconds; user errors become ConfigError."""
        deadline = time.monotonic() + self.retry_deadline_s
        delay = BACKOFF_FIRST_S
        for attempt in range(10_000):
            try:
                return call(attempt)
            except Exception as exc:  # noqa: BLE001 - sorted into retryable or not below
                problem = user_error(exc, bucket)
                if problem is not None:
                    raise problem from exc
                if not _transient(exc) or time.monotonic() + delay > deadline:
                    raise
                log.warning("S3 %s failed (%s: %s); retry %d in %.1f s", what, type(exc).__name__,
                            _code(exc) or exc, attempt + 1, delay)
                time.sleep(delay * random.uniform(0.75, 1.25))
                delay = min(delay * 2, BACKOFF_MAX_S)
        raise AssertionError("unreachable")

    def check_bucket(self, bucket: str, prefix: str) -> None:
        """Fail early (ConfigError) when the bucket is missing or the credentials are refused."""
        self.retrying("check", lambda _: self.client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1),
                      bucket)

    def _identical(self, bucket: str, key: str, data: bytes, part_size: int | None) -> bool:
        """Whether the stored object at ``key`` holds exactly ``data`` (size, ETag, else the bytes)."""
        head = self.retrying("head", lambda _: self.client.head_object(Bucket=bucket, Key=key), bucket)
        if head["ContentLength"] != len(data):
            return False
        if head.get("ETag", "").strip('"') == _md5_etag(data, part_size):
            return True
        body = self.retrying("get", lambda _: self.client.get_object(Bucket=bucket, Key=key)["Body"].read(), bucket)
        return body == data

    def _exists_error(self, bucket: str, key: str) -> FileExistsError:
        return FileExistsError(f"s3://{bucket}/{key} exists; objects in the store are never overwritten")

    def put(self, path: str, data: bytes) -> None:
        """Store ``data`` at ``path`` (``bucket/key``) unless an object is there (FileExistsError).
        Atomic: readers see the whole object or none of it."""
        bucket, key = path.split("/", 1)
        if len(data) > self.multipart_threshold:
            return self._put_multipart(bucket, key, data)

        def attempt(n: int) -> None:
            try:
                self.client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            except Exception as exc:
                if _status(exc) == 412:
                    if n > 0 and self._identical(bucket, key, data, None):
                        log.info("S3 put of %s/%s landed on an earlier try; kept it", bucket, key)
                        return
                    raise self._exists_error(bucket, key) from None
                raise

        self.retrying(f"put {key}", attempt, bucket)

    def _put_multipart(self, bucket: str, key: str, data: bytes) -> None:
        """A multipart upload of ``data``: invisible until completed, completed with If-None-Match, aborted
        on any failure."""
        upload_id = self.retrying(f"start upload {key}", lambda _: self.client.create_multipart_upload(
            Bucket=bucket, Key=key)["UploadId"], bucket)
        try:
            parts = []
            for number, lo in enumerate(range(0, len(data), self.part_size), start=1):
                chunk = data[lo:lo + self.part_size]
                etag = self.retrying(f"upload part {number} of {key}", lambda _: self.client.upload_part(
                    Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=chunk)["ETag"], bucket)
                parts.append({"PartNumber": number, "ETag": etag})

            def complete(n: int) -> None:
                try:
                    self.client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id,
                                                          MultipartUpload={"Parts": parts}, IfNoneMatch="*")
                except Exception as exc:
                    if _status(exc) == 412 or (n > 0 and _code(exc) == "NoSuchUpload"):
                        if n > 0 and self._identical(bucket, key, data, self.part_size):
                            return
                        raise self._exists_error(bucket, key) from None
                    raise

            self.retrying(f"complete upload {key}", complete, bucket)
            upload_id = None
        finally:
            if upload_id is not None:
                self.abort(bucket, key, upload_id)

    def abort(self, bucket: str, key: str, upload_id: str) -> None:
        """Abort one multipart upload (its parts are dropped; an already finished one is left alone)."""
        try:
            self.retrying(f"abort upload {key}", lambda _: self.client.abort_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id), bucket)
        except Exception as exc:  # noqa: BLE001 - the write's own error matters more; cleanup retries later
            if _code(exc) != "NoSuchUpload":
                log.warning("could not abort upload %s of s3://%s/%s: %s", upload_id, bucket, key, exc)

    def remove_incomplete(self, folder: str) -> list[str]:
        """Abort every unfinished multipart upload under ``folder`` (``bucket/prefix``); return their paths."""
        bucket, _, prefix = folder.partition("/")
        prefix = prefix.rstrip("/") + "/" if prefix else ""
        pages = self.retrying("list uploads", lambda _: list(self.client.get_paginator("list_multipart_uploads")
                                                            .paginate(Bucket=bucket, Prefix=prefix)), bucket)
        removed = []
        for page in pages:
            for upload in page.get("Uploads", []):
                self.abort(bucket, upload["Key"], upload["UploadId"])
                removed.append(f"{bucket}/{upload['Key']}")
        return sorted(removed)

    def delete(self, path: str) -> None:
        """Delete one object (used only to move an unreadable part into quarantine)."""
        bucket, key = path.split("/", 1)
        self.retrying(f"delete {key}", lambda _: self.client.delete_object(Bucket=bucket, Key=key), bucket)
