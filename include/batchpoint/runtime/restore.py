"""Restores: choose what to roll back to, check it is fit, then move the pipeline there.
The one restore path: `batchpoint restore`, the restore DAG's check and restore tasks,
`ops.restore`, the quality gate's `gated_restore` and `restore_checkpoint` all plan and
apply here.

    planner = RestorePlanner(driver, gate=my_gate)
    plan = planner.plan("latest", parallelism={"balances": 4})   # a RestorePlan; reads only
    run = planner.apply(plan, mode=ClaimMode.NO_CLAIM)          # head, sinks, parallelism

A source is `latest` (the newest retained checkpoint or savepoint that passes the
checks, falling back to older ones when it does not), a checkpoint id, or a savepoint
folder (a URI, or a path under the storage root). Every candidate is checked once, for
integrity (the protocol's candidate walk, protocol/restore_candidates.py: not
quarantined, its outcome record readable, each referenced file present with its recorded
size, and checksum when asked; a savepoint folder: its files), then for the code's
deploy on it (DeployRefused, before any gate: invariant 15; `allow_non_restored_state`
allows it), then by the optional quality gate: any callable that takes the candidate and
returns a GateResult (restore_gate.py). The plan is a value (restore_plan.py) that can
cross a process boundary; `apply` moves the head on its verdict (the compare-and-swap
only requires the target still retained; a plan made elsewhere has its target checked
again, without the gate, never chosen again), then publishes and syncs the table sinks
once. Every restore returns a RestoreRun (restore_run.py). A retained checkpoint whose
records or files prove it damaged is quarantined with that finding
(protocol/restorer.py), unless the planner is told to record nothing (a dry run).
Nothing here imports Airflow. What a restore is asked (source, parallelism, the gate's
options) is parsed in restore_options.py; its names, and restore_gate.py's, are
importable from here too.

What the restore form asks of the gate is a `GateOptions`: the gate on (default) or off,
which needs a typed confirmation (`ungated_phrase`); how far back `latest` may look
(`max_candidates`, enforced by the planner); suites to skip; and whether this is a dry
run, which a configurable gate (`ConfigurableGate`) is told so that it records nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from batchpoint.errors import BatchpointError, ConfigError, RestoreRefused
from batchpoint.protocol.cascade import CascadeStore, retired_fence
from batchpoint.protocol.claim_mode import ClaimMode
from batchpoint.protocol.deploy_plan import DeployPlan
from batchpoint.protocol.ports import ProgressFn
from batchpoint.protocol.restore_candidates import Examination
from batchpoint.protocol.savepoint_paths import SavepointPathRefused, savepoint_location
from batchpoint.protocol.savepoint_transfer import held_at_home
from batchpoint.protocol.savepoints import (
    check_savepoint,
    confined,
    default_savepoint_roots,
    located_checkpoint,
    read_savepoint_of,
)
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore_gate import (
    ConcludingGate,
    ConfigurableGate,
    GateResult,
    RestoreCandidate,
    RestoreGate,
    configure_gate,
    verifies_checksums,
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
from batchpoint.runtime.restore_plan import (
    CandidateCheck,
    CheckedCandidate,
    RestorePlan,
    check_key,
    summarize,
)
from batchpoint.runtime.restore_run import GateSetup, RestoreRun
from batchpoint.runtime.upstream_reads import taken_back

__all__ = [
    "CandidateCheck",
    "ClaimMode",
    "ConcludingGate",
    "ConfigurableGate",
    "GateOptions",
    "GateResult",
    "GateSetup",
    "ProgressFn",
    "RestoreCandidate",
    "RestoreGate",
    "RestorePlan",
    "RestorePlanner",
    "RestoreRun",
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
        upstream_targets: Mapping[str, int] | None = None,
        allow_non_restored_state: bool = False,
    ) -> None:
        self.driver = driver
        # What the deploy of each candidate is judged with, before the gate reads it.
        self.allow_non_restored_state = allow_non_restored_state
        # A cascade's plan: upstream pipeline -> the checkpoint it is about to be restored
        # to; a candidate's reads of it are judged against that timeline, not today's.
        self.upstream_targets = dict(upstream_targets or {})
        # Whether a retained checkpoint found damaged is quarantined (False: a dry run).
        self.record = record
        # Where savepoint folders may be read from (None: the storage root's savepoints/).
        self.savepoint_roots = savepoint_roots
        self.gate = gate
        self.max_candidates = parse_max_candidates(max_candidates)
        self._checksums = checksums
        self.store_options = dict(store_options or {})
        self.progress = progress or (lambda _line: None)
        self._checked: dict[tuple[int, str | None], CheckedCandidate] = {}

    @property
    def pipeline(self) -> str:
        return self.driver.pipeline.name

    @property
    def checksums(self) -> bool:
        """On by default (BATCHPOINT_RESTORE_VERIFY_CHECKSUMS): a flipped byte is a finding
        that makes `latest` fall back, not a restore that fails afterwards. A gate that
        checks every sha256 itself (and quarantines) reads the files once, alone; any
        other gate reads what the planner checked. Asked once the gate is in use."""
        if self._checksums is None:
            verify = self.driver.coordinator.config.restore_verify_checksums
            self._checksums = verify and not verifies_checksums(self.gate)
        return self._checksums

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
        if isinstance(self.gate, ConfigurableGate):
            self.gate.prepare()
        checks: list[CandidateCheck] = []
        not_examined: list[int] = []
        for candidate in self._candidates(source, not_examined):
            check = self.check(candidate, wanted)
            checks.append(check)
            verdict = "passed" if check.passed else "failed"
            self.progress(f"{candidate.description}: {verdict}")
            if check.passed:
                break
        if isinstance(self.gate, ConcludingGate):
            self.gate.conclude()
        return RestorePlan(
            self.pipeline, source, wanted, tuple(checks), self.max_candidates, tuple(not_examined)
        )

    def _candidates(
        self, source: RestoreSource, not_examined: list[int]
    ) -> Iterator[RestoreCandidate]:
        """The candidates of `source` in the order the walk takes them: a savepoint
        folder, or the retained ids of the protocol's candidate walk (newest first, or
        the one named), at most `max_candidates` of them for `latest`."""
        store = self.driver.store
        if source.kind is SourceKind.SAVEPOINT:
            yield self._savepoint(source)
            return
        ids = self.driver.coordinator.restorer.candidates.ids(source.checkpoint_id)
        if source.kind is SourceKind.LATEST and self.max_candidates is not None:
            ids, older = ids[: self.max_candidates], ids[self.max_candidates :]
            not_examined.extend(older)
        for checkpoint_id in ids:
            # Its outcome is read by its check: a damaged record is a finding there.
            yield RestoreCandidate(self.pipeline, SourceKind.CHECKPOINT, checkpoint_id, None, store)

    def _savepoint(self, source: RestoreSource) -> RestoreCandidate:
        store = self.driver.store
        # Confined before anything is read: a restore source outside the roots is refused
        # as given, not after its metadata was fetched; a local one is read by its real
        # path and through no link from here on.
        roots = self.savepoint_roots
        try:
            location = confined(
                savepoint_location(source.location, store, self.store_options),
                default_savepoint_roots(store) if roots is None else roots,
            )
        except SavepointPathRefused as exc:
            if "/" in source.location:
                raise
            raise SavepointPathRefused(  # a word: more likely a mistyped `latest` or id
                f"'{source.location}' is not a checkpoint (latest or an id), and as a "
                f"savepoint folder: {exc}"
            ) from None
        metadata = read_savepoint_of(self.pipeline, location)
        return RestoreCandidate(
            self.pipeline,
            SourceKind.SAVEPOINT,
            metadata.checkpoint_id,
            located_checkpoint(location, metadata),
            location.store,
            location,
        )

    def check(
        self, candidate: RestoreCandidate, parallelism: Mapping[str, int] | None = None
    ) -> CandidateCheck:
        """The candidate's files and records, then (when they hold) the code's deploy on
        it, then the gate's verdict. A deploy the code cannot make raises DeployRefused
        before the gate (a Spark job) reads anything or quarantines (invariant 15)."""
        check = self._check_integrity(candidate)
        if check.passed:
            check = self._check_upstreams(check)
        if check.passed:
            checked = self._checked[check_key(check)].candidate  # its outcome read by now
            self._deploy_on(checked, parallelism or {}, self.allow_non_restored_state)
        if self.gate is not None and check.passed:
            self.progress(f"running the quality gate on {candidate.description}")
            try:
                verdict = self.gate(checked)
            except ConfigError:
                raise  # the gate is misconfigured: no verdict on this or any candidate
            except BatchpointError as exc:
                verdict = GateResult(False, f"the gate raised: {exc}")
            check = replace(check, gate=verdict)
        return check

    def _check_upstreams(self, check: CandidateCheck) -> CandidateCheck:
        """Passed over (not quarantined) when an upstream's restore took back what it
        read (runtime/upstream_reads.py)."""
        completed = self._checked[check_key(check)].candidate.completed
        if completed is None:
            return check
        problems = taken_back(
            self.driver.pipeline, self.driver.store, completed.pending, self.upstream_targets
        )
        return replace(check, problems=tuple(problems)) if problems else check

    def _check_integrity(self, candidate: RestoreCandidate) -> CandidateCheck:
        if candidate.savepoint is None:
            return self._check_retained(candidate)
        held = held_at_home(self.driver.store, self.pipeline, candidate.savepoint)
        if held is not None:
            return summarize(candidate, quarantine=held.describe())
        self._checking(candidate)
        problems = check_savepoint(
            candidate.savepoint, checksums=self.checksums, progress=self.progress
        )
        self._checked[(candidate.checkpoint_id, candidate.savepoint.uri)] = CheckedCandidate(
            candidate, None
        )
        return summarize(candidate, [str(p) for p in problems])

    def _checking(self, candidate: RestoreCandidate) -> None:
        files = 0 if candidate.completed is None else len(candidate.completed.durable_handles)
        self.progress(f"checking {candidate.description}: {files} file(s)")

    def _check_retained(self, candidate: RestoreCandidate) -> CandidateCheck:
        """The protocol's own validation of a restore target (its candidate walk), so
        that the plan never chooses what the restore would refuse: not quarantined, its
        outcome readable, its files intact. What its records or files prove damaged is
        quarantined (when recording), the finding as the reason."""
        restorer = self.driver.coordinator.restorer
        examined = restorer.candidates.read(candidate.checkpoint_id)
        candidate = replace(candidate, completed=examined.completed)
        if examined.held is not None:
            return summarize(candidate, quarantine=examined.held.describe())
        if examined.restorable:
            self._checking(candidate)
            examined = restorer.candidates.check_files(examined, self.checksums, self.progress)
        problems = list(examined.details) or ([examined.problem] if examined.problem else [])
        quarantined = self.record and restorer.condemn(examined)
        if quarantined:
            self.progress(f"{candidate.description} quarantined: {examined.problem}")
        self._checked[(candidate.checkpoint_id, None)] = CheckedCandidate(candidate, examined)
        return summarize(candidate, problems, quarantined=quarantined)

    def apply(
        self,
        plan: RestorePlan,
        *,
        mode: ClaimMode = ClaimMode.NO_CLAIM,
        allow_non_restored_state: bool | None = None,
        cascade: str | None = None,
    ) -> RestoreRun:
        """Restore to the plan's chosen candidate: check the code's deploy plan on it,
        import a savepoint (new id), then move the head (new restore generation, pending
        checkpoints aborted, the sinks rewound), register the new parallelism and publish
        what the target staged, with one sync of the table sinks. The plan's check is
        the validation: what the head moves on is its verdict, and the one condition left
        for the compare-and-swap (the target still retained). A plan this planner did
        not make (the restore DAG's check task made it) has its target checked again
        first, without the gate: its files must still be there. `mode` (ClaimMode.CLAIM):
        the pipeline owns the restored checkpoint from now on, so retention may drop it;
        a savepoint folder is copied in either mode and never deleted.
        `allow_non_restored_state`: the code may leave state of the target unrestored
        (recorded with the restore, so the first trigger after it honours it; None:
        the planner's).
        `cascade`: the id of the cascade this restore is a step of (a cascade's
        pipelines refuse any other restore while it holds them)."""
        check = plan.chosen
        if check is None:
            raise RestoreRefused(plan.refusal())
        if allow_non_restored_state is None:
            allow_non_restored_state = self.allow_non_restored_state
        checked = self._checked.get(check_key(check)) or self._check_again(plan, check)
        # Before any import: a refusal copies nothing. Again: the plan may be another's.
        self.check_deploy(plan, allow_non_restored_state)
        examined, imported_from = self._target(checked)
        checkpoint_id = examined.checkpoint_id
        self.progress(f"moving the head of '{self.pipeline}' to checkpoint {checkpoint_id}")
        if mode is ClaimMode.CLAIM:
            self.progress(f"claiming checkpoint {checkpoint_id}: retention may now drop it")
        coordinator = self.driver.coordinator
        if cascade is None and (
            stale := retired_fence(coordinator.control_record(), CascadeStore(self.driver.store))
        ):
            coordinator.release_cascade(stale)  # a fence of a cascade that is over
        head = coordinator.restorer.restore(
            examined,
            mode=mode,
            allow_non_restored_state=allow_non_restored_state,
            choice=plan.target_choice(),  # the plan's verdicts: a gated plan records gated
            cascade=cascade,
        )
        if plan.parallelism:
            self.driver.rescale(dict(plan.parallelism))
            self.progress(f"parallelism set to {dict(plan.parallelism)}")
        # The sinks' manifests were rewound with the head; publishing makes a savepoint's
        # (or a never-published checkpoint's) output visible now, not only with the next
        # epoch (idempotent otherwise), and syncs the tables to the manifests: once.
        published = self.driver.notify_complete(checkpoint_id)
        return RestoreRun(
            plan, head=head, imported_from=imported_from, published=tuple(published), mode=mode
        )

    def check_deploy(
        self, plan: RestorePlan, allow_non_restored_state: bool | None = None
    ) -> DeployPlan | None:
        """The code's deploy plan on the plan's choice (None: nothing chosen, or its
        outcome unreadable), or DeployRefused naming each problem and how to allow it.
        `allow_non_restored_state` None: the planner's."""
        check = plan.chosen
        if check is None:
            return None
        if allow_non_restored_state is None:
            allow_non_restored_state = self.allow_non_restored_state
        candidate = self._candidate_of(check)
        return self._deploy_on(candidate, plan.parallelism, allow_non_restored_state)

    def _deploy_on(
        self, candidate: RestoreCandidate, parallelism: Mapping[str, int], allow: bool
    ) -> DeployPlan | None:
        """The one deploy decision (PipelineDriver.check_deploy) on a candidate; None
        when its outcome is unreadable (its check says so)."""
        if candidate.completed is None:
            return None
        return self.driver.check_deploy(
            candidate.completed, dict(parallelism) or None, allow, store=candidate.store
        )

    def _candidate_of(self, check: CandidateCheck) -> RestoreCandidate:
        """The live candidate of a check: as this planner checked it, or read again."""
        checked = self._checked.get(check_key(check))
        if checked is not None:
            return checked.candidate
        if check.location is not None:
            return self._savepoint(check.source)
        completed = self.driver.coordinator.completed.get(check.checkpoint_id)
        return RestoreCandidate(
            self.pipeline, SourceKind.CHECKPOINT, check.checkpoint_id, completed, self.driver.store
        )

    def _check_again(self, plan: RestorePlan, chosen: CandidateCheck) -> CheckedCandidate:
        """The target of a plan made elsewhere, checked again without the gate (it passed
        already). Refused, changing nothing but the quarantine of what it finds damaged,
        when it no longer passes."""
        source = chosen.source
        (candidate,) = self._candidates(source, [])
        again = self._check_integrity(candidate)
        if not again.passed:
            refused = replace(plan, source=source, checks=(again,), max_candidates=None)
            raise RestoreRefused(refused.refusal())
        return self._checked[check_key(again)]

    def _target(self, checked: CheckedCandidate) -> tuple[Examination, str | None]:
        """What the head moves to, with its verdict: a retained candidate's examination
        by the plan, or a savepoint folder imported now (the import completes only once
        every file it copied checks out: that is its verdict); and the folder, if any."""
        savepoint = checked.candidate.savepoint
        if savepoint is None:
            assert checked.examination is not None, "a retained candidate's check examined it"
            return checked.examination, None
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
    mode: ClaimMode = ClaimMode.NO_CLAIM,
    allow_non_restored_state: bool = False,
) -> RestoreRun:
    """Restore to `checkpoint_id` (None: the newest restorable) with no quality gate: its
    RestorePlan, applied. Refused (RestoreRefused, nothing changed) when no candidate
    passes its checks; DeployRefused when the code would leave state of it unrestored,
    unless `allow_non_restored_state`."""
    planner = RestorePlanner(
        driver, checksums=checksums, allow_non_restored_state=allow_non_restored_state
    )
    plan = planner.plan(checkpoint_id, parallelism)
    return planner.apply(plan, mode=mode)
