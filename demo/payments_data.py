"""Deterministic input for the `payments` demo: payment events as JSON lines files.

Layout: `<root>/p0 .. p3/`, one call of `write_epoch_files(epoch=e)` per epoch, each file
written once and never touched again. What makes the data awkward on purpose:

* **re-deliveries**: an event is sometimes delivered again, byte-for-byte the same record
  (same event_id, account, amount, ts): later in the same file, in another partition's file
  of the same epoch, or in a file of the next epoch;
* **late files**: each epoch holds back one of its files (partition `e % 4`, its last
  file); it is written by the *next* call, so the barrier taken after that call (a later
  epoch) is the first to see it. Its records keep their original timestamps;
* **disorder**: timestamps rise through a file but ~2% of records are up to 10 minutes
  older than their neighbours, and late files carry the previous epoch's times;
* **skew**: low account numbers get more traffic than high ones.

File names sort in arrival order (`e<arrival epoch>-f<seq>[-late-e<origin epoch>].jsonl`),
which `PartitionedFileSource` requires: everything a call writes sorts after everything
earlier calls wrote, so positions recorded in a barrier never shift.

Every record is a pure function of (seed, origin epoch, partition, file, row, the
dataset's size parameters), so any call can regenerate what an earlier call wrote (to
re-deliver it or to write a held-back file) without reading it back, and the same
arguments always give the same bytes. Memory is bounded by one file (`max_rows_per_file`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from batchpoint.errors import ConfigError
from batchpoint.storage.base import ObjectStore

#: Amounts are integer cents and times integer milliseconds: sums of integers are exact
#: in any order, so an incremental (per-epoch, per-subtask) computation and the one-shot
#: reference agree bit for bit, which float sums would not.
PAYMENTS_SCHEMA = pa.schema(
    [
        pa.field("account_id", pa.string(), nullable=False),
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("amount", pa.int64(), nullable=False),  # cents; > 0 deposit, < 0 payment
        pa.field("ts", pa.int64(), nullable=False),  # ms since 1970-01-01T00:00Z
    ]
)
PARTITIONS: tuple[str, ...] = ("p0", "p1", "p2", "p3")
#: Balance (in cents) under which an account is in the `alerts` sink.
ALERT_LIMIT = -10_000

DEFAULT_SEED = 20_240_917
EPOCH_START_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z
EPOCH_SPAN_MS = 3_600_000  # each epoch's events fall in one hour

_MAX_EPOCH = 99_999  # five digits keep names sorting in epoch order
_MAX_FILES = 999


@dataclass(frozen=True)
class _Layout:
    """How one epoch's original events are cut into files; the same for every epoch."""

    seed: int
    accounts: int
    events_per_epoch: int
    partitions: int
    files: int  # per partition and epoch
    duplicate_rate: float
    late_files: bool

    def rows(self, partition: int, file: int) -> int:
        share, rest = divmod(self.events_per_epoch, self.partitions * self.files)
        return share + (1 if partition * self.files + file < rest else 0)

    def late_slot(self, epoch: int) -> tuple[int, int] | None:
        return (epoch % self.partitions, self.files - 1) if self.late_files else None


def write_epoch_files(
    store: ObjectStore,
    root_key: str,
    epoch: int,
    *,
    accounts: int = 200,
    events_per_epoch: int = 2_000,
    seed: int = DEFAULT_SEED,
    files_per_partition: int = 3,
    duplicate_rate: float = 0.05,
    late_files: bool = True,
    max_rows_per_file: int = 250_000,
) -> list[str]:
    """Write what arrives during `epoch`: its own files (less the one held back) and the
    file the previous epoch held back. Returns the keys written, in name order per
    partition. `events_per_epoch` counts original events; re-deliveries come on top.

    Every call for one dataset must use the same keyword arguments: epoch e's call
    regenerates records of epoch e-1 from them."""
    layout = _layout(
        accounts,
        events_per_epoch,
        seed,
        files_per_partition,
        duplicate_rate,
        late_files,
        max_rows_per_file,
    )
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= _MAX_EPOCH:
        raise ConfigError(f"epoch must be an integer in [0, {_MAX_EPOCH}], got {epoch!r}")
    root = root_key.strip("/")
    held_back = layout.late_slot(epoch)
    late_from_before = layout.late_slot(epoch - 1) if epoch > 0 else None
    written = []
    for partition in range(layout.partitions):
        folder = f"{root}/{PARTITIONS[partition]}" if root else PARTITIONS[partition]
        for file in range(layout.files):
            if (partition, file) == held_back:
                continue
            key = f"{folder}/e{epoch:05d}-f{file:03d}.jsonl"
            store.put(key, _file_bytes(layout, epoch, partition, file))
            written.append(key)
        if late_from_before is not None and late_from_before[0] == partition:
            origin = epoch - 1
            key = f"{folder}/e{epoch:05d}-f{layout.files:03d}-late-e{origin:05d}.jsonl"
            store.put(key, _file_bytes(layout, origin, *late_from_before))
            written.append(key)
    return written


def write_epochs(
    store: ObjectStore, root_key: str, epochs: Iterable[int], **options: object
) -> list[str]:
    """`write_epoch_files` for each epoch in turn (the input of a whole run)."""
    keys: list[str] = []
    for epoch in epochs:
        keys.extend(write_epoch_files(store, root_key, epoch, **options))  # type: ignore[arg-type]
    return keys


def _layout(
    accounts: int,
    events_per_epoch: int,
    seed: int,
    files_per_partition: int,
    duplicate_rate: float,
    late_files: bool,
    max_rows_per_file: int,
) -> _Layout:
    if accounts < 1 or events_per_epoch < 1 or files_per_partition < 1 or max_rows_per_file < 1:
        raise ConfigError(
            "accounts, events_per_epoch, files_per_partition and max_rows_per_file must be >= 1"
        )
    if not 0.0 <= duplicate_rate <= 1.0:
        raise ConfigError(f"duplicate_rate must be in [0, 1], got {duplicate_rate}")
    if seed < 0:
        raise ConfigError(f"seed must be >= 0, got {seed}")
    partitions = len(PARTITIONS)
    files = max(files_per_partition, math.ceil(events_per_epoch / (partitions * max_rows_per_file)))
    if files > _MAX_FILES:
        raise ConfigError(
            f"{files} files per partition and epoch is too many: raise max_rows_per_file"
        )
    return _Layout(seed, accounts, events_per_epoch, partitions, files, duplicate_rate, late_files)


@dataclass(frozen=True)
class _Events:
    account: np.ndarray  # account numbers
    amount: np.ndarray
    ts: np.ndarray
    row: np.ndarray  # row within the file that first carried the event
    source: np.ndarray  # index into the file's list of event-id prefixes

    def take(self, index: np.ndarray) -> _Events:
        return _Events(*(getattr(self, f)[index] for f in _EVENT_FIELDS))

    @staticmethod
    def concat(parts: list[_Events]) -> _Events:
        return _Events(*(np.concatenate([getattr(p, f) for p in parts]) for f in _EVENT_FIELDS))


_EVENT_FIELDS = ("account", "amount", "ts", "row", "source")


def _id_prefix(epoch: int, partition: int, file: int) -> str:
    return f"ev-{epoch:05d}-{partition}-{file:03d}-"


def _originals(layout: _Layout, epoch: int, partition: int, file: int, source: int) -> _Events:
    """The original events of one file; depends on nothing but its coordinates."""
    n = layout.rows(partition, file)
    rng = np.random.default_rng([layout.seed, epoch, partition, file])
    # u**1.6 skews traffic towards low account numbers.
    account = np.minimum(
        (layout.accounts * rng.random(n) ** 1.6).astype(np.int64), layout.accounts - 1
    )
    magnitude = rng.integers(100, 50_001, n, dtype=np.int64)
    deposit = rng.random(n) < 0.5
    amount = np.where(deposit, magnitude, -((magnitude * 4) // 5))
    ts = EPOCH_START_MS + epoch * EPOCH_SPAN_MS + np.sort(rng.integers(0, EPOCH_SPAN_MS, n))
    stragglers = rng.random(n) < 0.02
    ts[stragglers] -= rng.integers(1_000, 600_000, int(stragglers.sum()))
    row = np.arange(n, dtype=np.int64)
    return _Events(account, amount, ts.astype(np.int64), row, np.full(n, source, np.int64))


def _file_bytes(layout: _Layout, epoch: int, partition: int, file: int) -> bytes:
    own = _originals(layout, epoch, partition, file, source=0)
    prefixes = [_id_prefix(epoch, partition, file)]
    n = len(own.amount)
    # A stream apart from the originals', so the originals do not depend on duplicate_rate.
    rng = np.random.default_rng([layout.seed, epoch, partition, file, 1])
    per_kind = round(n * layout.duplicate_rate / 3)
    parts, keys = [own], [np.arange(n, dtype=np.float64)]
    if per_kind and n:
        # Same file: each copy lands somewhat after its original.
        picked = rng.integers(0, n, per_kind)
        parts.append(own.take(picked))
        keys.append(picked + rng.uniform(0.5, 1 + n / 10, per_kind))
        sources = [(epoch, (partition + 1) % layout.partitions)]  # same epoch, other partition
        if epoch > 0:
            sources.append((epoch - 1, (partition + 2) % layout.partitions))  # previous epoch
        for src_epoch, src_partition in sources:
            other = _originals(layout, src_epoch, src_partition, file, source=len(prefixes))
            prefixes.append(_id_prefix(src_epoch, src_partition, file))
            if len(other.amount):
                parts.append(other.take(rng.integers(0, len(other.amount), per_kind)))
                keys.append(rng.uniform(0, n, per_kind))
    events = _Events.concat(parts).take(np.argsort(np.concatenate(keys), kind="stable"))
    lines = [
        f'{{"account_id":"acct-{account:06d}","event_id":"{prefixes[source]}{row:07d}",'
        f'"amount":{amount},"ts":{ts}}}\n'
        for account, source, row, amount, ts in zip(
            events.account.tolist(),
            events.source.tolist(),
            events.row.tolist(),
            events.amount.tolist(),
            events.ts.tolist(),
            strict=True,
        )
    ]
    return "".join(lines).encode()
