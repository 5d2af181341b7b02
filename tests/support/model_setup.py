"""The concurrency model's set-up: its clock, the store reference its driver opens, and
the faults a schedule draws from its seed (storage fault rates, catalog outages), with
where its catalog lives."""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchpoint.storage import StoreRef
from batchpoint.storage.base import ObjectStore
from batchpoint.storage.local import LocalObjectStore
from support.faulty_store import FaultRates


@dataclass(frozen=True)
class FixedStoreRef(StoreRef):
    """A StoreRef that opens the one store object it was given (the fault wrapper)."""

    store: Any = field(default=None, compare=False)

    def open(self) -> ObjectStore:
        return self.store


def fault_rates(rng: random.Random) -> FaultRates:
    """Per schedule: a third without faults, the rest with a mix."""
    level = rng.choice([0.0, 0.01, 0.02, 0.04])
    return FaultRates(transient=level, throttle=level / 2, lost_reply=level, crash=level / 2)


def catalog_outages(rng: random.Random, forced: bool) -> list[tuple[int, int]]:
    """Stretches of scheduler steps in which the catalog is down: none in 30% of the
    schedules, else one to three, long enough to span a finalize or a GC pass (and,
    when forced, one more from the start)."""
    out = [(0, rng.randint(300, 900))] if forced else []
    if rng.random() < 0.7:
        for _ in range(rng.randint(1, 3)):
            start = rng.randint(0, 1200)
            out.append((start, start + rng.randint(100, 900)))
    return out


def catalog_file(inner: ObjectStore) -> tuple[Path, Path | None]:
    """The model's SQLite catalog: beside a folder store (the same tmpfs), else in a
    temporary folder of its own (returned, to remove after the schedule)."""
    if isinstance(inner, LocalObjectStore):
        return inner.root.with_name(inner.root.name + "-catalog.db"), None
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    folder = Path(tempfile.mkdtemp(prefix="bp-model-catalog-", dir=base))
    return folder / "catalog.db", folder
