"""What an epoch cost storage in requests, as batchpoint's acks recorded them (each ack
its subtask's writes, by kind: `TaskMetrics.storage_requests`), and per GB the epoch
wrote (its acks' `state_size`: the files its tasks wrote, shared files left out). A
sibling of the scripts (their folder is on sys.path), as bench_peer uses it."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

GB = 1 << 30


class EpochRequests(NamedTuple):
    by_kind: dict[str, int]
    bytes_written: int

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    @property
    def per_gb(self) -> float:
        return self.total / (self.bytes_written / GB) if self.bytes_written else 0.0


def epoch_requests(acks: Iterable[Any]) -> EpochRequests:
    """The requests every ack of one completed checkpoint counted, added up."""
    counts: Counter[str] = Counter()
    written = 0
    for ack in acks:
        if ack.metrics.storage_requests is not None:
            counts.update(ack.metrics.storage_requests.by_kind())
        written += ack.state_size
    return EpochRequests(dict(sorted(counts.items())), written)


def kinds(requests: EpochRequests) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in requests.by_kind.items()) or "none"


def print_requests(epochs: Sequence[EpochRequests], warm: Sequence[EpochRequests]) -> None:
    """Each epoch's requests, then the warm epochs' medians per epoch and per GB."""
    for n, r in enumerate(epochs):
        print(f"batchpoint epoch {n} storage requests: {r.total} ({kinds(r)}), "
              f"{r.bytes_written:,} bytes written")  # fmt: skip
    names = sorted({k for r in warm for k in r.by_kind})
    median = {k: statistics.median(r.by_kind.get(k, 0) for r in warm) for k in names}
    print(f"storage requests per warm epoch (median, its acks): "
          f"{statistics.median(r.total for r in warm):g} ("
          + ", ".join(f"{k} {v:g}" for k, v in median.items())
          + f"); per GB written {statistics.median(r.per_gb for r in warm):,.0f}")  # fmt: skip
