"""Which retained checkpoint a restore may go to: the one candidate walk every restore
path takes (the protocol's restorer, runtime/restore.py's planner, the quality gate).

Candidates are the retained checkpoints and savepoints newest first, or the one named.
Each is examined in order: its quarantine mark, its outcome record, then its files; the
first of those that fails is why it must not be restored, in one line. A storage error
(unreachable, throttled) is raised, never a reason: it proves nothing about the
checkpoint. `RestoreCandidates` is a pure policy over its suppliers (the retained ids,
the quarantine, the outcome records, the file check), as Flink's
`CheckpointRequestDecider` is, and writes nothing: quarantining what it finds damaged is
the caller's (`CheckpointRestorer.condemn`). The refusals of a restore are written here
once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

from attrs import define

from batchpoint.errors import CheckpointNotFound, RecordError, RestoreRefused
from batchpoint.protocol.checkpoint import CompletedCheckpoint
from batchpoint.protocol.findings import Finding
from batchpoint.protocol.ports import ProgressFn
from batchpoint.protocol.quarantine import QuarantineRecord

#: The file check: each problem of a checkpoint's files (present, size, with
#: `checksums` its sha256), as text.
FileCheck = Callable[[CompletedCheckpoint, bool, "ProgressFn | None"], Sequence[object]]


@dataclass(frozen=True)
class Examination:
    """What a restore found about one retained candidate before moving the head to it."""

    checkpoint_id: int
    completed: CompletedCheckpoint | None = None  # None: its outcome could not be read
    problem: str | None = None  # why it must not be restored, in one line
    details: tuple[str, ...] = ()  # each file problem, when files are at fault
    held: QuarantineRecord | None = None  # quarantined already
    damaged: bool = False  # the problem is proven by its records or files

    @property
    def restorable(self) -> bool:
        return self.problem is None and self.completed is not None

    def finding(self) -> Finding:
        """Why it was skipped, as a finding."""
        return Finding(f"checkpoint {self.checkpoint_id}", self.problem or "", self.checkpoint_id)


@dataclass(frozen=True)
class Chosen:
    """The candidate a walk chose, and each newer one it skipped with why."""

    target: Examination
    skipped: tuple[Finding, ...] = ()


# -- the refusals, written once ----------------------------------------------------------


def release_hint(checkpoint_id: int) -> str:
    return f"release it with `batchpoint quarantine release {checkpoint_id}` first"


def quarantined_now(problem: str, checkpoint_id: int) -> str:
    """A reason, once the walk's caller quarantined the candidate for it."""
    return f"{problem}; quarantined ({release_hint(checkpoint_id)} once it is mended)"


def not_retained(pipeline: str, checkpoint_id: int, retained: Sequence[int]) -> RestoreRefused:
    return RestoreRefused(
        f"checkpoint {checkpoint_id} of pipeline '{pipeline}' is not retained "
        f"(retained: {list(retained) or 'none'})"
    )


def none_retained(pipeline: str) -> RestoreRefused:
    return RestoreRefused(f"pipeline '{pipeline}' has no retained checkpoint")


def cannot_restore(pipeline: str, checkpoint_id: int, problem: str | None) -> RestoreRefused:
    return RestoreRefused(
        f"checkpoint {checkpoint_id} of pipeline '{pipeline}' cannot be restored: {problem}"
    )


def none_restorable(pipeline: str, findings: Iterable[Finding]) -> RestoreRefused:
    listed = "; ".join(map(str, findings))
    return RestoreRefused(
        f"pipeline '{pipeline}': no retained checkpoint can be restored ({listed})"
    )


def left_retained(pipeline: str, checkpoint_id: int) -> RestoreRefused:
    """The compare-and-swap found the target gone from the retained set: nothing moved."""
    return RestoreRefused(
        f"checkpoint {checkpoint_id} of pipeline '{pipeline}' left the retained set "
        "while restoring (nothing changed)"
    )


# -- the walk ----------------------------------------------------------------------------


@define(kw_only=True, slots=False, eq=False)
class RestoreCandidates:
    pipeline: str
    _retained: Callable[[], Sequence[int]]
    _held: Callable[[int], QuarantineRecord | None]
    _outcome: Callable[[int], CompletedCheckpoint]
    _files: FileCheck

    def ids(self, checkpoint_id: int | None = None) -> list[int]:
        """The one named (refused unless retained), else every retained id newest first
        (refused when there is none)."""
        retained = list(self._retained())
        if checkpoint_id is not None:
            if checkpoint_id not in retained:
                raise not_retained(self.pipeline, checkpoint_id, retained)
            return [checkpoint_id]
        if not retained:
            raise none_retained(self.pipeline)
        return sorted(retained, reverse=True)

    def walk(self, checkpoint_id: int | None, checksums: bool) -> Iterator[Examination]:
        """Each candidate examined, newest first (or the one named), its problem the
        reason it must not be restored (None: restorable)."""
        for cid in self.ids(checkpoint_id):
            yield self.examine(cid, checksums)

    def choose(
        self,
        checkpoint_id: int | None,
        checksums: bool,
        condemn: Callable[[Examination], bool] = lambda _e: False,
    ) -> Chosen:
        """The first restorable candidate, and each skipped one with why; `condemn` is
        asked about each unrestorable one (True: it quarantined it now). The named one
        unrestorable, or none restorable: RestoreRefused."""
        skipped: list[Finding] = []
        for examined in self.walk(checkpoint_id, checksums):
            if examined.restorable:
                return Chosen(examined, tuple(skipped))
            if condemn(examined):
                examined = replace(
                    examined,
                    problem=quarantined_now(examined.problem or "", examined.checkpoint_id),
                )
            if checkpoint_id is not None:
                raise cannot_restore(self.pipeline, examined.checkpoint_id, examined.problem)
            skipped.append(examined.finding())
        raise none_restorable(self.pipeline, skipped)

    def examine(self, checkpoint_id: int, checksums: bool) -> Examination:
        """Quarantine, outcome record, then files: the first that fails is the problem."""
        return self.check_files(self.read(checkpoint_id), checksums)

    def read(self, checkpoint_id: int) -> Examination:
        """The candidate's quarantine mark and outcome record, not its files."""
        held = self._held(checkpoint_id)
        if held is not None:
            problem = f"{held.describe()} ({release_hint(checkpoint_id)})"
            return Examination(checkpoint_id, problem=problem, held=held)
        try:
            completed = self._outcome(checkpoint_id)
        except RecordError as exc:
            return Examination(checkpoint_id, problem=f"unreadable record: {exc}", damaged=True)
        except CheckpointNotFound as exc:  # retained, yet no completed outcome
            return Examination(checkpoint_id, problem=str(exc), damaged=True)
        return Examination(checkpoint_id, completed)

    def check_files(
        self, examined: Examination, checksums: bool, progress: ProgressFn | None = None
    ) -> Examination:
        """Every file of a readable candidate: present, its size and (with `checksums`)
        its sha256 as recorded."""
        if not examined.restorable or examined.completed is None:
            return examined
        problems = self._files(examined.completed, checksums, progress)
        if not problems:
            return examined
        shown = "; ".join(map(str, problems[:3]))
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        return replace(
            examined,
            problem=f"{len(problems)} file(s) not intact: {shown}{more}",
            details=tuple(map(str, problems)),
            damaged=True,
        )
