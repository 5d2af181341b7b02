"""An ObjectStore that wraps a real one (local or S3) and injects faults on demand.

Faults are the ones a real object store and a real worker produce:

- TRANSIENT: a 5xx that outlasted the client's retries; nothing happened.
- THROTTLE: a SlowDown that outlasted the retries; nothing happened.
- LOST_REPLY: the write took effect but the reply never arrived, so the caller sees an
  error (a retried create then finds its own object, a retried CAS finds a new etag).
- CRASH_BEFORE / CRASH_AFTER: the calling process dies just before or just after the
  call; raised as `Crash`, a BaseException, so no `except Exception` in the code under
  test can swallow it (a killed process runs no handler either).

Faults come from armed rules (`arm`: "crash after the 2nd delete_many under data/") and
from seeded random rates. Every call first runs `before_call`, the hook a step
scheduler uses to make each storage call a point where another actor may run.
Every call that took effect is logged, so a checker can see who wrote what.
"""

from __future__ import annotations

import enum
import hashlib
import random
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from batchpoint.errors import StorageUnavailable
from batchpoint.storage.base import ObjectInfo, ObjectStore, StoredObject

T = TypeVar("T")

WRITES = frozenset({"put", "create", "replace", "delete", "delete_many", "upload_file"})
READS = frozenset({"get", "head", "list", "list_dirs", "download_file"})


class Fault(enum.StrEnum):
    TRANSIENT = "transient"
    THROTTLE = "throttle"
    LOST_REPLY = "lost-reply"
    CRASH_BEFORE = "crash-before"
    CRASH_AFTER = "crash-after"


class Crash(BaseException):  # not an error: the process is gone
    """The calling process died at this storage call."""

    def __init__(self, op: str, key: str, when: str) -> None:
        self.op, self.key, self.when = op, key, when
        super().__init__(f"crash {when} {op} {key}")


class InjectedStorageError(StorageUnavailable):
    """What the caller sees for an injected TRANSIENT, THROTTLE or LOST_REPLY fault."""

    def __init__(self, fault: Fault, op: str, key: str) -> None:
        self.fault = fault
        text = {
            Fault.TRANSIENT: "503 Service Unavailable",
            Fault.THROTTLE: "503 SlowDown (throttled)",
            Fault.LOST_REPLY: "connection reset before the reply",
        }[fault]
        super().__init__(f"injected: {op} '{key}': {text}")


@dataclass(frozen=True)
class FaultRates:
    """Probability per storage call of each fault (crash split before/after)."""

    transient: float = 0.0
    throttle: float = 0.0
    lost_reply: float = 0.0
    crash: float = 0.0

    @property
    def any(self) -> bool:
        return self.transient + self.throttle + self.lost_reply + self.crash > 0

    def pick(self, u: float, op: str, crashes: bool) -> Fault | None:
        """The fault for a uniform draw `u` in [0, 1), or None."""
        bands: list[tuple[float, Fault]] = [
            (self.transient, Fault.TRANSIENT),
            (self.throttle, Fault.THROTTLE),
            # A lost reply of a read is just a failed read.
            (self.lost_reply, Fault.LOST_REPLY if op in WRITES else Fault.TRANSIENT),
        ]
        if crashes:
            bands += [(self.crash / 2, Fault.CRASH_BEFORE), (self.crash / 2, Fault.CRASH_AFTER)]
        edge = 0.0
        for rate, fault in bands:
            edge += rate
            if u < edge:
                return fault
        return None


@dataclass
class FaultRule:
    """An armed fault: hits the matching calls after `skip` of them, `times` times."""

    fault: Fault
    op: str | None = None
    key_contains: str = ""
    skip: int = 0
    times: int = 1
    hits: int = field(default=0, init=False)
    seen: int = field(default=0, init=False)

    def matches(self, op: str, key: str) -> bool:
        return (self.op is None or self.op == op) and self.key_contains in key

    @property
    def spent(self) -> bool:
        return self.hits >= self.times


@dataclass(frozen=True)
class Injected:
    op: str
    key: str
    fault: Fault


@dataclass(frozen=True)
class Write:
    """A write that took effect: the op, the key, and the sha256 of the bytes (or '')."""

    op: str
    key: str
    digest: str


class FaultyStore(ObjectStore):
    def __init__(
        self,
        inner: ObjectStore,
        *,
        seed: int = 0,
        rates: FaultRates | None = None,
        before_call: Callable[[str, str], None] | None = None,
    ) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.rates = rates or FaultRates()
        self.before_call = before_call
        #: Replaces the seeded RNG: a uniform draw per call (a scheduler derives it from
        #: its step, so schedules replay exactly even when pool threads make the calls).
        self.uniform: Callable[[str, str], float] | None = None
        #: Whether a crash may hit this call (e.g. only inside a model actor).
        self.crashes_allowed: Callable[[], bool] = lambda: True
        self.enabled = True
        self.rules: list[FaultRule] = []
        self.injected: list[Injected] = []
        self.writes: list[Write] = []
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    @property
    def settings(self) -> object:
        """The wrapped store's S3 settings (None for a folder): what a table's FileIO
        needs to reach the same objects."""
        return getattr(self.inner, "settings", None)

    # -- arming ---------------------------------------------------------------------------

    def arm(self, fault: Fault, op: str | None = None, key_contains: str = "", **kw: int) -> None:
        with self._lock:
            self.rules.append(FaultRule(fault, op, key_contains, **kw))

    def disarm(self) -> None:
        with self._lock:
            self.rules.clear()

    # -- the decision ---------------------------------------------------------------------

    def _choose(self, op: str, key: str) -> Fault | None:
        if not self.enabled:
            return None
        with self._lock:
            for rule in self.rules:
                if rule.spent or not rule.matches(op, key):
                    continue
                rule.seen += 1
                if rule.seen > rule.skip:
                    rule.hits += 1
                    return rule.fault
            if not self.rates.any:
                return None
            u = self.uniform(op, key) if self.uniform is not None else self._rng.random()
        return self.rates.pick(u, op, crashes=self.crashes_allowed())

    def _call(self, op: str, key: str, fn: Callable[[], T], digest: str = "") -> T:
        if self.before_call is not None:
            self.before_call(op, key)
        fault = self._choose(op, key)
        if fault is not None:
            with self._lock:
                self.injected.append(Injected(op, key, fault))
        if fault in (Fault.TRANSIENT, Fault.THROTTLE):
            raise InjectedStorageError(fault, op, key)
        if fault is Fault.CRASH_BEFORE:
            raise Crash(op, key, "before")
        result = fn()
        if op in WRITES:
            with self._lock:
                self.writes.append(Write(op, key, digest))
        if fault is Fault.LOST_REPLY:
            raise InjectedStorageError(fault, op, key)
        if fault is Fault.CRASH_AFTER:
            raise Crash(op, key, "after")
        return result

    # -- the ObjectStore interface --------------------------------------------------------

    def get(self, key: str) -> StoredObject:
        return self._call("get", key, lambda: self.inner.get(key))

    def head(self, key: str) -> ObjectInfo | None:
        return self._call("head", key, lambda: self.inner.head(key))

    def put(self, key: str, data: bytes) -> str:
        return self._call("put", key, lambda: self.inner.put(key, data), _sha(data))

    def create(self, key: str, data: bytes) -> str:
        return self._call("create", key, lambda: self.inner.create(key, data), _sha(data))

    def replace(self, key: str, data: bytes, etag: str) -> str:
        return self._call("replace", key, lambda: self.inner.replace(key, data, etag), _sha(data))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        # One call, materialised: the listing is taken at this point of the schedule.
        return iter(self._call("list", prefix, lambda: list(self.inner.list(prefix))))

    def list_dirs(self, prefix: str) -> list[str]:
        return self._call("list_dirs", prefix, lambda: self.inner.list_dirs(prefix))

    def delete(self, key: str) -> None:
        self._call("delete", key, lambda: self.inner.delete(key))

    def delete_many(self, keys: Iterable[str]) -> int:
        keys = list(keys)
        if not keys:
            return 0

        def delete() -> int:
            count = self.inner.delete_many(keys)
            with self._lock:  # _call logs the first key once this returns
                self.writes.extend(Write("delete", k, "") for k in keys[1:])
            return count

        return self._call("delete_many", keys[0], delete)

    def upload_file(self, key: str, path: Path) -> ObjectInfo:
        return self._call(
            "upload_file", key, lambda: self.inner.upload_file(key, path), _sha(path.read_bytes())
        )

    def download_file(self, key: str, path: Path) -> ObjectInfo:
        return self._call("download_file", key, lambda: self.inner.download_file(key, path))

    def close(self) -> None:
        self.inner.close()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
