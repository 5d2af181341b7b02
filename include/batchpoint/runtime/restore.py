"""Restores: choose what to roll back to, check it is fit, then move the pipeline there.
The one restore path: `batchpoint restore`, the restore DAG's check and restore tasks,
`ops.restore`, the quality gate's `gated_restore` and `restore_checkpoint` all plan and
apply here.

    planner = RestorePlanner(driver, gate=my_gate)
    plan = planner.plan("latest", parallelism={"balances": 4})   # reads only
    applied = planner.apply(plan)                               # head, sinks, parallelism

A source is `latest` (the newest retained checkpoint or savepoint that passes the checks,
falling back to older ones when it does not), a checkpoint id, or a savepoint folder (a
URI, or a path under the storage root). Every candidate is checked once, for integrity
(the protocol restorer's `examine`: not quarantined, its outcome record readable, each
referenced file present with its recorded size, and checksum when asked; a savepoint
folder: its files), then by the optional quality gate: any callable that takes the
candidate and returns a GateResult (restore_gate.py). `apply` moves the head on that
verdict (the compare-and-swap only requires the target still retained), then publishes
and syncs the table sinks once. A retained checkpoint whose records or files prove it
damaged is quarantined with that finding (protocol/restorer.py), unless the planner is
told to record nothing (a dry run). Nothing here imports Airflow. What a restore is
asked (source, parallelism, the gate's options) is parsed in restore_options.py; its
names, and restore_gate.py's, are importable from here too.

What the restore form asks of the gate is a `GateOptions`: the gate on (default) or off,
which needs a typed confirmation (`ungated_phrase`); how far back `latest` may look
(`max_candidates`, enforced by the planner); suites to skip; and whether this is a dry
run, which a configurable gate (`ConfigurableGate`) is told so that it records nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from batchpoint.errors import BatchpointError, ConfigError, RestoreRefused
from batchpoint.protocol.restorer import Examination, RestoreResult
from batchpoint.protocol.savepoint_paths import savepoint_location
from batchpoint.protocol.savepoints import (
    check_savepoint,
    confined,
    default_savepoint_roots,
    located_checkpoint,
    read_savepoint,
)
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore_gate import (
    ConcludingGate,
    ConfigurableGate,
    GateResult,
    RestoreCandidate,
    RestoreGate,
    configure_gate,
)
from batchpoint.runtime.restore_options import (
    GateOptions,
    RestoreSource,
    SourceKind,
    parse_flag,
    parse_max_candidates,
    parse_parallelism,
    parse_skip_suites,
    ungated_phrase,
)

__all__ = [
    "AppliedRestore",
    "CandidateCheck",
    "ConcludingGate",
    "ConfigurableGate",
    "GateOptions",
    "GateResult",
    "ProgressFn",
    "RestoreCandidate",
    "RestoreGate",
    "RestorePlan",
    "RestorePlanner",
    "RestoreSource",
    "SourceKind",
    "configure_gate",
    "parse_flag",
    "parse_max_candidates",
    "parse_parallelism",
    "parse_skip_suites",
    "restore_checkpoint",
    "savepoint_location",
    "ungated_phrase",
]

ProgressFn = Callable[[str], None]


# -- checks and plans ----------------------------------------------------------------


@dataclass
class CandidateCheck:
    candidate: RestoreCandidate
    problems: list[str] = field(default_factory=list)
    gate: GateResult | None = None
    # What quarantine held it before this check (it was refused without a look)...
    quarantine: str | None = None
    # ...or whether this check quarantined it, its problems proving it damaged.
    quarantined: bool = False
    #: A retained candidate's examination by the protocol's restorer: the verdict a
    #: restore to it moves the head on, without a second look.
    examination: Examination | None = None

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
    def chosen_check(self) -> CandidateCheck | None:
        return next((c for c in self.checks if c.passed), None)

    @property
    def chosen(self) -> RestoreCandidate | None:
        check = self.chosen_check
        return None if check is None else check.candidate

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
        if self.max_candidates is not None and self.source.kind is SourceKind.LATEST:
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


@dataclass(frozen=True)
class AppliedRestore:
    """What `RestorePlanner.apply` did: the protocol's RestoreResult (where the head
    went, the fact) and what the restore did around it."""

    pipeline: str
    restored: RestoreResult
    imported_from: str | None  # the savepoint folder it imported, if it did
    parallelism: dict[str, int]
    published: list[str]
    claimed: bool = False  # CLAIM mode: retention may drop the restored checkpoint

    @property
    def checkpoint_id(self) -> int:
        """The checkpoint the head now points at."""
        assert self.restored.checkpoint_id is not None, "a restore moves the head to one"
        return self.restored.checkpoint_id

    @property
    def restore_generation(self) -> int:
        return self.restored.restore_generation

    def to_json(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "checkpoint_id": self.checkpoint_id,
            "restore_generation": self.restore_generation,
            "imported_from": self.imported_from,
            "parallelism": self.parallelism,
            "published": self.published,
            "claimed": self.claimed,
        }


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
        if isinstance(self.gate, ConcludingGate):
            self.gate.conclude()
        return plan

    def _candidates(self, source: RestoreSource, plan: RestorePlan) -> Iterator[RestoreCandidate]:
        c = self.driver.coordinator
        store = self.driver.store
        if source.kind is SourceKind.SAVEPOINT:
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
                SourceKind.SAVEPOINT,
                metadata.checkpoint_id,
                located_checkpoint(location, metadata),
                location.store,
                location,
            )
            return
        retained = c.completed.retained_ids()
        if source.kind is SourceKind.CHECKPOINT:
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
            yield RestoreCandidate(self.pipeline, SourceKind.CHECKPOINT, checkpoint_id, None, store)

    def check(self, candidate: RestoreCandidate) -> CandidateCheck:
        if candidate.savepoint is not None:
            self._checking(candidate)
            problems = check_savepoint(
                candidate.savepoint, checksums=self.checksums, progress=self.progress
            )
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
            examined = restorer.check_files(examined, self.checksums, self.progress)
        problems = list(examined.details) or ([examined.problem] if examined.problem else [])
        check = CandidateCheck(candidate, problems, examination=examined)
        if self.record and restorer.condemn(examined):
            check.quarantined = True
            self.progress(f"{candidate.description} quarantined: {examined.problem}")
        return check

    def apply(
        self, plan: RestorePlan, *, claim: bool = False, allow_non_restored_state: bool = False
    ) -> AppliedRestore:
        """Restore to the plan's chosen candidate: check the code's deploy plan on it,
        import a savepoint (new id), then move the head (new restore generation, pending
        checkpoints aborted, the sinks rewound), register the new parallelism and publish
        what the target staged, with one sync of the table sinks. The plan's check is
        the validation: what the head moves on is its verdict, and the one condition left
        for the compare-and-swap (the target still retained). `claim` (CLAIM mode): the
        pipeline owns the restored checkpoint from now on, so retention may drop it; a
        savepoint folder is copied in either mode and never deleted.
        `allow_non_restored_state`: the code may leave state of the target unrestored
        (recorded with the restore, so the first trigger after it honours it)."""
        check = plan.chosen_check
        if check is None:
            raise RestoreRefused(plan.refusal())
        if check.candidate.completed is not None:  # before any import: a refusal copies nothing
            self.driver.check_deploy(
                check.candidate.completed,
                plan.parallelism or None,
                allow_non_restored_state,
                store=check.candidate.store,
            )
        examined, imported_from = self._target(check)
        checkpoint_id = examined.checkpoint_id
        self.progress(f"moving the head of '{self.pipeline}' to checkpoint {checkpoint_id}")
        if claim:
            self.progress(f"claiming checkpoint {checkpoint_id}: retention may now drop it")
        restored = self.driver.coordinator.restorer.restore_examined(
            examined,
            claim=claim,
            allow_non_restored_state=allow_non_restored_state,
            gate=None if check.gate is None else check.gate.name,
        )
        if plan.parallelism:
            self.driver.rescale(plan.parallelism)
            self.progress(f"parallelism set to {plan.parallelism}")
        # The sinks' manifests were rewound with the head; publishing makes a savepoint's
        # (or a never-published checkpoint's) output visible now, not only with the next
        # epoch (idempotent otherwise), and syncs the tables to the manifests: once.
        published = self.driver.notify_complete(checkpoint_id)
        return AppliedRestore(
            self.pipeline, restored, imported_from, plan.parallelism, published, claim
        )

    def _target(self, check: CandidateCheck) -> tuple[Examination, str | None]:
        """What the head moves to, with its verdict: a retained candidate's examination
        by the plan, or a savepoint folder imported now (the import completes only once
        every file it copied checks out: that is its verdict); and the folder, if any."""
        savepoint = check.candidate.savepoint
        if savepoint is None:
            assert check.examination is not None, "a retained candidate's check examined it"
            return check.examination, None
        completed = self.driver.coordinator.savepoints.import_folder(
            savepoint,
            checksums=self.checksums,
            roots=self.savepoint_roots,
            progress=self.progress,
        )
        return Examination(completed.checkpoint_id, completed), savepoint.uri


def restore_checkpoint(
    driver: PipelineDriver,
    checkpoint_id: int | None = None,
    parallelism: Mapping[str, int] | None = None,
    *,
    checksums: bool | None = None,
    claim: bool = False,
    allow_non_restored_state: bool = False,
) -> AppliedRestore:
    """Restore to `checkpoint_id` (None: the newest restorable) with no quality gate: its
    RestorePlan, applied. Refused (RestoreRefused, nothing changed) when no candidate
    passes its checks; DeployRefused when the code would leave state of it unrestored,
    unless `allow_non_restored_state`."""
    planner = RestorePlanner(driver, checksums=checksums)
    plan = planner.plan(checkpoint_id, parallelism)
    return planner.apply(plan, claim=claim, allow_non_restored_state=allow_non_restored_state)
