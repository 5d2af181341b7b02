"""What a Spark Connect client sends to a server it does not control.

Over Connect, batchpoint's Spark tasks run in the server's Python workers, in the
server's environment. So:
* the store settings travel with the task, resolved on the client (endpoint, region,
  frozen credentials from the client's boto3 chain): the server's AWS_* variables,
  profiles and instance role are never consulted;
* the client's batchpoint version travels too, and a worker that imports another
  version refuses the task (state formats and key hashing must match exactly);
* a `file://` root works only if client and server share the filesystem: a token the
  client writes must be visible to a one-row job on the server.
* every operator attempt runs under a job tag, so that a killed task's server-side work
  can be interrupted (`interrupt_attempt`, the Airflow on_kill).
"""

from __future__ import annotations

import functools
import logging
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

import batchpoint
from batchpoint.errors import ConfigError
from batchpoint.storage import ObjectStore, StoreRef
from batchpoint.storage.redaction import redact_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

PROBE_PREFIX = "_batchpoint/connect-probe"


class WorkerVersionMismatch(ConfigError):
    """The server's Python workers import another batchpoint than the client's."""


class RootNotShared(ConfigError):
    """A file:// root the Spark server cannot see."""


@dataclass(frozen=True)
class PinnedStoreRef(StoreRef):
    """A StoreRef that opens only in a process running the client's batchpoint version."""

    client_version: str = ""

    def open(self) -> ObjectStore:
        check_version(self.client_version)
        return super().open()


def check_version(client_version: str, running: str | None = None) -> None:
    running = batchpoint.__version__ if running is None else running
    if client_version and client_version != running:
        raise WorkerVersionMismatch(
            f"batchpoint version mismatch: the client runs {client_version} but the Spark "
            f"server's Python workers import {running}; install batchpoint {client_version} "
            "in the server's environment (and restart it)"
        )


def portable_store_ref(ref: StoreRef, *, client_version: str | None = None) -> PinnedStoreRef:
    """`ref` with everything the server would otherwise take from its own environment
    made explicit, and pinned to the client's batchpoint version."""
    version = batchpoint.__version__ if client_version is None else client_version
    options = dict(ref.options)
    if ref.uri.startswith("s3://"):
        options = _resolved_s3_options(ref.uri, options)
    return PinnedStoreRef(ref.uri, tuple(sorted(options.items())), version)


_PORTABLE_TTL = 300.0  # seconds a resolved ref is reused (frozen keys may rotate)
_portable: dict[StoreRef, tuple[float, PinnedStoreRef]] = {}


def for_workers(ref: StoreRef) -> StoreRef:
    """What to put in a Spark task's closure for `ref`: in a Spark Connect client
    process its portable, pinned form (the tasks run in the server's environment), else
    `ref` itself (classic Spark: executors share the driver's settings)."""
    import os

    if isinstance(ref, PinnedStoreRef) or "SPARK_CONNECT_MODE_ENABLED" not in os.environ:
        return ref
    now = time.monotonic()
    cached = _portable.get(ref)
    if cached is None or now - cached[0] > _PORTABLE_TTL:
        cached = _portable[ref] = (now, portable_store_ref(ref))
    return cached[1]


def _resolved_s3_options(uri: str, options: dict[str, str]) -> dict[str, str]:
    import boto3
    import botocore.exceptions

    from batchpoint.storage.s3 import S3Settings

    settings = S3Settings.from_options(options)
    endpoint = settings.effective_endpoint()
    if endpoint:
        options["endpoint_url"] = endpoint
    try:
        session = boto3.session.Session(profile_name=settings.profile)
    except botocore.exceptions.ProfileNotFound as exc:
        raise ConfigError(f"S3 option profile='{settings.profile}': {exc}") from None
    options["region"] = settings.region or session.region_name or "us-east-1"
    if not settings.access_key_id:
        credentials = session.get_credentials()
        if credentials is None:
            raise ConfigError(
                f"no S3 credentials for {uri} on this client (settings, AWS_* variables, "
                "profile or role): the Spark server is never asked for its own"
            )
        # Frozen: a rotating role gives keys valid for the task's length, not longer.
        frozen = credentials.get_frozen_credentials()
        options["access_key_id"] = frozen.access_key
        options["secret_access_key"] = frozen.secret_key
        if frozen.token:
            options["session_token"] = frozen.token
        options.pop("profile", None)
    return options


# -- the probe: version and shared filesystem, once per client session --------------------

_PROBE_SCHEMA = "problem string"


def _probe_task(
    ref: PinnedStoreRef, key: str, token: str, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        pass
    try:
        store = ref.open()
        found = store.get(key).data.decode() if store.exists(key) else None
        problem = "" if found == token else "missing"
    except WorkerVersionMismatch as exc:
        problem = f"version: {exc}"
    yield pa.RecordBatch.from_pydict({"problem": [problem]})


_prepared: dict[tuple[str, str, tuple[tuple[str, str], ...]], PinnedStoreRef] = {}


def prepare_remote(spark: SparkSession, ref: StoreRef) -> PinnedStoreRef:
    """The store ref to ship to `spark`'s workers, after checking once per session that
    they run this batchpoint version and see the root (a file:// root must be shared)."""
    pinned = ref if isinstance(ref, PinnedStoreRef) else portable_store_ref(ref)
    # The server's own id of the session changes when the server restarts (perhaps with
    # another batchpoint): the check runs again then.
    server_side = getattr(getattr(spark, "client", None), "_server_session_id", None)
    cache_key = (f"{getattr(spark, 'session_id', '')}/{server_side}", pinned.uri, pinned.options)
    if cache_key in _prepared:
        return _prepared[cache_key]
    log.info(
        "checking that the Spark server's workers run batchpoint %s and see %s (session %s)",
        pinned.client_version,
        pinned.uri,
        cache_key[0],
    )
    store = ref.open()
    key = f"{PROBE_PREFIX}/{uuid.uuid4().hex}"
    token = uuid.uuid4().hex
    store.put(key, token.encode())
    try:
        task = functools.partial(_probe_task, pinned, key, token)
        rows = spark.range(1).mapInArrow(task, _PROBE_SCHEMA).collect()
    finally:
        store.delete(key)
    problem = rows[0].problem if rows else "no answer"
    if problem.startswith("version: "):
        raise WorkerVersionMismatch(problem.removeprefix("version: "))
    if problem:
        if pinned.uri.startswith("file:"):
            raise RootNotShared(
                f"storage root {pinned.uri} is not visible to the Spark server: a file:// "
                "root needs a filesystem shared by client and server (use s3:// otherwise)"
            )
        raise ConfigError(f"the Spark server cannot read storage root {pinned.uri}: {problem}")
    _prepared[cache_key] = pinned
    return pinned


# -- attempts: job tags ---------------------------------------------------------------------

_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def attempt_tag(pipeline: str, checkpoint_id: int, operator: str, attempt: str) -> str:
    """The job tag every Spark operation of one operator attempt runs under."""
    parts = (pipeline, str(checkpoint_id), operator, attempt)
    return "batchpoint:" + ":".join(_TAG_UNSAFE.sub("_", p) for p in parts)


def interrupt_attempt(remote: str, pipeline: str, tag: str) -> list[str]:
    """Interrupt what an attempt runs on the server (the Airflow task's on_kill, a
    timeout): joins the pipeline's session on `remote` (a tag is interrupted only in its
    own session) and interrupts `tag`. Returns the ids of the interrupted operations."""
    from batchpoint.spark.connect import connect_session, pipeline_session_id

    spark = connect_session(
        remote,
        f"{pipeline}-interrupt",
        session_id=pipeline_session_id(pipeline, remote),
    )
    interrupted = list(spark.interruptTag(tag))
    log.info(
        "interrupted %d operation(s) tagged %s on %s", len(interrupted), tag, redact_uri(remote)
    )
    return interrupted


# -- errors from the server, in one line ----------------------------------------------------

_OUR_ERROR = re.compile(r"batchpoint\.[\w.]+?\.(\w+): (.+)")


def _ours(text: str) -> tuple[str, str] | None:
    """The last of batchpoint's errors in a server-side failure: its class name, message."""
    found = _OUR_ERROR.findall(text)
    return found[-1] if found else None


def raised_in_task(exc: BaseException) -> str | None:
    """The class name of batchpoint's error that a Spark task raised, if one did."""
    ours = _ours(str(exc))
    return ours[0] if ours else None


def error_line(exc: BaseException) -> str:
    """A server-side failure in one line: batchpoint's own error raised in a worker if
    there is one (not the Python traceback and JVM stack around it)."""
    text = str(exc)
    ours = _ours(text)
    if ours:
        return f"{ours[0]}: {ours[1].strip()}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first[:500]}"


__all__ = [
    "PinnedStoreRef",
    "RootNotShared",
    "WorkerVersionMismatch",
    "attempt_tag",
    "check_version",
    "error_line",
    "interrupt_attempt",
    "portable_store_ref",
    "prepare_remote",
    "raised_in_task",
]
