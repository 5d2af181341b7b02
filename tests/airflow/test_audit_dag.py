"""Audited checkpoints in the checkpoint DAG (BATCHPOINT_AUDIT=true): `trigger` marks the
checkpoint, `audit` judges its state between `wait_for_acks` and `finalize`, and
`cleanup` settles what the audit left.

The fake spark-submit writes no real state (one small text file per subtask), so the
quick tests put a stand-in verdict behind the audit task's gate; the wiring around it
(the mark, the abort, the stored report, no publication, the failure count, cleanup) is
the real one. The one slow test runs real Spark jobs and the payments suites: a good
epoch passes its audit, then a bad deploy (`payments_buggy`, which doubles balances) is
caught by the recomputed balance sample and aborted with reason "quality gate"."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from batchpoint.protocol.checkpoint import (
    AUDIT_PROPERTY,
    CheckpointFailureReason,
    CheckpointStatus,
    CompletedCheckpoint,
)
from batchpoint.quality.findings import Check, Finding
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.report import CandidateReport, GateMode
from support.payments import assert_sinks_match_reference

pytestmark = [pytest.mark.airflow, pytest.mark.s3]

SINKS = ("balances_table", "alerts")


class VerdictGate(QualityGate):
    """The gate with its verdict given in advance: no Spark, no suites."""

    verdict: str = "pass"  # "pass", "fail" or "crash"

    def prepare(self) -> None:
        pass  # builds no suites (that would import Great Expectations)

    def evaluate_completed(
        self, completed: CompletedCheckpoint, mode: GateMode = GateMode.AUDIT
    ) -> CandidateReport:
        if self.verdict == "crash":
            raise RuntimeError("the audit's Spark session died (injected)")
        findings = []
        if self.verdict == "fail":
            findings.append(
                Finding("balances/balances", f"{Check.SAMPLE}:balance-recompute", "3 keys differ")
            )
        return CandidateReport(
            pipeline=self.pipeline.name,
            checkpoint_id=completed.checkpoint_id,
            checkpoint_type=completed.pending.type.value,
            mode=mode,
            evaluated_at=self.clock(),
            findings=findings,
            suites_run=True,
        )


@pytest.fixture
def verdict(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Set the verdict of the audit task's gate (dag.test runs tasks in this process)."""

    @contextmanager
    def fake_audit_gate(pipeline: Any, store_ref: Any, spark_master: str, **kw: Any) -> Iterator:
        yield VerdictGate(pipeline, store_ref, log=kw.get("log", print))

    monkeypatch.setattr("batchpoint.airflow.operators.audit.audit_gate", fake_audit_gate)

    def set_verdict(value: str) -> None:
        monkeypatch.setattr(VerdictGate, "verdict", value)

    return set_verdict


def manifests(bp: Any) -> dict[str, Any]:
    sinks = bp.driver().sinks
    return {s: (m.current if (m := sinks.manifest(s)) else None) for s in SINKS}


def test_a_passing_audit_completes_and_a_failing_one_aborts_with_nothing_published(
    bp, write_epoch, verdict, capsys
):
    bp.set(audit="true")
    c = bp.driver().coordinator

    verdict("pass")
    write_epoch(0)
    run, states = bp.run("payments_checkpoint")
    assert run.state == "success", states
    assert states["audit"] == states["finalize"] == states["cleanup"] == "success"
    first = c.get_outcome(1)
    assert first.status is CheckpointStatus.COMPLETED
    assert first.pending.properties[AUDIT_PROPERTY] is True  # marked by the trigger
    assert c.head.get().checkpoint_id == 1
    assert manifests(bp) == {"balances_table": 1, "alerts": 1}
    assert c.store.exists(c.layout.quality_report(1))

    verdict("fail")
    write_epoch(1)
    run, states = bp.run("payments_checkpoint")
    assert run.state == "failed"
    assert states["wait_for_acks"] == "success"
    assert states["audit"] == "failed"
    assert states["finalize"] == "upstream_failed"
    assert states["cleanup"] == "failed"  # ran, and reported the abort
    second = c.get_outcome(2)
    assert second.status is CheckpointStatus.ABORTED
    assert second.reason is CheckpointFailureReason.QUALITY_GATE
    assert second.reason.code == "quality gate"
    assert "balance-recompute" in second.message
    assert c.layout.quality_report(2) in second.message  # points at the stored report
    assert c.store.exists(c.layout.quality_report(2))
    # nothing published from it, the previous checkpoint stays the head, and it counts
    assert manifests(bp) == {"balances_table": 1, "alerts": 1}
    assert c.head.get().checkpoint_id == 1
    assert c.failures.state().consecutive_failures == 1
    assert list(c.store.list(c.layout.data_prefix(2))) == []  # cleanup removed its state
    # the task log (dag.test prints it) has the report's readable summary
    log = capsys.readouterr().out
    assert "audit FAILED" in log and "3 keys differ" in log


def test_an_audit_that_gives_no_verdict_is_aborted_by_cleanup(bp, write_epoch, verdict):
    bp.set(audit="true")
    verdict("crash")
    write_epoch(0)
    run, states = bp.run("payments_checkpoint")

    assert run.state == "failed"
    assert states["audit"] == "failed"
    assert states["cleanup"] == "failed"  # not skipped as "waiting for its base"
    c = bp.driver().coordinator
    outcome = c.get_outcome(1)
    assert outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.FINALIZE_FAILED
    assert "without the audit's verdict" in outcome.message
    assert c.failures.state().consecutive_failures == 1
    assert c.pending_checkpoints() == []  # nothing left to hold the next trigger back
    assert manifests(bp) == {"balances_table": None, "alerts": None}


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_real_suites_pass_a_good_epoch_and_abort_a_bad_deploy(
    bp, write_epoch, capsys, connect_server, spark
):
    """The operator jobs are clients of the Spark Connect server; the audit runs inside
    dag.test(), in this process, which holds the tests' classic session (`spark`): it
    uses that one, as one Python process cannot hold a classic and a Connect session."""
    from demo import payments_buggy

    bp.connect(connect_server)
    bp.set(audit="true", checkpoint_timeout=1800, ack_poll_interval=1)
    c = bp.driver().coordinator

    write_epoch(0)
    run, states = bp.run("payments_checkpoint")
    assert run.state == "success", states
    assert c.get_outcome(1).status is CheckpointStatus.COMPLETED
    report = c.store.get(c.layout.quality_report(1)).data.decode()  # the suites' own
    assert "payments_balances" in report and "balance-recompute" in report
    assert_sinks_match_reference(bp.store, bp.driver().coordinator, 1)
    published = manifests(bp)

    # the bad deploy: balances doubled, plausible to the JSON suites
    bp.set(pipeline_ref=payments_buggy.REF)
    write_epoch(1)
    capsys.readouterr()
    run, states = bp.run("payments_checkpoint")
    log = capsys.readouterr().out
    assert "audit FAILED" in log and "balance-recompute" in log
    assert run.state == "failed"
    assert states["audit"] == "failed" and states["finalize"] == "upstream_failed"
    outcome = c.get_outcome(2)
    assert outcome.reason is CheckpointFailureReason.QUALITY_GATE
    assert "balance-recompute" in outcome.message
    assert c.head.get().checkpoint_id == 1
    assert manifests(bp) == published
    # still epoch 0's output, nothing of the bad one
    assert_sinks_match_reference(bp.store, bp.driver().coordinator, 1)
    assert c.failures.state().consecutive_failures == 1
