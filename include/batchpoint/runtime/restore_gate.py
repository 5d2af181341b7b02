"""What a restore candidate is, and the quality-gate hook that judges one: any callable
that takes a `RestoreCandidate` and returns a `GateResult` (batchpoint's own,
`batchpoint.quality.hook.QualityRestoreGate`, can also be set up per restore:
`ConfigurableGate`). runtime.restore plans with them; its names include these."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from batchpoint import codec
from batchpoint.errors import ConfigError
from batchpoint.protocol.checkpoint import CheckpointType, CompletedCheckpoint
from batchpoint.protocol.savepoints import SavepointLocation
from batchpoint.runtime.restore_options import SourceKind
from batchpoint.storage.base import ObjectStore


@dataclass(frozen=True)
class RestoreCandidate:
    """A checkpoint a restore could go to. `completed.handles` are keys of `store`: the
    pipeline's store for a checkpoint, the savepoint's folder for a savepoint (which is
    only imported once chosen). `completed` is None for a retained checkpoint until its
    check has read its outcome record, and stays None when that record is unreadable."""

    pipeline: str
    kind: SourceKind  # CHECKPOINT or SAVEPOINT
    checkpoint_id: int  # the id in the store it comes from
    completed: CompletedCheckpoint | None
    store: ObjectStore
    savepoint: SavepointLocation | None = None

    @property
    def description(self) -> str:
        if self.savepoint is not None:
            return f"savepoint {self.savepoint.uri} (its checkpoint {self.checkpoint_id})"
        is_savepoint = (
            self.completed is not None and self.completed.pending.type is CheckpointType.SAVEPOINT
        )
        kind = "savepoint" if is_savepoint else "checkpoint"
        return f"{kind} {self.checkpoint_id}"


@dataclass(frozen=True)
class GateResult(codec.Value):
    """A gate's verdict on one candidate, with its report: text, or a JSON object
    (batchpoint's own gate: the candidate's CandidateReport body), and whether the gate
    quarantined it (a plan read back from an older JSON without the key: it did not)."""

    passed: bool
    report: Any = ""  # Mapping[str, Any] | str
    name: str = "quality gate"
    quarantined: bool = codec.field(default=False, omit=False)


#: The quality-gate hook: Great Expectations suites, row-count checks, anything that
#: reads the candidate's state and says whether it may be restored.
RestoreGate = Callable[[RestoreCandidate], GateResult]


@runtime_checkable
class ConfigurableGate(Protocol):
    """A gate hook that can be set up for one restore (batchpoint's own,
    `batchpoint.quality.hook.QualityRestoreGate`, is one)."""

    def __call__(self, candidate: RestoreCandidate) -> GateResult: ...

    def configured(
        self, *, record: bool | None = None, skip_suites: Collection[str] | None = None
    ) -> ConfigurableGate:
        """A copy that records nothing when `record` is False (a dry run: no
        quarantine, no stored report) and skips `skip_suites`."""
        ...

    def prepare(self) -> None:
        """Check the gate's configuration before the first candidate; raise ConfigError."""
        ...


@runtime_checkable
class ConcludingGate(Protocol):
    """A gate hook told when a restore has judged its last candidate (batchpoint's own
    runs the GX Checkpoint's actions then, once per restore)."""

    def conclude(self) -> None: ...


def verifies_checksums(gate: RestoreGate | None) -> bool:
    """Whether `gate` reads every file's sha256 itself (batchpoint's QualityRestoreGate
    with checksums on says so): only then may a restore leave the checksums to it."""
    return bool(getattr(gate, "verifies_checksums", False))


def configure_gate(
    gate: RestoreGate, *, record: bool, skip_suites: Collection[str] = ()
) -> RestoreGate:
    """The gate for one restore. A plain callable cannot be told to skip suites (an
    error: the restore would run what was asked to be skipped) nor to record nothing
    (it is called as it is; what it writes is its own business)."""
    if isinstance(gate, ConfigurableGate):
        return gate.configured(record=record, skip_suites=skip_suites)
    if skip_suites:
        raise ConfigError(
            f"the quality gate {getattr(gate, '__name__', type(gate).__name__)} cannot skip "
            f"suites ({', '.join(skip_suites)}): only a batchpoint QualityRestoreGate can"
        )
    return gate
