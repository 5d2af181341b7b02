"""The S3 backend (AWS S3, SeaweedFS, MinIO, ...), on boto3.

Create-once is ``PutObject`` with ``If-None-Match: *`` and compare-and-swap is ``PutObject``
with ``If-Match: <etag>``. Requests are retried by botocore's own retry mode (see
`retry`); every failure left after that ends as a batchpoint error that names the
endpoint, the operation and the key (see `errors`).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import boto3
import botocore.exceptions as bce
from boto3.exceptions import RetriesExceededError, S3UploadFailedError

from batchpoint.errors import (
    ConfigError,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StorageError,
)
from batchpoint.storage.base import ObjectInfo, ObjectStore, StoredObject
from batchpoint.storage.probe import probe_conditional_writes, probing
from batchpoint.storage.redaction import redact_uri
from batchpoint.storage.s3 import client as s3_client
from batchpoint.storage.s3 import errors
from batchpoint.storage.s3.errors import BodyBroke, body_broke, conflict, passing_delete
from batchpoint.storage.s3.retry import again
from batchpoint.storage.s3.settings import S3Settings

T = TypeVar("T")

_DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys per request
_DOWNLOAD_ROUNDS = 3
# Servers whose delimiter listings show prefixes of deleted objects (see list_dirs),
# recognised by their HTTP Server header.
_PHANTOM_PREFIX_SERVERS = ("SeaweedFS",)
_PHANTOM_LIST_PAGES = 2
_PROBE_THREADS = 8
# User metadata that marks one logical conditional write, so that a retry that finds
# the object already there can tell its own earlier attempt from a competing writer's.
_WRITE_ID = "bp-write-id"


class S3ObjectStore(ObjectStore):
    """Objects under ``s3://bucket/prefix``. Safe to share between threads (one lazily
    created boto3 client) and picklable (the client is dropped and re-created), so the
    same store can be shipped to Spark executors."""

    def __init__(self, bucket: str, prefix: str = "", settings: S3Settings | None = None) -> None:
        if not bucket:
            raise ConfigError("S3 bucket name is empty")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if ".." in self.prefix.split("/"):
            raise ConfigError(f"S3 prefix '{prefix}' must not contain '..'")
        self.settings = settings or S3Settings()
        self.uri = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._session: boto3.session.Session | None = None
        self._client: Any = None
        self._bucket_checked = False
        self._probe_lock = threading.Lock()
        self._probed = not self.settings.probe_conditional_writes

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in (
            "_lock",
            "_session",
            "_client",
            "_bucket_checked",
            "_probe_lock",
            "_probed",
        ):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def __repr__(self) -> str:
        return f"S3ObjectStore({redact_uri(self.uri)!r}, endpoint={self.shown_endpoint!r})"

    # -- client -------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The boto3 S3 client (created on first use; thread-safe once created)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._session, self._client = s3_client.make_client(self.settings)
        return self._client

    @property
    def endpoint(self) -> str:
        if self._client is not None:
            return str(self._client.meta.endpoint_url)
        return self.settings.effective_endpoint() or "AWS S3"

    @property
    def shown_endpoint(self) -> str:
        """The endpoint as messages show it: masked when it came from `${VAR}`."""
        return self.settings.shown_endpoint(self.endpoint)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
            self._client = None
            self._session = None

    def credential_source(self) -> str:
        """Which credentials the client signs with, for error messages (key masked)."""
        return s3_client.credential_source(self.settings, self._session)

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

    def _call(self, op: str, key: str, fn: Callable[[], T]) -> T:
        """Run one logical operation (botocore retries each request); translate
        whatever escapes."""
        try:
            return fn()
        except StorageError:
            raise
        except BodyBroke as e:
            raise errors.translate(self, op, key, e.error) from e.error
        except (bce.BotoCoreError, bce.ClientError, S3UploadFailedError, RetriesExceededError) as e:
            raise errors.translate(self, op, key, e) from e

    def _check_bucket(self) -> None:
        """A HEAD on a missing object and on a missing bucket both answer a bare 404,
        so the first such answer costs one HeadBucket to tell them apart."""
        if self._bucket_checked:
            return
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except bce.ClientError as exc:
            if errors.status(exc) == 404 or errors.code(exc) in ("NoSuchBucket", "404", "NotFound"):
                missing = errors.fake_error("NoSuchBucket", "", "HeadBucket")
                raise errors.translate(self, "head", "", missing) from exc
            raise
        self._bucket_checked = True

    # -- reads --------------------------------------------------------------------------

    def get(self, key: str) -> StoredObject:
        full = self._object_key(key)

        def attempt(_n: int) -> StoredObject:
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=full)
            except bce.ClientError as exc:
                if errors.is_not_found(exc):
                    raise ObjectNotFound(key, self.uri) from None
                raise
            try:
                data = response["Body"].read()
            except errors.BODY_ERRORS as exc:
                raise BodyBroke(exc) from exc
            return StoredObject(key, data, errors.etag(response["ETag"]))

        # botocore retried the request; a body that breaks off while read is ours to retry.
        return self._call("get", key, lambda: again(attempt, self._attempts, body_broke))

    def head(self, key: str) -> ObjectInfo | None:
        full = self._object_key(key)

        def attempt() -> ObjectInfo | None:
            try:
                response = self.client.head_object(Bucket=self.bucket, Key=full)
            except bce.ClientError as exc:
                if errors.is_not_found(exc):
                    self._check_bucket()
                    return None
                raise
            size = int(response["ContentLength"])
            return ObjectInfo(key, size, errors.etag(response["ETag"]))

        return self._call("head", key, attempt)

    @property
    def _attempts(self) -> int:
        return self.settings.max_attempts

    def _pages(self, op: str, prefix: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        # botocore's paginator: one request per page, each retried on its own, so a
        # throttled page 7 does not restart (or fail) a listing of thousands of keys.
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, **kwargs)
        iterator = iter(pages)
        while True:
            page = self._call(op, prefix, lambda: next(iterator, None))
            if page is None:
                return
            yield page

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        found = [
            ObjectInfo(self._relative(item["Key"]), int(item["Size"]), errors.etag(item["ETag"]))
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
        def attempt() -> bool:
            page = self.client.list_objects_v2(Bucket=self.bucket, Prefix=full_prefix, MaxKeys=2)
            # A directory marker (the key 'prefix/' itself) is not an object under it.
            return any(item["Key"] != full_prefix for item in page.get("Contents", []))

        return self._call("list_dirs", self._relative(full_prefix), attempt)

    # -- writes -------------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> str:
        full = self._object_key(key)

        def attempt() -> str:
            response = self.client.put_object(Bucket=self.bucket, Key=full, Body=data)
            return errors.etag(response["ETag"])

        return self._call("put", key, attempt)

    def create(self, key: str, data: bytes) -> str:
        return self._conditional_put("create", key, data, {"IfNoneMatch": "*"})

    def replace(self, key: str, data: bytes, etag: str) -> str:
        return self._conditional_put("replace", key, data, {"IfMatch": f'"{errors.etag(etag)}"'})

    def _ensure_probed(self) -> None:
        """Before the first conditional write of this store: does the endpoint honour
        the conditions at all? Only writers get here, so read-only commands never probe
        (and never write the probe's object)."""
        if self._probed or probing():  # done, or these are the probe's own writes
            return
        with self._probe_lock:  # concurrent first writers wait for one probe
            if not self._probed:
                probe_conditional_writes(self)
                self._probed = True

    def _conditional_put(self, op: str, key: str, data: bytes, condition: dict[str, str]) -> str:
        full = self._object_key(key)
        self._ensure_probed()
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
                refused = errors.is_precondition_failure(exc) or (
                    op == "replace" and errors.is_not_found(exc)
                )
                if not refused:
                    if conflict(exc) and n >= self._attempts:
                        raise lost() from None
                    raise
                # Why this stays ours and is not left to botocore: a conditional PUT that
                # was applied but whose reply was lost (a dropped connection) is retried
                # by botocore, and the retry is refused (412), because the first attempt
                # made the object exist or changed its etag. Only we can tell that our own
                # write landed: the object then carries this write's id and bytes.
                if (n > 1 or errors.retried(exc) > 0) and (
                    landed := self._landed(full, write_id, data)
                ) is not None:
                    return landed
                raise lost() from None
            return errors.etag(response["ETag"])

        return self._call(op, key, lambda: again(attempt, self._attempts, conflict))

    def _landed(self, full: str, write_id: str, data: bytes) -> str | None:
        """The etag of the object if it is the one this logical write put there.
        Equal bytes alone would not do: two writers CAS-ing a counter from 5 to 6 write
        identical bytes, and only one of them may be told it succeeded."""
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=full)
            body = response["Body"].read()
        except bce.ClientError as exc:
            if errors.is_not_found(exc):
                return None
            raise
        if response.get("Metadata", {}).get(_WRITE_ID) == write_id and body == data:
            return errors.etag(response["ETag"])
        return None

    def delete(self, key: str) -> None:
        full = self._object_key(key)

        def attempt() -> None:
            try:
                self.client.delete_object(Bucket=self.bucket, Key=full)
            except bce.ClientError as exc:
                if not errors.is_not_found(exc):
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
            failed = [e for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            passing = [e for e in failed if e.get("Code") in errors.PASSING_DELETE_CODES]
            if failed and len(passing) == len(failed):
                # A 200 reply botocore saw as a success: only the keys that failed for a
                # passing reason go round again.
                pending[:] = [e["Key"] for e in passing]
                raise errors.fake_error(passing[0]["Code"], "in DeleteObjects", "DeleteObjects")
            if failed:
                shown = "; ".join(
                    f"{self._relative(e.get('Key', '?'))}: {e.get('Code')} {e.get('Message', '')}"
                    for e in failed[:5]
                )
                raise StorageError(
                    f"delete_many under {self.uri} at {self.shown_endpoint}: {len(failed)} of "
                    f"{len(batch)} objects were not deleted ({shown})"
                )

        first = self._relative(batch[0])
        self._call("delete_many", first, lambda: again(attempt, self._attempts, passing_delete))

    def upload_file(self, key: str, path: Path) -> ObjectInfo:
        full = self._object_key(key)
        config = s3_client.transfer_config(self.settings)

        def attempt() -> None:
            self.client.upload_file(str(path), self.bucket, full, Config=config)

        self._call("upload_file", key, attempt)
        info = self.head(key)
        if info is None:  # deleted by someone else in between; S3 has no atomic answer
            raise ObjectNotFound(key, self.uri)
        return info

    def download_file(self, key: str, path: Path) -> ObjectInfo:
        full = self._object_key(key)
        config = s3_client.transfer_config(self.settings)

        def attempt() -> None:
            try:
                self.client.download_file(self.bucket, full, str(path), Config=config)
            except bce.ClientError as exc:
                if errors.is_not_found(exc):
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
