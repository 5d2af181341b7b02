"""A restore, planned once: every candidate looked at (newest first, or the one named),
each with its verdict and why, and the one chosen, as a value declared with the codec.

`RestorePlanner.plan` (restore.py) produces it; `RestorePlanner.apply` restores to its
choice. The restore DAG's check task plans and hands the plan to the restore task across
XCom as its JSON (the check's return value is the run's JSON, whose top level is the
plan's); the restore task reads it back (`RestorePlan.from_json`), logs what it will
restore (`render`) and applies it, checking the chosen target again without the gate
(its files must still be there) but never choosing again: `latest` cannot slide to a
newer checkpoint between the two tasks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from batchpoint import codec
from batchpoint.protocol.control import TargetChoice
from batchpoint.protocol.restore_candidates import Examination
from batchpoint.runtime.restore_gate import GateResult, RestoreCandidate
from batchpoint.runtime.restore_options import RestoreSource, SourceKind

#: A source is stored as the text it parses from: `latest`, an id, a savepoint location.
_SOURCE_TEXT = codec.Adapter(
    stored=str,
    dump=lambda source: source.text,
    load=lambda text, _fields: RestoreSource.parse(text),
)


@dataclass(frozen=True)
class CandidateCheck(codec.Value):
    """One candidate's verdict: its files and records (problems, or the quarantine that
    held it without a look), then the gate's, when a gate judged it."""

    DERIVED = {"passed": "passed"}

    description: str = codec.field(key="candidate")  # "checkpoint 7", "savepoint s3://..."
    checkpoint_id: int  # the id in the store it comes from
    kind: SourceKind  # CHECKPOINT or SAVEPOINT
    location: str | None = None  # a savepoint folder's URI
    files: int | None = None  # its durable files (None: its outcome could not be read)
    state_size: int | None = None
    problems: tuple[str, ...] = ()
    # What quarantine held it before this check (it was refused without a look)...
    quarantine: str | None = None
    # ...or whether this check quarantined it, its problems proving it damaged.
    quarantined: bool = False
    gate: GateResult | None = None

    @property
    def passed(self) -> bool:
        return (
            not self.problems
            and self.quarantine is None
            and (self.gate is None or self.gate.passed)
        )

    @property
    def quarantined_now(self) -> bool:
        """Whether this check quarantined it: its problems proved it damaged, or the gate
        failed it and quarantined it."""
        return self.quarantined or (self.gate is not None and self.gate.quarantined)

    @property
    def source(self) -> RestoreSource:
        """This very candidate as a restore source (never `latest`)."""
        if self.location is not None:
            return RestoreSource(SourceKind.SAVEPOINT, location=self.location)
        return RestoreSource(SourceKind.CHECKPOINT, self.checkpoint_id)

    def why(self) -> str:
        """Why it was not chosen, in one line ("" when it passed)."""
        why = self.quarantine or "; ".join(self.problems[:3])
        if self.gate is not None and not self.gate.passed:
            why = (why + "; " if why else "") + f"{self.gate.name} failed: {self.gate.report}"
        return why


def summarize(
    candidate: RestoreCandidate,
    problems: Sequence[str] = (),
    *,
    quarantine: str | None = None,
    quarantined: bool = False,
) -> CandidateCheck:
    """A candidate's check by the planner (before any gate): its files and records."""
    completed = candidate.completed
    return CandidateCheck(
        candidate.description,
        candidate.checkpoint_id,
        candidate.kind,
        None if candidate.savepoint is None else candidate.savepoint.uri,
        None if completed is None else len(completed.durable_handles),
        None if completed is None else completed.full_state_size,
        tuple(problems),
        quarantine,
        quarantined,
    )


@dataclass(frozen=True)
class RestorePlan(codec.Value):
    """What a restore will go to (`chosen`, None: refused) and every candidate it looked
    at on the way, in order. `not_examined`: older retained ids beyond `max_candidates`."""

    DERIVED = {"chosen": "chosen_description", "checkpoint_id": "chosen_id"}

    pipeline: str
    source: RestoreSource = codec.field(adapter=_SOURCE_TEXT)
    parallelism: Mapping[str, int] = field(default_factory=dict)
    checks: tuple[CandidateCheck, ...] = ()
    max_candidates: int | None = None
    not_examined: tuple[int, ...] = ()

    @property
    def chosen(self) -> CandidateCheck | None:
        return next((c for c in self.checks if c.passed), None)

    @property
    def chosen_description(self) -> str | None:
        return None if self.chosen is None else self.chosen.description

    @property
    def chosen_id(self) -> int | None:
        return None if self.chosen is None else self.chosen.checkpoint_id

    def target_choice(self) -> TargetChoice:
        """How the chosen target was chosen, as its restore records it: the gate that
        passed it (None: ungated), the candidates refused before it and which of those
        this plan's checks quarantined. What the restore DAG's restore task records from
        the check task's plan: the gate's outcome, not a second look."""
        chosen = self.chosen
        refused = [c for c in self.checks if not c.passed]
        return TargetChoice(
            None if chosen is None or chosen.gate is None else chosen.gate.name,
            tuple(c.checkpoint_id for c in refused),
            tuple(c.checkpoint_id for c in refused if c.quarantined_now),
        )

    def refusal_headline(self) -> str:
        """The first line of `refusal`, without the per-candidate reasons (for a caller
        that shows each candidate's report itself, like `batchpoint restore`)."""
        head = f"no candidate for a restore of pipeline '{self.pipeline}' from {self.source}"
        if self.max_candidates is not None and self.source.kind is SourceKind.LATEST:
            head += f": looked at the {len(self.checks)} newest; none passed"
            if self.not_examined:
                older = ", ".join(map(str, self.not_examined))
                head += f" (max_candidates is {self.max_candidates}; older, not examined: {older})"
        return head

    def refusal(self) -> str:
        lines = [self.refusal_headline()]
        lines += [f"  {check.description}: {check.why()}" for check in self.checks]
        return "\n".join(lines)

    def render(self) -> list[str]:
        """What the restore will do, before it does it: the restore DAG logs it."""
        chosen = self.chosen
        if chosen is None:
            return self.refusal().splitlines()
        lines = [f"restore pipeline '{self.pipeline}' from {self.source}: {chosen.description}"]
        lines += [f"  skipped {c.description}: {c.why()}" for c in self.checks if not c.passed]
        gate = "ungated" if chosen.gate is None else f"passed by the {chosen.gate.name}"
        lines.append(f"  {chosen.description}: files checked, {gate}")
        if self.parallelism:
            lines.append(f"  new parallelism: {dict(self.parallelism)}")
        return lines


def check_key(check: CandidateCheck) -> tuple[int, str | None]:
    """What a planner keys the candidates it checked by: the id, and a folder's URI."""
    return check.checkpoint_id, check.location


@dataclass(frozen=True)
class CheckedCandidate:
    """A candidate as a planner checked it (in-process only): what its `apply` moves the
    head to without a second look."""

    candidate: RestoreCandidate
    examination: Examination | None  # a retained candidate's, by the protocol's walk
