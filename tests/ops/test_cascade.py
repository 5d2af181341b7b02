"""The cascade restore's refusals and crash points on fake epochs of three chained
pipelines (ledger -> reports -> trends, support/fake_chain.py: real records, barriers and
manifests, no Spark): a gate that refuses a downstream candidate refuses the whole
cascade before any head moves; a crash between two pipelines' restores leaves the rest
fenced (their triggers refused, reason CASCADE) until the next call finishes it; a
downstream with no checkpoint that read only what the restore keeps is named; a plan made
earlier is applied as it was planned. tests/runtime/test_cascade.py runs one on Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from batchpoint.cli.main import main
from batchpoint.errors import RestoreRefused, TriggerRefused
from batchpoint.ops import cascade as cascade_module
from batchpoint.ops.cascade import CascadeContext, apply_planned, cascade_restore
from batchpoint.ops.epoch import finalize
from batchpoint.protocol.cascade import CascadeBusy, CascadeStatus, CascadeStore, history_key
from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.cascade_plan import MemberAction
from batchpoint.runtime.restore import RestoreCandidate
from batchpoint.runtime.restore_gate import GateResult
from batchpoint.sources.upstream import UpstreamPosition
from batchpoint.storage import StoreRef
from support.fake_chain import FakeChain
from support.fake_epochs import ack_all


class Crash(Exception):
    pass


@pytest.fixture
def chain(table_store: StoreRef) -> FakeChain:
    """Two rounds: ledger, reports, trends are checkpoints 1 and 2 of each (on each
    store: a folder, and SeaweedFS)."""
    chain = FakeChain.on(table_store)
    for _ in range(2):
        for driver in (chain.ledger, chain.reports, chain.trends):
            chain.epoch(driver)
    return chain


def _context(chain: FakeChain, gate_for: Any = lambda _p: None) -> CascadeContext:
    code = {d.pipeline.name: d.pipeline for d in (chain.ledger, chain.reports, chain.trends)}
    config = CheckpointConfig(skip_idle=False, num_retained=20)
    return CascadeContext(code, chain.ledger.store_ref, config, gate_for)


def _heads(chain: FakeChain) -> tuple[int | None, ...]:
    drivers = (chain.ledger, chain.reports, chain.trends)
    return tuple(d.coordinator.control_record().head for d in drivers)


def test_a_refusing_gate_downstream_moves_no_head(chain: FakeChain) -> None:
    def refuse(candidate: RestoreCandidate) -> GateResult:
        return GateResult(False, f"test gate refuses {candidate.description}")

    def gate_for(pipeline: Pipeline) -> Any:
        return refuse if pipeline.name == "trends" else None

    run = cascade_restore(_context(chain, gate_for), "ledger", 1)
    assert run.refused and run.record is None and run.plan is not None
    refusal = run.plan.refusal()
    assert "pipeline 'trends'" in refusal and "test gate refuses checkpoint 1" in refusal
    assert _heads(chain) == (2, 2, 2)
    assert CascadeStore(chain.ledger.store).active() is None


def test_a_crash_between_two_restores_is_finished_by_the_next_call(chain: FakeChain) -> None:
    def crash(point: str, pipeline: str) -> None:
        if (point, pipeline) == ("after-restore", "reports"):
            raise Crash("killed after the reports' restore")

    with pytest.raises(Crash):
        cascade_restore(_context(chain), "ledger", 1, hook=crash)
    assert _heads(chain) == (1, 1, 2)
    active = CascadeStore(chain.ledger.store).active()
    assert active is not None and active[0].status is CascadeStatus.APPLYING
    for driver in (chain.ledger, chain.trends):  # every member waits, restored or not
        with pytest.raises(TriggerRefused) as refused:
            driver.trigger()
        assert refused.value.reason is CheckpointFailureReason.CASCADE
        assert "batchpoint restore --pipeline ledger --cascade" in str(refused.value)

    run = cascade_restore(_context(chain), "reports", None)  # any next call finishes it
    assert run.resumed and run.record is not None and run.record.status is CascadeStatus.DONE
    assert _heads(chain) == (1, 1, 1)
    assert CascadeStore(chain.ledger.store).active() is None
    assert chain.epoch(chain.reports) == 3  # the fences are lifted


def test_a_downstream_without_a_matching_checkpoint_is_named(tmp_path: Path) -> None:
    chain = FakeChain.on((tmp_path / "store").as_uri())
    chain.epoch(chain.ledger)
    chain.epoch(chain.ledger)
    chain.epoch(chain.reports)  # its first checkpoint read ledger 2
    run = cascade_restore(_context(chain), "ledger", 1)
    assert run.refused and run.plan is not None
    members = {m.pipeline: m.action for m in run.plan.members}
    assert members == {
        "ledger": MemberAction.RESTORE,
        "reports": MemberAction.REFUSED,
        "trends": MemberAction.KEEP,  # no checkpoint yet
    }
    assert "no retained checkpoint read only what the restores keep" in run.plan.refusal()
    assert chain.ledger.coordinator.control_record().head == 2


def test_a_plan_made_earlier_is_applied_as_planned(chain: FakeChain) -> None:
    context = _context(chain)
    plan = cascade_restore(context, "ledger", 1, dry_run=True).plan
    assert plan is not None
    targets = [(m.pipeline, m.target) for m in plan.restores if m.target is not None]
    record = apply_planned(context, "ledger", targets)
    assert record.status is CascadeStatus.DONE and _heads(chain) == (1, 1, 1)
    # a second cascade while one is active is refused after finishing that one
    assert CascadeStore(chain.ledger.store).start(record)  # stands for one cut short
    with pytest.raises(CascadeBusy, match="plan the cascade again"):
        apply_planned(context, "ledger", targets)
    assert CascadeStore(chain.ledger.store).active() is None


def test_a_stored_reader_whose_code_is_not_given_is_named(chain: FakeChain) -> None:
    context = _context(chain)
    context.code = {k: v for k, v in context.code.items() if k != "trends"}
    run = cascade_restore(context, "ledger", 1)
    assert run.refused and run.plan is not None
    refused = [m for m in run.plan.members if m.action is MemberAction.REFUSED]
    assert [m.pipeline for m in refused] == ["trends"]
    assert "its code is not given" in refused[0].reason
    assert _heads(chain) == (2, 2, 2)


def test_a_failed_cascade_whose_retire_died_is_retired_as_it_ended(
    chain: FakeChain, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retire writes the history, then frees the active record; a process that died
    in between left a finished record active. The next call used to run its failed
    step again without the gate and record the cascade as DONE (found by a reviewer)."""

    def refuse(point: str, pipeline: str) -> None:
        if (point, pipeline) == ("before-restore", "trends"):
            raise RestoreRefused("trends: a target file was damaged since the plan")

    def die_after_the_history(self: CascadeStore, record: Any) -> None:
        self._store.put(history_key(record.cascade_id), record.encode())
        raise Crash("killed before the active record was freed")

    with monkeypatch.context() as m:
        m.setattr(CascadeStore, "retire", die_after_the_history)
        with pytest.raises(Crash):
            cascade_restore(_context(chain), "ledger", 1, hook=refuse)
    cascades = CascadeStore(chain.ledger.store)
    active = cascades.active()
    assert active is not None and active[0].status is CascadeStatus.FAILED
    assert _heads(chain) == (1, 1, 2)
    assert chain.epoch(chain.trends) == 3  # the fences were lifted: it runs on

    run = cascade_restore(_context(chain), "reports", None)
    assert run.resumed and run.record is not None
    assert run.record.status is CascadeStatus.FAILED
    assert run.record.failure is not None and "damaged since the plan" in run.record.failure
    assert _heads(chain) == (1, 1, 3)  # trends' checkpoint 3 is not thrown away
    assert cascades.active() is None
    history = cascades.history(active[0].cascade_id)
    assert history is not None and history.status is CascadeStatus.FAILED


@pytest.mark.parametrize("how", ["cascade", "plain restore"])
def test_a_downstream_checkpoint_in_flight_never_completes_with_what_a_restore_took_back(
    tmp_path: Path, how: str
) -> None:
    """Reports 2 read ledger 2 and acked; then ledger was restored to 1. Its finalize
    used to complete it and publish, and trends read that output (found by a reviewer):
    the epoch's read was checked, the completion was not."""
    chain = FakeChain.on((tmp_path / "store").as_uri())
    for driver in (chain.ledger, chain.reports, chain.trends):
        chain.epoch(driver)
    chain.epoch(chain.ledger)
    in_flight = chain.reports.trigger()
    ack_all(chain.reports, in_flight)
    if how == "cascade":
        run = cascade_restore(_context(chain), "ledger", 1)
        assert run.record is not None and run.record.status is CascadeStatus.DONE
    else:
        chain.restore(chain.ledger, 1)

    outcome = finalize(chain.reports, in_flight.checkpoint_id).outcome
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.RESTORED
    assert "upstream pipeline 'ledger' was restored to checkpoint 1" in outcome.message
    assert _heads(chain) == (1, 1, 1)
    # what trends reads of reports is still checkpoint 1's
    assert chain.epoch(chain.trends) == 2
    read = chain.trends.coordinator.get_outcome(2)
    assert read is not None
    assert {str(UpstreamPosition.of(b)) for b in read.pending.barrier.values()} == {"checkpoint 1"}


def test_gc_never_completes_a_downstream_checkpoint_with_what_a_restore_took_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The driver died after reports' acks; ledger was then restored. `batchpoint gc`
    settles without the code, and used to complete the checkpoint (found left alone
    in an earlier session): its recorded topology names what it read."""
    root = (tmp_path / "store").as_uri()
    monkeypatch.setenv("BATCHPOINT_ROOT", root)
    monkeypatch.delenv("BATCHPOINT_PIPELINE_REF", raising=False)
    chain = FakeChain.on(root)
    for driver in (chain.ledger, chain.reports):
        chain.epoch(driver)
    chain.epoch(chain.ledger)
    in_flight = chain.reports.trigger()
    ack_all(chain.reports, in_flight)
    chain.restore(chain.ledger, 1)

    assert main(["gc", "--pipeline", "reports"]) == 0, capsys.readouterr()
    outcome = chain.reports.coordinator.get_outcome(in_flight.checkpoint_id)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.RESTORED
    assert "upstream pipeline 'ledger' was restored to checkpoint 1" in outcome.message
    assert chain.reports.coordinator.control_record().head == 1


def test_a_repair_as_the_cascade_finishes_leaves_no_fence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reports' control record is lost after its step; repair rebuilds it, with the
    fence of the cascade still applying, just after the cascade lifted its fences and
    before it says it is over: the cascade lifts them again once it is."""
    chain = FakeChain.on((tmp_path / "store").as_uri())
    for driver in (chain.ledger, chain.reports, chain.trends):
        chain.epoch(driver)
    chain.epoch(chain.ledger)
    chain.epoch(chain.reports)
    reports = chain.reports.coordinator
    real = cascade_module.finished
    repaired = []

    def repair_first(record: Any, now: float, failure: str | None = None) -> Any:
        if not repaired:
            reports.store.delete(reports.control.key)
            repaired.append(reports.repair())
            assert reports.control.load().cascade is not None  # the cascade still applies
        return real(record, now, failure)

    monkeypatch.setattr(cascade_module, "finished", repair_first)
    run = cascade_restore(_context(chain), "ledger", 1)
    assert run.record is not None and run.record.status is CascadeStatus.DONE
    assert repaired and repaired[0].written
    assert reports.control.load().cascade is None
    assert chain.epoch(chain.reports) > 0  # its triggers run


def test_a_downstream_checkpoint_reading_what_stands_completes(tmp_path: Path) -> None:
    chain = FakeChain.on((tmp_path / "store").as_uri())
    chain.epoch(chain.ledger)
    chain.epoch(chain.ledger)
    assert chain.epoch(chain.reports) == 1  # read ledger 2, which stood when it completed
    assert chain.reports.coordinator.control_record().head == 1


def test_a_kept_reader_completing_between_the_plan_and_the_restore_is_named(
    tmp_path: Path,
) -> None:
    """Reports' head read ledger 1, so the plan keeps it; its checkpoint 2 (read ledger
    2) completes after the plan and before ledger's restore: the cascade used to end
    DONE with reports reading what it took back."""
    chain = FakeChain.on((tmp_path / "store").as_uri())
    for driver in (chain.ledger, chain.reports, chain.trends):
        chain.epoch(driver)
    chain.epoch(chain.ledger)
    in_flight = chain.reports.trigger()
    ack_all(chain.reports, in_flight)

    def complete_reports(point: str, pipeline: str) -> None:
        if (point, pipeline) == ("before-restore", "ledger"):
            done = finalize(chain.reports, in_flight.checkpoint_id).outcome
            assert done is not None and done.status is CheckpointStatus.COMPLETED

    run = cascade_restore(_context(chain), "ledger", 1, hook=complete_reports)
    assert run.plan is not None
    assert {m.pipeline: m.action for m in run.plan.members}["reports"] is MemberAction.KEEP
    assert run.record is not None and run.record.status is CascadeStatus.FAILED
    assert run.record.failure is not None and "pipeline 'reports'" in run.record.failure
    assert "batchpoint restore --pipeline <name>" in run.record.failure
    assert _heads(chain) == (1, 2, 1)


def test_a_plain_restore_of_a_pipeline_a_cascade_holds_is_refused(chain: FakeChain) -> None:
    """A cascade cut short holds its pipelines; a plain restore of one used to go
    through, and the cascade's resume then restored it back to its own target."""

    def crash(point: str, pipeline: str) -> None:
        if (point, pipeline) == ("after-restore", "ledger"):
            raise Crash("killed after the ledger's restore")

    with pytest.raises(Crash):
        cascade_restore(_context(chain), "ledger", 1, hook=crash)
    assert _heads(chain) == (1, 2, 2)
    with pytest.raises(RestoreRefused, match="cascade") as refused:
        chain.restore(chain.reports, 1)
    assert "batchpoint restore --pipeline ledger --cascade" in str(refused.value)
    assert _heads(chain) == (1, 2, 2)

    run = cascade_restore(_context(chain), "ledger", None)
    assert run.resumed and run.record is not None and run.record.status is CascadeStatus.DONE
    assert _heads(chain) == (1, 1, 1)


def test_an_upstreams_damage_does_not_block_a_readers_finalize(tmp_path: Path) -> None:
    """Reports 2 acked; then ledger's control record is damaged. The finalize's check of
    what it read raised out of finalize and settle, blocking reports' GC and cleanup
    (found by the reviewer of the diff): the epoch's read was checked, so it completes."""
    chain = FakeChain.on((tmp_path / "store").as_uri())
    chain.epoch(chain.ledger)
    chain.epoch(chain.reports)
    chain.epoch(chain.ledger)
    in_flight = chain.reports.trigger()
    ack_all(chain.reports, in_flight)
    chain.ledger.store.put(chain.ledger.coordinator.control.key, b"{not json")

    settled = chain.reports.coordinator.settle()
    assert [o.status for o in settled] == [CheckpointStatus.COMPLETED]
    assert chain.reports.coordinator.control_record().head == in_flight.checkpoint_id


def test_a_cascade_is_not_failed_by_a_pipeline_it_does_not_concern(chain: FakeChain) -> None:
    """Reports was left behind by an earlier plain restore of ledger; a cascade of trends
    alone ended FAILED naming reports (found by the reviewer of the diff): only readers
    of what the cascade restored, and only what completed since it started, count."""
    chain.restore(chain.ledger, 1)
    run = cascade_restore(_context(chain), "trends", 1)
    assert run.record is not None and run.record.status is CascadeStatus.DONE, run.record
    assert _heads(chain) == (1, 2, 1)


def test_a_resume_that_lost_the_race_leaves_no_fence_and_old_fences_are_lifted(
    chain: FakeChain,
) -> None:
    """Two resumers of one cascade cut short: the first finishes it; the second, going on
    with the record it read, fenced every member again and died on the record being
    gone, and nothing could lift those fences (found by the reviewer of the diff). It
    now lifts what it set; and a fence whose cascade is over (its process died holding
    it) is lifted by the next plain restore or cascade."""

    def crash(point: str, pipeline: str) -> None:
        if (point, pipeline) == ("after-restore", "ledger"):
            raise Crash("killed after the ledger's restore")

    with pytest.raises(Crash):
        cascade_restore(_context(chain), "ledger", 1, hook=crash)
    cascades = CascadeStore(chain.ledger.store)
    found = cascades.active()
    assert found is not None
    read_before = found[0]
    assert cascade_restore(_context(chain), "ledger", None).resumed
    with pytest.raises(CascadeBusy):
        cascade_module._drive(_context(chain), cascades, read_before, {}, None)
    drivers = (chain.ledger, chain.reports, chain.trends)
    assert [d.coordinator.control_record().cascade for d in drivers] == [None] * 3
    assert chain.epoch(chain.reports) == 3

    # a process that died holding the fence of a cascade that is over
    chain.reports.coordinator.hold_for_cascade(read_before.fence())
    with pytest.raises(TriggerRefused):
        chain.reports.trigger()
    chain.restore(chain.reports, 1)
    assert chain.reports.coordinator.control_record().cascade is None
    assert chain.epoch(chain.reports) == 4
