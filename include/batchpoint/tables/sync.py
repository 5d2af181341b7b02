"""Make a table sink's table say what its sink manifest says, whatever the table's
format: `TableSync` plans with the pure `plan_sync` (plan.py), pins each step's epoch
against GC, and commits through a `SinkTableAdapter` (iceberg.py, delta.py).

Every adapter's commit is a compare-and-set on the table's head (Iceberg's current
snapshot, Delta's log version): a commit that lost to a concurrent one raises one of
the adapter's `conflicts`, and the sync reads the manifest and the table again and
plans anew, rather than rebasing a decision made on a table that has changed since.

Before each commit, the sync pins the epoch in the sink manifest (a CAS that fails if
GC dropped the epoch since the manifest was read: then it plans anew), so GC keeps the
epoch's files until the commit (protocol/table_pins.py::TablePin). A sync that planned
before a GC pass therefore never commits files that pass deleted.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from batchpoint.errors import BatchpointError, CheckpointError
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sinks import SinkManifest, SinkPins, SinkPublisher
from batchpoint.protocol.table_pins import TablePin
from batchpoint.storage.redaction import scrub
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.plan import SyncStep, TablePosition, plan_sync

log = logging.getLogger(__name__)

MAX_ROUNDS = 20  # conflicting syncs converge in a round or two; this bounds a bug


class TableError(BatchpointError):
    """A table sink cannot be synced: someone else's table, an incompatible schema."""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CAUSE = "\u21b3"  # delta-rs (object_store) says each cause on a line of its own after it


def error_detail(exc: BaseException, store: Any = None) -> str:
    """A table library's or its driver's error as one line of a message: delta-rs's
    chain of causes joined (uncoloured), otherwise the first line; never the store's
    credentials (a library may repeat its options) nor a URI's password."""
    lines = [line.strip() for line in _ANSI.sub("", str(exc)).strip().splitlines()]
    if any(line.startswith(_CAUSE) for line in lines):
        text = ": ".join(line.lstrip(_CAUSE).strip() for line in lines if line.strip(_CAUSE))
    else:
        text = lines[0] if lines and lines[0] else type(exc).__name__
    settings = getattr(store, "settings", None)
    secret_values = getattr(settings, "secret_values", None)
    return scrub(text, secret_values() if callable(secret_values) else ())


@dataclass(frozen=True)
class TableCommit:
    """One batchpoint commit in a table's history (`snapshot_id`: Iceberg's snapshot id,
    or the Delta version)."""

    snapshot_id: int
    checkpoint_id: int | None
    generation: int
    operation: str
    records: int
    committed_at_ms: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SyncReport:
    table: str
    committed: list[int | None] = field(default_factory=list)  # checkpoint ids, in order
    expired: list[int] = field(default_factory=list)  # checkpoint ids whose commits went
    rounds: int = 0
    why: str = ""


def commit_of(
    binding: TableBinding, history: list[TableCommit], checkpoint_id: int, note: str = ""
) -> int:
    """The snapshot id or version of a checkpoint's newest commit in `history`."""
    found = [c for c in history if c.checkpoint_id == checkpoint_id]
    if not found:
        have = sorted({c.checkpoint_id for c in history if c.checkpoint_id})
        raise CheckpointError(
            f"{binding} has no commit of checkpoint {checkpoint_id} (it has "
            f"{', '.join(map(str, have)) or 'none'}{note})"
        )
    return found[-1].snapshot_id


def missing_said(table: Any, at: str = "") -> str:
    """Why a read found no table (`at`: where it was looked for): nothing published yet,
    or gone though the sink published to it (dropped, deleted, or a sync that has not
    run). Reads the sink's manifest: only on this error's way."""
    layout = PipelineLayout(table.pipeline)
    manifest = SinkPublisher(table.store, layout).manifest(table.ref)
    said = f"{table.binding} of sink '{table.ref.label}' does not exist"
    if manifest is None or manifest.current is None:
        return f"{said} yet{at}: nothing was published to it"
    return (
        f"{said}{at}, though the sink published up to checkpoint {manifest.current}: it "
        "was dropped or deleted (or never synced); the pipeline's next publish or restore "
        "creates it again from the sink's manifest"
    )


def foreign_said(table: str, since: str, listed: str, undo: str = "") -> str:
    """Another writer's data commits on top of batchpoint's, as each format says them
    (`undo`: how to take them back, in the format's words)."""
    return (
        f"{table} has commits not made by batchpoint since {since}: {listed}; batchpoint "
        "commits nothing over them (it would lose or claim their rows): undo them"
        f"{undo} or move their rows to a table of their own, and the next sync goes on"
    )


class SinkTableAdapter(Protocol):
    """What a sync, GC and the readers need of one format's table sink."""

    binding: TableBinding
    #: what a commit is called in the format ("snapshot", "version")
    commit_noun: str

    def conflicts(self) -> tuple[type[BaseException], ...]: ...
    def ensure(self, manifest: SinkManifest) -> Any: ...
    def load(self, *, claim: bool = False) -> Any: ...
    def require(self) -> Any: ...
    def refresh(self, table: Any) -> Any: ...
    def head(self, table: Any) -> int | None: ...
    def position(self, table: Any) -> TablePosition | None: ...
    def commit(self, table: Any, step: SyncStep, generation: int) -> None: ...
    def expire(self, table: Any, manifest: SinkManifest) -> list[int]: ...
    def history(self, table: Any = None) -> list[TableCommit]: ...
    def snapshot_of(self, checkpoint_id: int, table: Any = None) -> int: ...
    def read(self, checkpoint_id: int | None = None) -> Any: ...
    def referenced_keys(self, table: Any) -> set[str]: ...
    def problems(self, table: Any, manifest: SinkManifest) -> list[str]:
        """What else a finding should say of the table (beside its lag): one text each."""
        ...


class TableSync:
    """Make a table sink's table say what its manifest says (see the module's text).
    `pins` fence each commit against GC; only a test of the unfenced race goes without."""

    def __init__(
        self,
        table: SinkTableAdapter,
        read_manifest: Callable[[], SinkManifest | None],
        pins: SinkPins | None = None,
    ) -> None:
        self.table = table
        self.read_manifest = read_manifest
        self.pins = pins
        self._held: tuple[TablePin, ...] = ()
        # Two syncs pinning one epoch on one head must hold two pins: one giving up
        # must not release the other's (concurrency model, seed 72).
        self._owner = uuid.uuid4().hex[:12]

    def run(self) -> SyncReport:
        try:
            report = self._rounds()
        except Exception:
            self._release()  # a crash leaves its pin: GC drops it once the table moved
            raise
        self._release()
        return report

    def _rounds(self) -> SyncReport:
        report = SyncReport(self.table.binding.identifier)
        for _ in range(MAX_ROUNDS):
            report.rounds += 1
            manifest = self.read_manifest()  # first the manifest, then the table: see plan.py
            if manifest is None:
                report.why = "the sink has published nothing"
                return report
            table = self.table.ensure(manifest)
            if table is None:
                report.why = "no staged file yet to take the table's schema from"
                return report
            plan = plan_sync(self.table.position(table), manifest)
            report.why = plan.why
            try:
                for step in plan.steps:
                    if not self._pin(step, table):
                        break  # GC dropped the epoch since the manifest read: plan again
                    self.table.commit(table, step, manifest.generation)
                    report.committed.append(step.checkpoint_id)
                    table = self.table.refresh(table)
                else:
                    if not plan.stale:
                        report.expired += self.table.expire(table, manifest)
                    return report
                log.info("%s: an epoch of the plan left the manifest; planning again", report.table)
            except self.table.conflicts():
                log.info("%s: a concurrent commit won; planning again", report.table)
        raise TableError(
            f"{self.table.binding}: still conflicting after {MAX_ROUNDS} rounds of sync"
        )

    def _pin(self, step: SyncStep, table: Any) -> bool:
        """Pin the step's epoch on the table's head (releasing this sync's earlier pin
        in the same write); False when the epoch left the manifest."""
        if self.pins is None or step.checkpoint_id is None or not step.files:
            return True  # nothing GC could take from under this commit
        pin = TablePin(step.checkpoint_id, self.table.head(table), self._owner)
        pinned = self.pins.pin(pin, release=self._held)
        self._held = (pin,) if pinned else ()
        return pinned

    def _release(self) -> None:
        if self.pins is None or not self._held:
            return
        held, self._held = self._held, ()
        try:
            self.pins.unpin(held)
        except BatchpointError as exc:  # left in place, the pin goes stale: GC drops it
            log.warning("%s: a table pin stays until GC drops it: %s", self.table.binding, exc)


__all__ = [
    "MAX_ROUNDS",
    "SinkTableAdapter",
    "SyncReport",
    "TableCommit",
    "TableError",
    "TableSync",
    "error_detail",
    "foreign_said",
    "missing_said",
]
