"""Restores: choose what to roll back to, check it is fit, then move the pipeline there.

    planner = RestorePlanner(driver, gate=my_gate)
    plan = planner.plan("latest", parallelism={"balances": 4})   # reads only
    result = planner.apply(plan)                                # head, sinks, parallelism

A source is `latest` (the newest retained checkpoint or savepoint that passes the checks,
falling back to older ones when it does not), a checkpoint id, or a savepoint folder (a
URI, or a path under the storage root). Every candidate is checked for integrity (not
quarantined, its outcome record readable, each referenced file present with its recorded
size, and checksum when asked) and then by the optional quality gate: any callable that
takes the candidate and returns a GateResult. A retained checkpoint whose records or
files prove it damaged is quarantined with that finding (protocol/restorer.py), unless
the planner is told to record nothing (a dry run).
The restore DAG and `batchpoint restore` share this module; neither imports Airflow here.
What a restore is asked (source, parallelism, the gate's options) is parsed in
restore_options.py; its names are importable from here too.

What the restore form asks of the gate is a `GateOptions`: the gate on (default) or off,
which needs a typed confirmation (`ungated_phrase`); how far back `latest` may look
(`max_candidates`, enforced by the planner); suites to skip; and whether this is a dry
run, which a configurable gate (`ConfigurableGate`) is told so that it records nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from batchpoint.errors import BatchpointError, ConfigError, RestoreRefused
from batchpoint.protocol.checkpoint import CheckpointType, CompletedCheckpoint
from batchpoint.protocol.head import HeadPointer
from batchpoint.protocol.savepoints import (
    SavepointLocation,
    check_savepoint,
    confined,
    default_savepoint_roots,
    located_checkpoint,
    read_savepoint,
)
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore_options import (
    GateOptions,
    RestoreSource,
    parse_flag,
    parse_max_candidates,
    parse_parallelism,
    parse_skip_suites,
    savepoint_location,
    ungated_phrase,
)
from batchpoint.storage.base import ObjectStore

__all__ = [
    "CandidateCheck",
    "ConfigurableGate",
    "GateOptions",
    "GateResult",
    "ProgressFn",
    "RestoreCandidate",
    "RestoreGate",
    "RestorePlan",
    "RestorePlanner",
    "RestoreResult",
    "RestoreSource",
    "configure_gate",
    "parse_flag",
    "parse_max_candidates",
    "parse_parallelism",
    "parse_skip_suites",
    "savepoint_location",
    "ungated_phrase",
]

ProgressFn = Callable[[str], None]


# -- candidates, checks and the quality gate --------------------------------------------


@dataclass(frozen=True)
class RestoreCandidate:
    """A checkpoint a restore could go to. `completed.handles` are keys of `store`: the
    pipeline's store for a checkpoint, the savepoint's folder for a savepoint (which is
    only imported once chosen). `completed` is None for a retained checkpoint until its
    check has read its outcome record, and stays None when that record is unreadable."""

    pipeline: str
    kind: str  # "checkpoint" | "savepoint"
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
class GateResult:
    passed: bool
    report: Mapping[str, Any] | str = ""
    name: str = "quality gate"


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


@dataclass
class CandidateCheck:
    candidate: RestoreCandidate
    problems: list[str] = field(default_factory=list)
    gate: GateResult | None = None
    # What quarantine held it before this check (it was refused without a look)...
    quarantine: str | None = None
    # ...or whether this check quarantined it, its problems proving it damaged.
    quarantined: bool = False

    @property
    def passed(self) -> bool:
        return (
            not self.problems
            and self.quarantine is None
            and (self.gate is None or self.gate.passed)
        )

    def to_json(self) -> dict[str, Any]:
        completed = self.candidate.completed
        return {
            "candidate": self.candidate.description,
            "checkpoint_id": self.candidate.checkpoint_id,
            "kind": self.candidate.kind,
            "files": None if completed is None else len(completed.durable_handles),
            "state_size": None if completed is None else completed.full_state_size,
            "problems": self.problems,
            "quarantine": self.quarantine,
            "quarantined": self.quarantined,
            "gate": None
            if self.gate is None
            else {"name": self.gate.name, "passed": self.gate.passed, "report": self.gate.report},
            "passed": self.passed,
        }


@dataclass
class RestorePlan:
    pipeline: str
    source: RestoreSource
    parallelism: dict[str, int]
    checks: list[CandidateCheck]
    max_candidates: int | None = None
    not_examined: list[int] = field(default_factory=list)  # older than max_candidates

    @property
    def chosen(self) -> RestoreCandidate | None:
        return next((c.candidate for c in self.checks if c.passed), None)

    def to_json(self) -> dict[str, Any]:
        chosen = self.chosen
        return {
            "pipeline": self.pipeline,
            "source": str(self.source),
            "chosen": chosen.description if chosen else None,
            "checkpoint_id": chosen.checkpoint_id if chosen else None,
            "parallelism": self.parallelism,
            "checks": [c.to_json() for c in self.checks],
            "max_candidates": self.max_candidates,
            "not_examined": self.not_examined,
        }

    def refusal_headline(self) -> str:
        """The first line of `refusal`, without the per-candidate reasons (for a caller
        that shows each candidate's report itself, like `batchpoint restore`)."""
        head = f"no candidate for a restore of pipeline '{self.pipeline}' from {self.source}"
        if self.max_candidates is not None and self.source.kind == "latest":
            head += f": looked at the {len(self.checks)} newest; none passed"
            if self.not_examined:
                older = ", ".join(map(str, self.not_examined))
                head += f" (max_candidates is {self.max_candidates}; older, not examined: {older})"
        return head

    def refusal(self) -> str:
        lines = [self.refusal_headline()]
        for check in self.checks:
            why = check.quarantine or "; ".join(check.problems[:3])
            if check.gate is not None and not check.gate.passed:
                why = (why + "; " if why else "") + f"{check.gate.name} failed: {check.gate.report}"
            lines.append(f"  {check.candidate.description}: {why}")
        return "\n".join(lines)


@dataclass
class RestoreResult:
    pipeline: str
    checkpoint_id: int  # the checkpoint the head now points at
    restore_generation: int
    imported_from: str | None
    parallelism: dict[str, int]
    published: list[str]
    claimed: bool = False  # CLAIM mode: retention may drop the restored checkpoint

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class RestorePlanner:
    def __init__(
        self,
        driver: PipelineDriver,
        *,
        gate: RestoreGate | None = None,
        checksums: bool | None = None,
        store_options: Mapping[str, str] | None = None,
        progress: ProgressFn | None = None,
        max_candidates: int | None = None,
        savepoint_roots: Sequence[str] | None = None,
        record: bool = True,
    ) -> None:
        self.driver = driver
        # Whether a retained checkpoint found damaged is quarantined (False: a dry run).
        self.record = record
        # Where savepoint folders may be read from (None: the storage root's savepoints/).
        self.savepoint_roots = savepoint_roots
        self.gate = gate
        self.max_candidates = parse_max_candidates(max_candidates)
        # On by default (BATCHPOINT_RESTORE_VERIFY_CHECKSUMS): a flipped byte is a finding
        # that makes `latest` fall back, not a restore that fails afterwards. A quality
        # gate checks every sha256 itself (and quarantines), so with one the files are
        # read once, by the gate.
        config = driver.coordinator.config
        if checksums is None:
            checksums = config.restore_verify_checksums and gate is None
        self.checksums = checksums
        self._verified = checksums or gate is not None
        self.store_options = dict(store_options or {})
        self.progress = progress or (lambda _line: None)

    @property
    def pipeline(self) -> str:
        return self.driver.pipeline.name

    def plan(
        self, source: RestoreSource | str | int | None, parallelism: Any = None
    ) -> RestorePlan:
        """Find and check candidates; writes nothing but the quarantine of the damaged
        ones (and of those a gate fails), unless `record` is off. For `latest`,
        candidates are checked newest first, at most `max_candidates` of them, and
        checking stops at the first that passes."""
        source = source if isinstance(source, RestoreSource) else RestoreSource.parse(source)
        operators = [op.name for op in self.driver.current_spec().operators if op.has_tasks]
        wanted = parse_parallelism(parallelism, operators)
        if wanted:
            self.driver.pipeline.spec(wanted)  # validates against max_parallelism now
        plan = RestorePlan(self.pipeline, source, wanted, [], self.max_candidates)
        if isinstance(self.gate, ConfigurableGate):
            self.gate.prepare()
        for candidate in self._candidates(source, plan):
            check = self.check(candidate)
            plan.checks.append(check)
            verdict = "passed" if check.passed else "failed"
            self.progress(f"{candidate.description}: {verdict}")
            if check.passed:
                break
        return plan

    def _candidates(self, source: RestoreSource, plan: RestorePlan) -> Iterator[RestoreCandidate]:
        c = self.driver.coordinator
        store = self.driver.store
        if source.kind == "savepoint":
            # Confined before anything is read: a restore source outside the roots is
            # refused as given, not after its metadata was fetched; a local one is read
            # by its real path and through no link from here on.
            location = confined(
                savepoint_location(source.location, store, self.store_options),
                default_savepoint_roots(store)
                if self.savepoint_roots is None
                else self.savepoint_roots,
            )
            metadata = read_savepoint(location)
            if metadata.pipeline != self.pipeline:
                raise RestoreRefused(
                    f"{location.uri} is a savepoint of pipeline '{metadata.pipeline}', "
                    f"not of '{self.pipeline}'"
                )
            yield RestoreCandidate(
                self.pipeline,
                "savepoint",
                metadata.checkpoint_id,
                located_checkpoint(location, metadata),
                location.store,
                location,
            )
            return
        retained = c.completed.retained_ids()
        if source.kind == "checkpoint":
            if source.checkpoint_id not in retained:
                raise RestoreRefused(
                    f"checkpoint {source.checkpoint_id} of pipeline '{self.pipeline}' is not "
                    f"retained (retained: {retained or 'none'})"
                )
            ids = [source.checkpoint_id]
        else:
            if not retained:
                raise RestoreRefused(f"pipeline '{self.pipeline}' has no retained checkpoint")
            ids = sorted(retained, reverse=True)
            if self.max_candidates is not None:
                ids, plan.not_examined = ids[: self.max_candidates], ids[self.max_candidates :]
        for checkpoint_id in ids:
            assert checkpoint_id is not None
            # Its outcome is read by its check: a damaged record is a finding there.
            yield RestoreCandidate(self.pipeline, "checkpoint", checkpoint_id, None, store)

    def check(self, candidate: RestoreCandidate) -> CandidateCheck:
        if candidate.savepoint is not None:
            self._checking(candidate)
            problems = check_savepoint(candidate.savepoint, checksums=self.checksums)
            check = CandidateCheck(candidate, [str(p) for p in problems])
        else:
            check = self._check_retained(candidate)
        if self.gate is not None and check.passed:
            self.progress(f"running the quality gate on {candidate.description}")
            try:
                check.gate = self.gate(candidate)
            except ConfigError:
                raise  # the gate is misconfigured: no verdict on this or any candidate
            except BatchpointError as exc:
                check.gate = GateResult(False, f"the gate raised: {exc}")
        return check

    def _checking(self, candidate: RestoreCandidate) -> None:
        files = 0 if candidate.completed is None else len(candidate.completed.durable_handles)
        self.progress(f"checking {candidate.description}: {files} file(s)")

    def _check_retained(self, candidate: RestoreCandidate) -> CandidateCheck:
        """The protocol's own validation of a restore target (protocol/restorer.py), so
        that the plan never chooses what the restore would refuse: not quarantined, its
        outcome readable, its files intact. What its records or files prove damaged is
        quarantined (when recording), the finding as the reason."""
        restorer = self.driver.coordinator.restorer
        examined = restorer.read_candidate(candidate.checkpoint_id)
        candidate = replace(candidate, completed=examined.completed)
        if examined.held is not None:
            return CandidateCheck(candidate, quarantine=examined.held.describe())
        if examined.restorable:
            self._checking(candidate)
            examined = restorer.check_files(examined, self.checksums)
        problems = list(examined.details) or ([examined.problem] if examined.problem else [])
        check = CandidateCheck(candidate, problems)
        if self.record and restorer.condemn(examined):
            check.quarantined = True
            self.progress(f"{candidate.description} quarantined: {examined.problem}")
        return check

    def apply(
        self, plan: RestorePlan, *, claim: bool = False, allow_non_restored_state: bool = False
    ) -> RestoreResult:
        """Restore to the plan's chosen candidate: import a savepoint first (new id),
        then move the head (new restore generation, pending checkpoints aborted), rewind
        the sinks to it, and register the new parallelism. `claim` (CLAIM mode): the
        pipeline owns the restored checkpoint from now on, so retention may drop it;
        a savepoint folder is copied in either mode and never deleted."""
        chosen = plan.chosen
        if chosen is None:
            raise RestoreRefused(plan.refusal())
        imported_from = None
        checkpoint_id = chosen.checkpoint_id
        if chosen.completed is not None:  # before any import: a refused deploy copies nothing
            self.driver.check_deploy(
                chosen.completed, plan.parallelism or None, allow_non_restored_state
            )
        if chosen.savepoint is not None:
            completed = self.driver.coordinator.savepoints.import_folder(
                chosen.savepoint,
                checksums=self.checksums,
                roots=self.savepoint_roots,
                progress=self.progress,
            )
            checkpoint_id, imported_from = completed.checkpoint_id, chosen.savepoint.uri
        self.progress(f"moving the head of '{self.pipeline}' to checkpoint {checkpoint_id}")
        # The plan read every sha256 already (or the gate did): the restore's own check
        # of the target needs only the sizes, unless the files are a fresh import.
        recheck = None if chosen.savepoint is not None or not self._verified else False
        if claim:
            self.progress(f"claiming checkpoint {checkpoint_id}: retention may now drop it")
        head: HeadPointer = self.driver.restore(
            checkpoint_id,
            plan.parallelism or None,
            checksums=recheck,
            claim=claim,
            allow_non_restored_state=allow_non_restored_state,
        )
        # A savepoint's (or a never-published checkpoint's) sink output becomes visible
        # now, not only with the next epoch; publishing is idempotent otherwise.
        published = self.driver.notify_complete(checkpoint_id)
        if plan.parallelism:
            self.progress(f"parallelism set to {plan.parallelism}")
        return RestoreResult(
            self.pipeline,
            checkpoint_id,
            head.restore_generation,
            imported_from,
            plan.parallelism,
            published,
            claim,
        )
