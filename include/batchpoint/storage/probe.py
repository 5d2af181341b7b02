"""Does the storage honour conditional writes? The whole protocol rests on them (write
once with ``If-None-Match: *``, compare-and-swap with ``If-Match``), and an S3-compatible
server that ignores them answers 200 to both: two coordinators would then both "win".
So before a process's first conditional write to an endpoint, one round of requests on a
throw-away key under ``_probe/`` checks both conditions, and refuses an endpoint that
ignores either with one clear line.

The S3 store calls `probe_conditional_writes` itself before its first `create` or
`replace`, so only writers probe: read-only commands never write the probe's object.
"""

from __future__ import annotations

import threading
import uuid

from batchpoint.errors import ConfigError, ObjectAlreadyExists, PreconditionFailed
from batchpoint.storage.base import ObjectStore

#: Reserved for the probe: nothing else in the store lives under it.
PROBE_PREFIX = "_probe/"

# Endpoints (with bucket) this process has found sound: the probe costs one round of
# requests per process and endpoint, not one per store or per write.
_PASSED: set[tuple[str, str]] = set()
_LOCK = threading.Lock()
# Set while this thread runs a probe, so that the probe's own conditional writes do not
# ask for a probe in turn.
_ACTIVE = threading.local()


class ConditionalWritesUnsupported(ConfigError):
    """The storage endpoint ignores If-None-Match or If-Match."""


def probe_conditional_writes(store: ObjectStore) -> None:
    """Check on a probe key that a second create is refused and that a replace with a
    stale etag is refused; raise ConditionalWritesUnsupported naming the endpoint if not.
    Deletes its probe object in every case."""
    endpoint = str(getattr(store, "endpoint", store.uri))
    key = (endpoint, str(getattr(store, "bucket", store.uri)))
    with _LOCK:
        if key in _PASSED:
            return
    probe = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
    _ACTIVE.on = True
    try:
        problem = _find_problem(store, probe)
    finally:
        try:
            store.delete(probe)
        finally:
            _ACTIVE.on = False
    if problem:
        shown = getattr(store, "shown_endpoint", endpoint)  # masked if it came from ${VAR}
        raise ConditionalWritesUnsupported(
            f"storage endpoint {shown} does not honour {problem} "
            f"(probe object {store.child(probe)}): batchpoint needs S3 conditional writes "
            "(If-None-Match: * and If-Match), as AWS S3, SeaweedFS and MinIO provide"
        )
    with _LOCK:
        _PASSED.add(key)


def _find_problem(store: ObjectStore, probe: str) -> str | None:
    """What the endpoint got wrong, worded for the error, or None."""
    first = store.create(probe, b"1")
    try:
        store.create(probe, b"2")
        return "If-None-Match: * (a second create of the same key was accepted)"
    except ObjectAlreadyExists:
        pass
    if store.get(probe).data != b"1":
        return "If-None-Match: * (a refused create still overwrote the object)"
    current = store.replace(probe, b"3", first)
    try:
        store.replace(probe, b"4", first)
        return "If-Match (a replace with a stale etag was accepted)"
    except PreconditionFailed:
        pass
    if current == first:
        return "If-Match (a replace did not change the etag)"
    return None


def probing() -> bool:
    """Whether this thread is running a probe right now."""
    return bool(getattr(_ACTIVE, "on", False))


def forget_probes() -> None:
    """Probe every endpoint again on next use (for tests, and after reconfiguring)."""
    with _LOCK:
        _PASSED.clear()
