"""The S3 backend (AWS S3, SeaweedFS, MinIO, ...), on boto3.

Create-once is ``PutObject`` with ``If-None-Match: *`` and compare-and-swap is ``PutObject``
with ``If-Match: <etag>``. botocore's own retries are off: every call goes through one
`RetryPolicy`, so attempts are bounded and every failure ends as a batchpoint error that
names the endpoint, the operation and the key.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import boto3
import botocore.exceptions as bce
import botocore.loaders
import botocore.session
from boto3.exceptions import RetriesExceededError, S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from batchpoint.errors import (
    BucketNotFound,
    ConfigError,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StorageAccessDenied,
    StorageError,
    StorageUnavailable,
)
from batchpoint.storage.base import ObjectInfo, ObjectStore, StoredObject
from batchpoint.storage.retry import RetryPolicy, call_with_retry

T = TypeVar("T")

MiB = 1024 * 1024
_MIN_PART = 5 * MiB  # S3 refuses smaller multipart parts (except the last one)
_MAX_PART = 5 * 1024 * MiB
_DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys per request
_DOWNLOAD_ROUNDS = 3
# Servers whose delimiter listings show prefixes of deleted objects (see list_dirs),
# recognised by their HTTP Server header.
_PHANTOM_PREFIX_SERVERS = ("SeaweedFS",)
_PHANTOM_LIST_PAGES = 2
_PROBE_THREADS = 8
# Enough pooled connections for the thread pools that the tasks and the transfer manager
# run; botocore's default of 10 makes extra threads wait and log pool-full warnings.
_POOL_CONNECTIONS = 32
# User metadata that marks one logical conditional write, so that a retry that finds
# the object already there can tell its own earlier attempt from a competing writer's.
_WRITE_ID = "bp-write-id"

_THROTTLING_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "ProvisionedThroughputExceededException",
    }
)
_TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        # A conditional write raced another write or a delete of the same key; AWS says
        # to retry, and the retry then either succeeds or gets a definite 412.
        "ConditionalRequestConflict",
    }
)
_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
_DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidToken",
        "ExpiredToken",
        "TokenRefreshRequired",
        "AllAccessDisabled",
        "403",
        "Forbidden",
    }
)
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
_TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    bce.EndpointConnectionError,
    bce.ConnectTimeoutError,
    bce.ReadTimeoutError,
    bce.ConnectionClosedError,
    bce.ProxyConnectionError,
    bce.IncompleteReadError,
    bce.ResponseStreamingError,
)

_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]?)(?:i?b)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1024, "m": MiB, "g": 1024 * MiB}


# --- settings --------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Settings:
    """How to reach the S3 service. `None` means "let boto3 decide": AWS_ENDPOINT_URL,
    AWS_ACCESS_KEY_ID, AWS_PROFILE, ~/.aws/config and the other standard sources."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None
    max_attempts: int = 5
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    multipart_threshold: int = 64 * MiB
    multipart_chunksize: int = 16 * MiB
    # 'path' | 'virtual' | 'auto'; None picks 'path' for a custom endpoint (S3-compatible
    # servers rarely have wildcard DNS for bucket subdomains) and 'auto' for AWS.
    addressing_style: str | None = None

    def __post_init__(self) -> None:
        if self.endpoint_url is not None:
            parsed = urlparse(self.endpoint_url)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise ConfigError(
                    f"S3 option endpoint_url='{self.endpoint_url}' is not an http(s) URL "
                    "(expected e.g. http://127.0.0.1:8333)"
                )
        if bool(self.access_key_id) != bool(self.secret_access_key):
            raise ConfigError(
                "S3 options access_key_id and secret_access_key must be given together"
            )
        if self.profile and self.access_key_id:
            raise ConfigError(
                "S3 options: give either profile or access_key_id/secret_access_key, not both"
            )
        if self.max_attempts < 1:
            raise ConfigError(f"S3 option max_attempts={self.max_attempts} must be at least 1")
        for name in ("connect_timeout", "read_timeout"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"S3 option {name}={getattr(self, name)} must be positive")
        if self.multipart_threshold < 1:
            raise ConfigError(
                f"S3 option multipart_threshold={self.multipart_threshold} must be positive"
            )
        if not _MIN_PART <= self.multipart_chunksize <= _MAX_PART:
            raise ConfigError(
                f"S3 option multipart_chunksize={self.multipart_chunksize} must be between "
                f"5 MiB ({_MIN_PART}) and 5 GiB ({_MAX_PART}): S3 refuses other part sizes"
            )
        if self.addressing_style not in (None, "path", "virtual", "auto"):
            raise ConfigError(
                f"S3 option addressing_style='{self.addressing_style}' must be one of "
                "path, virtual, auto"
            )

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> S3Settings:
        """Settings from string options (an Airflow connection's extras, CLI flags, ...).
        Empty values count as not given. Sizes accept suffixes: 8MiB, 8MB, 512k."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown S3 storage option(s) {', '.join(map(repr, unknown))}; "
                f"known options are {', '.join(known)}"
            )
        values: dict[str, Any] = {}
        for name, raw in options.items():
            if raw is None or (isinstance(raw, str) and not raw.strip()):
                continue
            text = str(raw).strip()
            if name == "max_attempts":
                values[name] = _parse_int(name, text)
            elif name in ("connect_timeout", "read_timeout"):
                values[name] = _parse_float(name, text)
            elif name in ("multipart_threshold", "multipart_chunksize"):
                values[name] = _parse_size(name, text)
            elif name == "addressing_style":
                values[name] = text.lower()
            else:
                values[name] = text
        return cls(**values)

    def effective_endpoint(self) -> str | None:
        return (
            self.endpoint_url
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
        )

    def effective_addressing_style(self) -> str:
        if self.addressing_style:
            return self.addressing_style
        return "path" if self.effective_endpoint() else "auto"


def _parse_int(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"S3 option {name}='{text}' is not a whole number") from None


def _parse_float(name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"S3 option {name}='{text}' is not a number of seconds") from None


def _parse_size(name: str, text: str) -> int:
    match = _SIZE.match(text)
    if not match:
        raise ConfigError(
            f"S3 option {name}='{text}' is not a size (use bytes or e.g. 8MiB, 64MB, 512KiB)"
        )
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


# --- error classification --------------------------------------------------------------


def _unwrap(exc: BaseException) -> BaseException:
    """The botocore error behind the transfer manager's wrappers."""
    if isinstance(exc, RetriesExceededError) and exc.last_exception is not None:
        return exc.last_exception
    if isinstance(exc, S3UploadFailedError) and exc.__context__ is not None:
        return exc.__context__
    return exc


def _code(exc: BaseException) -> str:
    if isinstance(exc, bce.ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def _status(exc: BaseException) -> int:
    if isinstance(exc, bce.ClientError):
        return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return 0


def is_retryable(exc: BaseException) -> bool:
    """Transient: throttling, 5xx, and network errors. Everything else is final."""
    exc = _unwrap(exc)
    if isinstance(exc, _TRANSIENT_ERRORS):
        return True
    if isinstance(exc, bce.ClientError):
        code = _code(exc)
        return (
            code in _THROTTLING_CODES
            or code in _TRANSIENT_CODES
            or _status(exc) in _TRANSIENT_STATUS
        )
    return False


def _is_precondition_failure(exc: BaseException) -> bool:
    return _code(exc) == "PreconditionFailed" or _status(exc) == 412


def _is_not_found(exc: BaseException) -> bool:
    return _code(exc) in _NOT_FOUND_CODES or (_status(exc) == 404 and _code(exc) != "NoSuchBucket")


def _etag(raw: str) -> str:
    # S3 quotes etags on the wire; the interface promises bare ones everywhere.
    return raw.strip().strip('"')


# --- the store -------------------------------------------------------------------------


class S3ObjectStore(ObjectStore):
    """Objects under ``s3://bucket/prefix``. Safe to share between threads (one lazily
    created boto3 client) and picklable (the client is dropped and re-created), so the
    same store can be shipped to Spark executors."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        settings: S3Settings | None = None,
        *,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not bucket:
            raise ConfigError("S3 bucket name is empty")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if ".." in self.prefix.split("/"):
            raise ConfigError(f"S3 prefix '{prefix}' must not contain '..'")
        self.settings = settings or S3Settings()
        self.retry = retry or RetryPolicy(max_attempts=self.settings.max_attempts)
        self.uri = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._session: boto3.session.Session | None = None
        self._client: Any = None
        self._bucket_checked = False

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_lock", "_session", "_client", "_bucket_checked"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.uri!r}, endpoint={self.endpoint!r})"

    # -- client -------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The boto3 S3 client (created on first use; thread-safe once created)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make_client()
        return self._client

    def _make_client(self) -> Any:
        s = self.settings
        core = botocore.session.Session()
        core.register_component("data_loader", _shared_loader())
        try:
            # Sessions are not thread-safe: this runs under self._lock.
            self._session = boto3.session.Session(
                botocore_session=core,
                aws_access_key_id=s.access_key_id,
                aws_secret_access_key=s.secret_access_key,
                aws_session_token=s.session_token,
                region_name=s.region,
                profile_name=s.profile,
            )
        except bce.ProfileNotFound as exc:
            raise ConfigError(f"S3 option profile='{s.profile}': {exc}") from None
        config = Config(
            connect_timeout=s.connect_timeout,
            read_timeout=s.read_timeout,
            # Not {"max_attempts": 1}: in a Config that key counts *retries*, so it would
            # still retry once behind our back. total_max_attempts counts the first try.
            retries={"total_max_attempts": 1, "mode": "standard"},
            s3={"addressing_style": s.effective_addressing_style()},
            max_pool_connections=_POOL_CONNECTIONS,
        )
        return self._session.client("s3", endpoint_url=s.endpoint_url, config=config)

    @property
    def endpoint(self) -> str:
        if self._client is not None:
            return str(self._client.meta.endpoint_url)
        return self.settings.effective_endpoint() or "AWS S3"

    def _transfer_config(self) -> TransferConfig:
        return TransferConfig(
            multipart_threshold=self.settings.multipart_threshold,
            multipart_chunksize=self.settings.multipart_chunksize,
            # The classic manager goes through self.client, so its calls share our
            # timeouts and are visible to botocore event hooks; CRT would bypass both.
            preferred_transfer_client="classic",
        )

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
            self._client = None
            self._session = None

    # -- keys ---------------------------------------------------------------------------

    def _full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _object_key(self, key: str) -> str:
        # Same rules as the local backend, so a key that works on one works on the other.
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise StorageError(f"invalid object key '{key}'")
        return self._full(key)

    def _relative(self, full_key: str) -> str:
        return full_key[len(self.prefix) + 1 :] if self.prefix else full_key

    # -- calling S3 ---------------------------------------------------------------------

    def _call(self, op: str, key: str, fn: Callable[[int], T]) -> T:
        """Run one logical operation with retries; translate whatever escapes."""
        try:
            return call_with_retry(fn, self.retry, is_retryable)
        except StorageError:
            raise
        except (bce.BotoCoreError, bce.ClientError, S3UploadFailedError, RetriesExceededError) as e:
            raise self._translate(op, key, e) from e

    def _translate(self, op: str, key: str, exc: BaseException) -> StorageError:
        inner = _unwrap(exc)
        where = f"{op} {self.child(key) if key else self.uri}"
        if isinstance(
            inner,
            bce.NoCredentialsError | bce.PartialCredentialsError | bce.CredentialRetrievalError,
        ):
            return StorageAccessDenied(
                f"{where}: no usable AWS credentials for bucket '{self.bucket}' "
                f"({inner}). Set access_key_id/secret_access_key in the storage options, "
                "or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in the environment, or "
                "AWS_PROFILE with ~/.aws/credentials"
            )
        if is_retryable(inner):
            return StorageUnavailable(
                f"S3 endpoint {self.endpoint} did not answer {where} after "
                f"{self.retry.max_attempts} attempt(s): {self._describe(inner)}"
            )
        code = _code(inner)
        if code == "NoSuchBucket":
            return BucketNotFound(
                f"bucket '{self.bucket}' does not exist at {self.endpoint}: "
                "create it or fix the storage URI"
            )
        if code in _DENIED_CODES or _status(inner) == 403:
            return StorageAccessDenied(
                f"{where}: access to bucket '{self.bucket}' at {self.endpoint} was refused "
                f"({self._describe(inner)}); credentials used: {self._credential_source()}"
            )
        return StorageError(f"{where} failed at {self.endpoint}: {self._describe(inner)}")

    @staticmethod
    def _describe(exc: BaseException) -> str:
        if isinstance(exc, bce.ClientError):
            error = exc.response.get("Error", {})
            message = error.get("Message") or ""
            return f"{error.get('Code') or _status(exc)}{': ' + message if message else ''}"
        return f"{type(exc).__name__}: {exc}"

    def _credential_source(self) -> str:
        s = self.settings
        if s.access_key_id:
            return f"access key '{_mask(s.access_key_id)}' from the storage options"
        if s.profile:
            return f"AWS profile '{s.profile}'"
        try:
            credentials = self._session.get_credentials() if self._session else None
        except bce.BotoCoreError:
            credentials = None
        if credentials is None:
            return "none found"
        method = getattr(credentials, "method", "unknown")
        label = {
            "env": "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY from the environment",
            "shared-credentials-file": "~/.aws/credentials",
            "config-file": "~/.aws/config",
            "iam-role": "the EC2 instance role",
            "container-role": "the container role",
            "assume-role": "an assumed role (~/.aws/config)",
            "sso": "AWS SSO",
        }.get(method, method)
        return f"access key '{_mask(credentials.access_key)}' from {label}"

    def _check_bucket(self) -> None:
        """A HEAD on a missing object and on a missing bucket both answer a bare 404,
        so the first such answer costs one HeadBucket to tell them apart."""
        if self._bucket_checked:
            return
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except bce.ClientError as exc:
            if _status(exc) == 404 or _code(exc) in ("NoSuchBucket", "404", "NotFound"):
                fake = bce.ClientError({"Error": {"Code": "NoSuchBucket"}}, "HeadBucket")
                raise self._translate("head", "", fake) from exc
            raise
        self._bucket_checked = True

    # -- reads --------------------------------------------------------------------------

    def get(self, key: str) -> StoredObject:
        full = self._object_key(key)

        def attempt(_n: int) -> StoredObject:
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=full)
                data = response["Body"].read()
            except bce.ClientError as exc:
                if _is_not_found(exc):
                    raise ObjectNotFound(key, self.uri) from None
                raise
            return StoredObject(key, data, _etag(response["ETag"]))

        return self._call("get", key, attempt)

    def head(self, key: str) -> ObjectInfo | None:
        full = self._object_key(key)

        def attempt(_n: int) -> ObjectInfo | None:
            try:
                response = self.client.head_object(Bucket=self.bucket, Key=full)
            except bce.ClientError as exc:
                if _is_not_found(exc):
                    self._check_bucket()
                    return None
                raise
            return ObjectInfo(key, int(response["ContentLength"]), _etag(response["ETag"]))

        return self._call("head", key, attempt)

    def _pages(self, op: str, prefix: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        # A hand-rolled paginator: each page is retried on its own, so a throttled page
        # 7 does not restart (or fail) a listing of thousands of keys.
        token: str | None = None
        while True:
            extra = {"ContinuationToken": token} if token else {}

            def attempt(_n: int, extra: dict[str, str] = extra) -> dict[str, Any]:
                return self.client.list_objects_v2(Bucket=self.bucket, **kwargs, **extra)

            page = self._call(op, prefix, attempt)
            yield page
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        found = [
            ObjectInfo(self._relative(item["Key"]), int(item["Size"]), _etag(item["ETag"]))
            for page in self._pages("list", prefix, Prefix=self._full(prefix))
            for item in page.get("Contents", [])
        ]
        # AWS lists in byte order, but SeaweedFS walks directory by directory ('d/a/1'
        # before 'd/a-b/x'): sorting here gives every backend the same order.
        found.sort(key=lambda info: info.key)
        yield from found

    def list_dirs(self, prefix: str) -> list[str]:
        full = self._full(prefix)
        candidates: list[str] = []
        server = ""
        for page in self._pages("list_dirs", prefix, Prefix=full, Delimiter="/"):
            candidates.extend(entry["Prefix"] for entry in page.get("CommonPrefixes", []))
            server = page.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("server", "")
        if candidates and server.startswith(_PHANTOM_PREFIX_SERVERS):
            candidates = self._drop_phantoms(prefix, full, candidates)
        return sorted(self._relative(p) for p in candidates)

    def _drop_phantoms(self, prefix: str, full: str, candidates: list[str]) -> list[str]:
        """SeaweedFS derives common prefixes from its directory tree and removes emptied
        directories only minutes later, so a prefix whose last object was deleted is
        still listed (AWS never lists it). Keep only prefixes that hold an object."""
        unconfirmed = set(candidates)
        # A page or two of the recursive listing settles a small tree in one go...
        complete = True
        for pages, page in enumerate(self._pages("list_dirs", prefix, Prefix=full), 1):
            for item in page.get("Contents", []):
                head, sep, _ = item["Key"][len(full) :].partition("/")
                if sep:
                    unconfirmed.discard(f"{full}{head}/")
            if not unconfirmed:
                break
            if pages == _PHANTOM_LIST_PAGES and page.get("IsTruncated"):
                complete = False
                break
        # ...and a big one is settled by one MaxKeys=1 probe per prefix still in doubt.
        if not complete and unconfirmed:
            doubtful = sorted(unconfirmed)
            with ThreadPoolExecutor(min(_PROBE_THREADS, len(doubtful))) as pool:
                found = pool.map(self._has_objects, doubtful)
                unconfirmed = {p for p, has in zip(doubtful, found, strict=True) if not has}
        return [p for p in candidates if p not in unconfirmed]

    def _has_objects(self, full_prefix: str) -> bool:
        def attempt(_n: int) -> bool:
            page = self.client.list_objects_v2(Bucket=self.bucket, Prefix=full_prefix, MaxKeys=2)
            # A directory marker (the key 'prefix/' itself) is not an object under it.
            return any(item["Key"] != full_prefix for item in page.get("Contents", []))

        return self._call("list_dirs", self._relative(full_prefix), attempt)

    # -- writes -------------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> str:
        full = self._object_key(key)

        def attempt(_n: int) -> str:
            response = self.client.put_object(Bucket=self.bucket, Key=full, Body=data)
            return _etag(response["ETag"])

        return self._call("put", key, attempt)

    def create(self, key: str, data: bytes) -> str:
        return self._conditional_put("create", key, data, {"IfNoneMatch": "*"})

    def replace(self, key: str, data: bytes, etag: str) -> str:
        return self._conditional_put("replace", key, data, {"IfMatch": f'"{_etag(etag)}"'})

    def _conditional_put(self, op: str, key: str, data: bytes, condition: dict[str, str]) -> str:
        full = self._object_key(key)
        write_id = uuid.uuid4().hex

        def lost() -> StorageError:
            return ObjectAlreadyExists(key) if op == "create" else PreconditionFailed(key)

        def attempt(n: int) -> str:
            try:
                response = self.client.put_object(
                    Bucket=self.bucket,
                    Key=full,
                    Body=data,
                    Metadata={_WRITE_ID: write_id},
                    **condition,
                )
            except bce.ClientError as exc:
                refused = _is_precondition_failure(exc) or (op == "replace" and _is_not_found(exc))
                if not refused:
                    if _code(exc) == "ConditionalRequestConflict" and n >= self.retry.max_attempts:
                        raise lost() from None
                    raise
                # A retry can be refused because an earlier attempt of ours landed and
                # only its answer was lost: then the write did happen.
                if n > 1 and (landed := self._landed(full, write_id, data)) is not None:
                    return landed
                raise lost() from None
            return _etag(response["ETag"])

        return self._call(op, key, attempt)

    def _landed(self, full: str, write_id: str, data: bytes) -> str | None:
        """The etag of the object if it is the one this logical write put there.
        Equal bytes alone would not do: two writers CAS-ing a counter from 5 to 6 write
        identical bytes, and only one of them may be told it succeeded."""
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=full)
            body = response["Body"].read()
        except bce.ClientError as exc:
            if _is_not_found(exc):
                return None
            raise
        if response.get("Metadata", {}).get(_WRITE_ID) == write_id and body == data:
            return _etag(response["ETag"])
        return None

    def delete(self, key: str) -> None:
        full = self._object_key(key)

        def attempt(_n: int) -> None:
            try:
                self.client.delete_object(Bucket=self.bucket, Key=full)
            except bce.ClientError as exc:
                if not _is_not_found(exc):
                    raise

        self._call("delete", key, attempt)

    def delete_many(self, keys: Iterable[str]) -> int:
        count = 0
        batch: list[str] = []
        for key in keys:
            batch.append(self._object_key(key))
            count += 1
            if len(batch) == _DELETE_BATCH:
                self._delete_batch(batch)
                batch = []
        if batch:
            self._delete_batch(batch)
        return count

    def _delete_batch(self, batch: list[str]) -> None:
        pending = list(batch)

        def attempt(_n: int) -> None:
            response = self.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in pending], "Quiet": True},
            )
            errors = [e for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            transient = [
                e
                for e in errors
                if e.get("Code") in _THROTTLING_CODES or e.get("Code") in _TRANSIENT_CODES
            ]
            if errors and len(transient) == len(errors):
                # Only the keys that failed for a passing reason go round again.
                pending[:] = [e["Key"] for e in transient]
                raise bce.ClientError(
                    {"Error": {"Code": transient[0]["Code"], "Message": "in DeleteObjects"}},
                    "DeleteObjects",
                )
            if errors:
                shown = "; ".join(
                    f"{self._relative(e.get('Key', '?'))}: {e.get('Code')} {e.get('Message', '')}"
                    for e in errors[:5]
                )
                raise StorageError(
                    f"delete_many under {self.uri} at {self.endpoint}: {len(errors)} of "
                    f"{len(batch)} objects were not deleted ({shown})"
                )

        first = self._relative(batch[0])
        self._call("delete_many", first, attempt)

    def upload_file(self, key: str, path: Path) -> ObjectInfo:
        full = self._object_key(key)
        config = self._transfer_config()

        def attempt(_n: int) -> None:
            self.client.upload_file(str(path), self.bucket, full, Config=config)

        self._call("upload_file", key, attempt)
        info = self.head(key)
        if info is None:  # deleted by someone else in between; S3 has no atomic answer
            raise ObjectNotFound(key, self.uri)
        return info

    def download_file(self, key: str, path: Path) -> ObjectInfo:
        full = self._object_key(key)
        config = self._transfer_config()

        def attempt(_n: int) -> None:
            try:
                self.client.download_file(self.bucket, full, str(path), Config=config)
            except bce.ClientError as exc:
                if _is_not_found(exc):
                    raise ObjectNotFound(key, self.uri) from None
                raise

        # The etag we return must be that of the bytes we wrote to `path`: an object
        # replaced mid-download is downloaded again.
        for _ in range(_DOWNLOAD_ROUNDS):
            before = self.head(key)
            if before is None:
                raise ObjectNotFound(key, self.uri)
            self._call("download_file", key, attempt)
            if self.head(key) == before:
                return before
        raise StorageError(
            f"download_file {self.child(key)}: the object kept changing while it was read "
            f"({_DOWNLOAD_ROUNDS} tries)"
        )


_LOADER: botocore.loaders.Loader | None = None
_LOADER_LOCK = threading.Lock()


def _shared_loader() -> botocore.loaders.Loader:
    """One botocore data loader for every store in the process. It caches the parsed
    service definitions, which are most of the cost of a new client (0.2 s against
    0.02 s): stores are unpickled afresh in every Spark task, each with its own client."""
    global _LOADER
    with _LOADER_LOCK:
        if _LOADER is None:
            _LOADER = botocore.loaders.create_loader()
        return _LOADER


def _mask(access_key: str) -> str:
    return access_key if len(access_key) <= 8 else f"{access_key[:4]}...{access_key[-4:]}"
