"""The quality gate: which checkpoint may a pipeline be rolled back to?

Candidates are the retained completed checkpoints and savepoints, newest first (or one
named checkpoint), minus those quarantined earlier, at most `max_candidates` of them.
Each is checked for integrity first (its metadata, files, key groups, offsets, sinks) and,
only if that holds, its state is validated with the pipeline's declared suites and
checks. The first candidate that passes is the one to restore. Every failing candidate is
quarantined, so no later restore is offered it again until it is released.

Every candidate's report is stored beside it (`checkpoints/chk-N/quality.json`); a dry
run writes nothing and restores nothing, it only reports.

States are found and judged by uid (identity.py), whatever a candidate called them; a
state with nothing to judge (new since the candidate, or no longer declared) is reported
as not judged, with why. Suites, checks and whole states (by names or uid) can be
skipped for one gate (`skip_suites`, checked against what the pipeline declares); the
report lists what was skipped.

Suites run through GX ValidationDefinitions; once per gate run that records (not a dry
run), `conclude` makes their Data Docs: the actions of the Checkpoint of the user's GX
project (`gx_project`, `gx_checkpoint`) on the verdict that counts, or by default a Data
Docs site of each judged candidate's own results, stored beside its report
(`checkpoints/chk-N/data-docs/<run>/`) and linked from it.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from batchpoint.errors import ConfigError, RestoreRefused
from batchpoint.protocol.checkpoint import CompletedCheckpoint
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.quality.findings import Finding
from batchpoint.quality.gx_checkpoint import GxProject, publish_site, run_folder_name
from batchpoint.quality.integrity import (
    FileChecker,
    check_completed,
    driver_file_checker,
    read_metadata,
)
from batchpoint.quality.quarantine import QuarantineStore
from batchpoint.quality.report import CandidateReport, GateMode, GateReport
from batchpoint.quality.suites import (
    PipelineQuality,
    StateQuality,
    check_skip_names,
    quality_of,
    reads_state,
    runs_something,
    validate_declaration,
)
from batchpoint.runtime.api import Pipeline
from batchpoint.storage import StoreRef
from batchpoint.storage.base import ObjectStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from batchpoint.quality.validation import StateValidator

Log = Callable[[str], None]

#: Why a savepoint folder's report has no suite results.
FOLDER_SUITES_NOTE = "suites: a savepoint folder is validated once imported"


class QualityGateRefused(RestoreRefused):
    """No candidate passed; the message says why for each, `report` has everything."""

    def __init__(self, report: GateReport) -> None:
        self.report = report
        super().__init__(report.refusal())


class QualityGate:
    def __init__(
        self,
        pipeline: Pipeline,
        store_ref: StoreRef,
        *,
        spark: SparkSession | None = None,
        quality: PipelineQuality | None = None,
        max_candidates: int = 3,
        skip_suites: Collection[str] = (),
        checksums: bool = True,
        detailed: bool = False,
        gx_project: str | Path | None = None,
        gx_checkpoint: str | None = None,
        clock: Callable[[], float] = time.time,
        log: Log = lambda _line: None,
    ) -> None:
        if max_candidates < 1:
            raise ConfigError(f"quality gate: max_candidates must be >= 1, got {max_candidates}")
        self.pipeline = pipeline
        self.store_ref = store_ref
        self.store = store_ref.open()
        self.quality = quality if quality is not None else quality_of(pipeline)
        validate_declaration(pipeline, self.quality)
        check_skip_names(pipeline, self.quality, skip_suites)
        self.max_candidates = max_candidates
        self.skip_suites = frozenset(skip_suites)
        self.checksums = checksums
        # Full GX results (observed values, unexpected counts) even for passing suites:
        # what `batchpoint verify` shows; a restore only needs them for failures.
        self.detailed = detailed
        # The user's GX project and Checkpoint, whose actions run once per gate run.
        self.gx_project = GxProject(None if gx_project is None else str(gx_project), gx_checkpoint)
        self.clock = clock
        self.log = log
        self.coordinator = CheckpointCoordinator(self.store, pipeline.name)
        self.layout = PipelineLayout(pipeline.name)
        self.quarantine = QuarantineStore(self.store, self.layout)
        self._spark = spark
        self._validator: StateValidator | None = None
        self._run_started = clock()

    # -- collaborators, built on first use ----------------------------------------------

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            from batchpoint.settings.spark_endpoint import spark_settings_here
            from batchpoint.spark.session import session_here

            # The endpoint of the restore task's Spark connection, or of the CLI's.
            self._spark = session_here(
                "batchpoint-quality-gate", self.pipeline.name, spark_settings_here()
            )
        return self._spark

    def skipping(self, names: Collection[str]) -> QualityGate:
        """This gate, also skipping `names` (suites, checks, states by names or uid)."""
        return QualityGate(
            self.pipeline,
            self.store_ref,
            spark=self._spark,
            quality=self.quality,
            max_candidates=self.max_candidates,
            skip_suites=self.skip_suites | set(names),
            checksums=self.checksums,
            detailed=self.detailed,
            gx_project=self.gx_project.root,
            gx_checkpoint=self.gx_project.checkpoint,
            clock=self.clock,
            log=self.log,
        )

    def _runs_something(self, declared: StateQuality) -> bool:
        return runs_something(self.pipeline, self.quality, self.skip_suites, declared)

    def _needs_spark(self) -> bool:
        return reads_state(self.pipeline, self.quality, self.skip_suites)

    def file_checker(self) -> FileChecker:
        """Checksums on executors when the gate uses Spark anyway, else on the driver."""
        if self._needs_spark() and self.checksums:
            from batchpoint.quality.spark_files import executor_file_checker

            return executor_file_checker(self.spark, self.store_ref)
        return driver_file_checker(self.store, self.checksums)

    def validator(self) -> StateValidator:
        if self._validator is None:
            from batchpoint.quality.validation import StateValidator

            self._validator = StateValidator(
                self.spark,
                self.store_ref,
                self.pipeline,
                self.quality,
                skip=self.skip_suites,
                detailed=self.detailed,
                gx_project=self.gx_project,
            )
            self._validator.gx.new_run(self._run_started)
        return self._validator

    def prepare(self) -> None:
        """Build every suite that will run now, before any candidate is judged: a suite
        that cannot be built, or names a column the state lacks, is a ConfigError, not a
        verdict (GX would fail every candidate on it, and each would be quarantined)."""
        from batchpoint.quality.validation import load_suite

        # Built here and again by the validator (they are cheap to build): this needs no
        # Spark, which a savepoint folder or a candidate with broken files never needs.
        for declared in self.quality.states:
            if declared.suite is not None and self._runs_something(declared):
                load_suite(self.pipeline, self.quality, declared, self.skip_suites)
        if self.gx_project.root is not None:
            self.gx_project.open()  # a mistyped project or Checkpoint: a ConfigError now
        if self.skip_suites:
            self.log(f"quality gate: skipping {', '.join(sorted(self.skip_suites))} on request")

    # -- candidates ---------------------------------------------------------------------

    def candidates(
        self, checkpoint_id: int | None = None
    ) -> tuple[list[int], list[int], list[int]]:
        """(to examine, newest first; quarantined, so skipped; beyond max_candidates), in
        the order and with the refusals of the protocol's candidate walk: only what a
        restore accepts is judged, nothing else gets a verdict."""
        ids = self.coordinator.restorer.candidates.ids(checkpoint_id)
        held = set(self.quarantine.ids())
        eligible = [cid for cid in ids if cid not in held]
        skipped = [cid for cid in ids if cid in held]
        return eligible[: self.max_candidates], skipped, eligible[self.max_candidates :]

    # -- judging one candidate ----------------------------------------------------------

    def evaluate(self, checkpoint_id: int) -> CandidateReport:
        """Integrity, then the suites, of a settled checkpoint. Writes nothing."""
        started = time.monotonic()
        completed, findings = read_metadata(self.store, self.layout, checkpoint_id)
        if completed is not None:
            findings += self._integrity(completed)
        return self._judge(checkpoint_id, completed, findings, GateMode.RESTORE, started)

    def evaluate_completed(
        self, completed: CompletedCheckpoint, mode: GateMode = GateMode.AUDIT
    ) -> CandidateReport:
        """The same, for metadata held in memory: a checkpoint whose acks are all in
        but whose outcome is not written yet (an audit)."""
        started = time.monotonic()
        findings = self._integrity(completed)
        return self._judge(completed.checkpoint_id, completed, findings, mode, started)

    def _integrity(self, completed: CompletedCheckpoint) -> list[Finding]:
        """The integrity checks of a checkpoint in the pipeline's own storage."""
        return check_completed(
            self.store,
            self.layout,
            completed,
            pipeline=self.pipeline,
            sources=self.pipeline.sources,
            file_checker=self.file_checker(),
        )

    def evaluate_savepoint(
        self, completed: CompletedCheckpoint, store: ObjectStore
    ) -> CandidateReport:
        """The integrity of a savepoint folder not imported yet (`completed` as
        `located_checkpoint` gives it, its paths keys of `store`). Its suites run once it
        is imported: checks such as a recomputed sample read the pipeline's sources,
        which a folder that was moved elsewhere does not hold."""
        started = time.monotonic()
        findings = check_completed(
            store,
            PipelineLayout(self.pipeline.name),
            completed,
            pipeline=self.pipeline,
            file_checker=driver_file_checker(store, self.checksums),
        )
        return CandidateReport(
            pipeline=self.pipeline.name,
            checkpoint_id=completed.checkpoint_id,
            checkpoint_type=completed.pending.type.value,
            mode=GateMode.RESTORE,
            evaluated_at=self.clock(),
            seconds=time.monotonic() - started,
            findings=findings,
            skipped=[FOLDER_SUITES_NOTE],
        )

    def _judge(
        self,
        checkpoint_id: int,
        completed: CompletedCheckpoint | None,
        findings: list[Finding],
        mode: GateMode,
        started: float,
    ) -> CandidateReport:
        report = CandidateReport(
            pipeline=self.pipeline.name,
            checkpoint_id=checkpoint_id,
            checkpoint_type=completed.pending.type.value if completed else "checkpoint",
            mode=mode,
            evaluated_at=self.clock(),
            findings=list(findings),
        )
        # State whose files or metadata are broken is not worth reading: integrity first.
        if completed is not None and not findings and self._needs_spark():
            run = self.validator().validate(completed)
            report.suites_run = True
            for state in run.states:
                report.findings += state.findings
                report.states[state.uid] = state.label
                if state.gx_results:
                    report.gx_results[state.uid] = state.gx_results
                if state.checks:
                    report.checks[state.uid] = state.checks
                report.skipped += state.skipped
            report.not_judged = run.not_judged
        else:
            report.skipped = sorted(self.skip_suites)
        report.seconds = time.monotonic() - started
        return report

    # -- the gate -----------------------------------------------------------------------

    def run(self, checkpoint_id: int | None = None, *, dry_run: bool = False) -> GateReport:
        """Find the checkpoint to restore: the first candidate that passes. Raises
        QualityGateRefused (after storing the reports and quarantines) when none does."""
        report = GateReport(self.pipeline.name, GateMode.RESTORE, self.clock(), dry_run)
        self.new_run()
        eligible, report.quarantined_skipped, beyond = self.candidates(checkpoint_id)
        if eligible:
            self.prepare()
        for cid in eligible:
            self.log(f"quality gate: examining checkpoint {cid}")
            candidate = self.evaluate(cid)
            if not dry_run:
                self.record(candidate)
            report.candidates.append(candidate)
            for line in candidate.render():
                self.log(line)
            if candidate.passed:
                report.chosen = cid
                break
        else:
            report.not_reached = beyond
        if not dry_run:
            self.conclude(report.candidates)
        self.log(report.render())
        if report.chosen is None:
            raise QualityGateRefused(report)
        return report

    def new_run(self) -> None:
        """Forget the GX results of an earlier run of this gate."""
        self._run_started = self.clock()
        if self._validator is not None:
            self._validator.gx.new_run(self._run_started)

    def conclude(self, judged: Sequence[CandidateReport]) -> dict[int, str]:
        """Once per gate run that records: the Data Docs of its GX results, linked from
        the judged reports (stored again); the links by checkpoint id. With the user's
        GX project, its Checkpoint's actions run once, on the verdict that counts (the
        chosen candidate's results, or, when none passed, every judged one's), and every
        report links its site. Otherwise each judged candidate gets a site of its own
        results, passed or failed, stored beside it. An action that fails is logged:
        the verdict stands."""
        if self._validator is None or not judged:
            return {}  # no suite ran, so GX has no result to act on
        try:
            if self.gx_project.root is None:
                links = self._candidate_sites(judged)
            else:
                links = self._project_actions(judged)
        except Exception as exc:  # Slack down, a site unwritable: not the state's verdict
            self.log(f"quality gate: the GX Checkpoint's actions failed: {exc}")
            return {}
        for candidate in judged:
            link = links.get(candidate.checkpoint_id)
            if link is not None:
                self.log(f"quality gate: checkpoint {candidate.checkpoint_id}'s Data Docs: {link}")
                candidate.data_docs = link
                self.store_report(candidate)
        return links

    def _candidate_sites(self, judged: Sequence[CandidateReport]) -> dict[int, str]:
        """Each candidate's own site (`chk-N/data-docs/<run>/`), built and stored."""
        links = {}
        run = run_folder_name(self._run_started)
        for candidate in judged:
            cid = candidate.checkpoint_id
            with tempfile.TemporaryDirectory(prefix="batchpoint-data-docs-") as folder:
                if self.validator().gx.build_site(self.pipeline.name, cid, Path(folder)):
                    prefix = self.layout.data_docs_prefix(cid) + f"{run}/"
                    links[cid] = publish_site(self.store, prefix, Path(folder))
        return links

    def _project_actions(self, judged: Sequence[CandidateReport]) -> dict[int, str]:
        deciding = [c for c in judged if c.passed][-1:] or list(judged)
        ids = [c.checkpoint_id for c in deciding]
        with tempfile.TemporaryDirectory(prefix="batchpoint-data-docs-") as folder:
            link = self.validator().gx.run_actions(self.pipeline.name, ids, Path(folder))
        return {} if link is None else {c.checkpoint_id: link for c in judged}

    def record(self, candidate: CandidateReport) -> None:
        """Store the candidate's report; quarantine it if it failed."""
        if not candidate.passed:
            candidate.quarantined = True  # set first: both records say so
            if self.quarantine.add(candidate, self.clock()):
                self.log(f"quality gate: checkpoint {candidate.checkpoint_id} quarantined")
        self.store_report(candidate)

    def store_report(self, candidate: CandidateReport) -> str:
        """Write the candidate's report beside it (overwriting an older one); its key."""
        key = self.layout.quality_report(candidate.checkpoint_id)
        self.store.put(key, candidate.encode())
        return key

    def stored_report(self, checkpoint_id: int) -> CandidateReport | None:
        key = self.layout.quality_report(checkpoint_id)
        info = self.store.head(key)
        if info is None:
            return None
        return CandidateReport.decode(key, self.store.get(key).data)

    def release(self, checkpoint_id: int) -> bool:
        """Let a quarantined checkpoint be a candidate again."""
        return self.quarantine.release(checkpoint_id)
