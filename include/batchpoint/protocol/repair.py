"""`batchpoint repair`: rebuild a missing or unreadable control record from the records
that remain, so a damaged pipeline continues from the head its history proves instead of
restarting from empty state (the rules: protocol/repair_plan.py).

Repair reads the control record first (what is there, and its etag), then the outcome,
trigger, restore, quarantine and sink records, and writes with one compare-and-swap on
what it read: If-Match the etag of the record (readable or damaged), or create-if-absent
when there was none. Anything written in between (a finalize's settle, another repair)
makes it lose, change nothing and say so. A readable record is replaced only with
`force`, and the report says what that changes; `dry_run` writes nothing at all.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from attrs import define

from batchpoint.errors import RESET_HINT, CorruptRecord, RecordError, UnsupportedRecordVersion
from batchpoint.protocol.cascade import unfenced
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.checkpoint_files import CheckpointFiles
from batchpoint.protocol.control import CascadeFence, ControlRecord
from batchpoint.protocol.control_store import ControlSnapshot, ControlStore
from batchpoint.protocol.failures import CheckpointFailureManager
from batchpoint.protocol.findings import Finding
from batchpoint.protocol.ports import Clock, RollForward
from batchpoint.protocol.quarantine import QuarantineStore
from batchpoint.protocol.reads import CheckpointReads
from batchpoint.protocol.repair_changes import changes, same_substance
from batchpoint.protocol.repair_plan import RepairEvidence, RepairPlan, plan_repair
from batchpoint.protocol.sinks import SinkPublisher


class RepairStatus(enum.StrEnum):
    WRITTEN = "written"
    DRY_RUN = "dry-run"  # the plan only: nothing written
    REFUSED = "refused"  # a readable record without force, or no head can be proven
    UNCHANGED = "unchanged"  # a readable record the records agree with: nothing to write
    LOST = "lost"  # the record changed between repair's read and its write


@dataclass(frozen=True)
class RepairReport:
    plan: RepairPlan
    previous: ControlSnapshot  # what repair read (and compared-and-swapped on)
    status: RepairStatus
    changes: tuple[str, ...]  # against a readable record: what writing the plan changes
    reason: str = ""  # for REFUSED and LOST

    @property
    def control(self) -> ControlRecord:
        return self.plan.control

    @property
    def agrees(self) -> bool:
        """The record read is readable and the records agree with it: a forced repair
        writes nothing (the plan's new generation alone is no reason to)."""
        before = self.previous.record
        return before is not None and same_substance(before, self.plan.control)

    @property
    def head(self) -> int | None:
        return self.plan.control.head

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self.plan.findings

    @property
    def replaced(self) -> bool:
        """A record (readable or not) was there before."""
        return self.previous.etag is not None

    @property
    def written(self) -> bool:
        return self.status is RepairStatus.WRITTEN


@define(kw_only=True, slots=False, eq=False)
class Repairer:
    """`batchpoint repair` for one pipeline (see the module doc)."""

    _reads: CheckpointReads
    _files: CheckpointFiles
    _control: ControlStore
    _quarantine: QuarantineStore
    _sinks: SinkPublisher
    _failures: CheckpointFailureManager
    _clock: Clock
    _num_retained: int
    _roll_forward: RollForward
    # The fence of a cascade under way that names the pipeline: a rebuilt record keeps
    # the pipeline held (protocol/cascade.py), as the lost one did.
    _active_fence: Callable[[], CascadeFence | None] = lambda: None

    def repair(
        self, *, dry_run: bool = False, force: bool = False, head: int | None = None
    ) -> RepairReport:
        """Derive the control record the records prove and write it (see the module
        doc); the report says what was read, the plan, and whether it was written.
        `head`: the operator's answer where the records cannot prove one (a restore in
        doubt, protocol/restore_intents.py): rebuild on that checkpoint instead."""
        read = self._control.snapshot()  # first: the compare-and-swap is on this version
        evidence = self.gather(read)
        plan = plan_repair(evidence, self._num_retained, self._clock(), chosen=head)
        before = read.record
        diff = tuple(changes(before, plan.control)) if before is not None else ()
        if plan.refusal is not None:
            return RepairReport(plan, read, RepairStatus.REFUSED, diff, plan.refusal)
        if dry_run:
            return RepairReport(plan, read, RepairStatus.DRY_RUN, diff)
        newer = read.damage is not None and isinstance(read.damage.cause, UnsupportedRecordVersion)
        if newer and not force:  # what the newer release recorded would be lost unread
            return RepairReport(plan, read, RepairStatus.REFUSED, diff, self._newer(read))
        if before is not None:
            if same_substance(before, plan.control):  # also run on a healthy pipeline
                return RepairReport(plan, read, RepairStatus.UNCHANGED, ())
            if not force:
                return RepairReport(plan, read, RepairStatus.REFUSED, diff, self._readable(diff))
        if not self._control.swap(plan.control, read):
            return RepairReport(
                plan,
                read,
                RepairStatus.LOST,
                diff,
                f"the control record {self._control.key} changed while repair read the "
                "records (a checkpoint settled, a restore or another repair ran): nothing was "
                "written; run `batchpoint repair --dry-run` again to see the new plan",
            )
        self._lift_if_over(plan.control.cascade, before)
        self._roll_forward()  # rewind the sinks to the head, abort the abandoned checkpoints
        return RepairReport(plan, read, RepairStatus.WRITTEN, diff)

    def _lift_if_over(self, fence: CascadeFence | None, before: ControlRecord | None) -> None:
        """A fence rebuilt from the active cascade record whose cascade finished while
        repair wrote: its lift found no record to lift it from, and nothing else would.
        Asked after the write: a cascade that finishes later lifts it itself (ops/cascade
        lifts the fences again once the record says it is finished)."""
        if fence is None or (before is not None and before.cascade == fence):
            return
        if self._active_fence() != fence:
            self._control.update(lambda c: unfenced(c, fence.cascade))

    def _readable(self, diff: tuple[str, ...]) -> str:
        return (
            f"the control record {self._control.key} of pipeline '{self._reads.pipeline}' "
            "is readable and repair replaces only a missing or unreadable one: `--force` "
            "replaces it anyway, and would change: " + "; ".join(diff)
        )

    def _newer(self, read: ControlSnapshot) -> str:
        assert read.damage is not None
        return (
            f"the control record {self._control.key} of pipeline '{self._reads.pipeline}' "
            f"was written by a newer batchpoint ({read.damage.cause}): repair would "
            "replace it without reading what that release recorded; `--force` rebuilds it "
            "anyway"
        )

    def gather(self, read: ControlSnapshot) -> RepairEvidence:
        """Every record repair judges by, read after the control record."""
        ev = RepairEvidence(current=read.record, fence=self._active_fence())
        if read.damage is not None:
            ev.findings.append(Finding(self._control.key, _why(read.damage.cause)))
        self._read_outcomes(read, ev)
        self._read_open(ev)
        self._read_restores(ev)
        for intent, error in self._reads.restore_intents():
            ev.intents.append(intent)
            if error is not None:
                where = f"restore intent of generation {intent.restore_generation}"
                ev.findings.append(Finding(where, _why(error)))
        ev.quarantined = set(self._quarantine.ids())
        try:
            self._failures.state()
        except CorruptRecord as exc:  # no evidence repair judges by: named, left to reset
            ev.findings.append(Finding(exc.key, f"corrupt ({exc.problem}): {RESET_HINT}"))
        except RecordError as exc:  # a newer batchpoint's: named, never replaced
            ev.findings.append(Finding(self._failures.key, str(exc)))
        for sink in self._sinks.sink_names():
            try:
                manifest = self._sinks.manifest(sink)
            except RecordError as exc:
                ev.findings.append(Finding(f"sink {sink}", f"unreadable manifest: {_why(exc)}"))
                continue
            if manifest is not None:
                ev.sinks[sink] = (manifest.generation, manifest.current)
        return ev

    def _read_outcomes(self, read: ControlSnapshot, ev: RepairEvidence) -> None:
        """The outcome records, and whether a completed one's files are intact."""
        gone: set[int] = set()
        if read.record is not None:  # queued or collected: judged without their files
            gone = {e.checkpoint_id for e in read.record.discarded} | set(read.record.collected)
        for cid in self._reads.folder_ids():
            try:
                outcome = self._reads.get_outcome(cid)
            except RecordError as exc:
                ev.unreadable[cid] = f"unreadable outcome: {_why(exc)}"
                ev.findings.append(Finding(f"checkpoint {cid}", ev.unreadable[cid], cid))
                continue
            if outcome is None:
                continue
            ev.outcomes[cid] = outcome
            if (
                outcome.status is CheckpointStatus.COMPLETED
                and outcome.completed is not None
                and cid not in gone
            ):
                handles = outcome.completed.durable_handles
                if problems := self._files.check(handles, checksums=False):
                    ev.damaged[cid] = f"{len(problems)} file(s) not intact"

    def _read_open(self, ev: RepairEvidence) -> None:
        """The trigger records of checkpoints without an outcome."""

        def judged(cid: int) -> bool:
            return cid in ev.outcomes or cid in ev.unreadable

        for cid, found in self._reads.pending_records(skip=judged):
            if isinstance(found, RecordError):
                ev.unreadable[cid] = f"unreadable pending record: {_why(found)}"
                ev.findings.append(Finding(f"checkpoint {cid}", ev.unreadable[cid], cid))
            else:
                ev.open.append(found)

    def _read_restores(self, ev: RepairEvidence) -> None:
        for generation, found in self._reads.restore_records():
            if isinstance(found, RecordError):
                ev.restores[generation] = None  # the generation happened; its target is unknown
                ev.findings.append(Finding(f"restore generation {generation}", _why(found)))
            else:
                ev.restores[generation] = found.checkpoint_id


def _why(exc: RecordError) -> str:
    return exc.summary if isinstance(exc, CorruptRecord) else str(exc)
