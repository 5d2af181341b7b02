"""The concurrency model's set-up: its clock, the store reference its driver opens, and
the faults a schedule draws from its seed (storage fault rates, catalog outages), with
where its catalog lives; its table's format, and the hooks and checker's reader of each
format."""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchpoint.storage import StoreRef
from batchpoint.storage.base import ObjectStore
from batchpoint.storage.local import LocalObjectStore
from batchpoint.tables.binding import TableBinding
from support.delta_checker import DeltaReader
from support.faulty_catalog import CatalogFaults
from support.faulty_delta import DeltaFaults
from support.faulty_store import FaultRates
from support.model_world import PIPELINE, TABLE, TABLE_CATALOG
from support.scheduler import StepScheduler

#: A schedule's table format: one of the two, or "mixed" (drawn per seed).
TABLE_FORMATS = ("iceberg", "delta", "mixed")


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


def pick_table_format(seed: int, option: str) -> str:
    """The `sums` table's format: the option's, or for "mixed" a draw of the seed's from a
    stream of its own (an Iceberg schedule's draws stay what they were before Delta)."""
    if option not in TABLE_FORMATS:
        raise ValueError(f"table format {option!r}: one of {', '.join(TABLE_FORMATS)}")
    if option == "mixed":
        return random.Random(f"table-format:{seed}").choice(["iceberg", "delta"])
    return option


def table_faults(
    table_format: str,
    scheduler: StepScheduler,
    rng: random.Random,
    rates: FaultRates,
    outages: list[tuple[int, int]],
) -> CatalogFaults:
    """The hooks of the table's calls: the catalog's (Iceberg) or delta-rs's (Delta),
    a scheduler step each, with outages, stalls and crash points."""
    delta = table_format == "delta"
    faults = (DeltaFaults if delta else CatalogFaults)(
        scheduler.yield_point,
        lambda: scheduler.step,
        outages,
        # Few calls are table writes: crashes there are drawn more often (a Delta
        # table's only writes are its creation and its commits: far more often).
        crash=min(0.3, rates.crash * 20) if delta else min(0.2, rates.crash * 5),
        stall=0.06 if rates.any else 0.0,
        stall_for=lambda _op, _name: scheduler.stall(rng.randint(50, 600)),
        uniform=scheduler.uniform,
        crashes_allowed=scheduler.in_actor,
    )
    if isinstance(faults, DeltaFaults):
        # Per commit, several times a storage call's rates: a schedule makes few commits.
        faults.commit_failed = rates.transient * 6
        faults.lost_reply = rates.lost_reply * 6
    return faults


def delta_reader(store: ObjectStore) -> DeltaReader:
    """The checker's reader of the `sums` Delta table, with the adapter's time travel."""
    from batchpoint.tables.delta import DeltaSinkTable
    from batchpoint.tables.delta_location import table_key

    binding = TableBinding(TABLE, TABLE_CATALOG, "delta")
    # Where the table lives is the library's convention; what is there is read raw.
    reader = DeltaReader(store, table_key(binding), f"batchpoint:{PIPELINE}:sums")
    reader.adapter = lambda: DeltaSinkTable(binding, PIPELINE, "sums", store)
    return reader
