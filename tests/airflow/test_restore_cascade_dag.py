"""The restore DAG's `cascade` field under dag.test(), against SeaweedFS, on fake epochs
of the two chained pipelines (support/chained.py: ledger -> reports; no Spark, the tasks
ack stand-in files): the check task plans the cascade and hands the targets over XCom,
a dry run stops there, the restore task moves both heads, and a cascade refused by a
downstream pipeline's gate fails the check task with both heads where they were."""

from __future__ import annotations

from typing import Any

import pytest

from batchpoint.runtime.driver import PipelineDriver
from support.chained import ledger_pipeline, reports_pipeline
from support.fake_chain import fake_epoch

pytestmark = [pytest.mark.airflow, pytest.mark.s3]

REFS = "support.chained:ledger_pipeline,support.chained:reports_pipeline"


def _xcom(run: Any, task_id: str) -> Any:
    ti = next(t for t in run.get_task_instances() if t.task_id == task_id)
    return ti.xcom_pull(task_ids=task_id)


class Chain:
    """Two checkpoints of each, ledger then reports: (up1, rep1, up2, rep2)."""

    def __init__(self, bp: Any) -> None:
        bp.set(pipeline_ref=REFS)
        config = bp.deployment().checkpoint
        self.drivers = [
            PipelineDriver(p(), bp.settings.store_ref, config)
            for p in (ledger_pipeline, reports_pipeline)
        ]
        for driver in self.drivers:
            driver.coordinator.register(driver.pipeline.spec())
        ledger, reports = self.drivers
        self.ids = (
            fake_epoch(ledger),
            fake_epoch(reports),
            fake_epoch(ledger),
            fake_epoch(reports),
        )

    def heads(self) -> tuple[int | None, ...]:
        controls = [d.coordinator.control_record() for d in self.drivers]
        return tuple(None if c is None else c.head for c in controls)


def test_the_check_plans_the_cascade_and_the_restore_moves_both_heads(bp: Any) -> None:
    chain = Chain(bp)
    up1, rep1, up2, rep2 = chain.ids
    dag = bp.dags()["ledger_restore"]
    assert dag.params["cascade"] is False
    assert "Downstream here: reports." in dag.params.get_param("cascade").description

    run, states = bp.run("ledger_restore", {"source": str(up1), "cascade": True, "dry_run": True})
    assert run.state == "success", states
    assert states == {"check": "success", "restore": "skipped"}
    plan = _xcom(run, "check")["cascade"]
    assert plan["root"] == "ledger"
    assert plan["targets"] == [["ledger", up1], ["reports", rep1]]
    assert f"reports (reads ledger): restore to checkpoint {rep1}" in plan["rendered"]
    members = [(m["pipeline"], m["action"]) for m in plan["plan"]["members"]]
    assert members == [("ledger", "restore"), ("reports", "restore")]
    assert chain.heads() == (up2, rep2)

    run, states = bp.run("ledger_restore", {"source": str(up1), "cascade": True})
    assert run.state == "success", states
    assert _xcom(run, "check")["cascade"]["targets"] == [["ledger", up1], ["reports", rep1]]
    record = _xcom(run, "restore")
    assert record["status"] == "done" and record.get("failure") is None, record
    assert chain.heads() == (up1, rep1)


def test_a_refused_cascade_fails_the_check_and_moves_no_head(
    bp: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    chain = Chain(bp)
    up1, _, up2, rep2 = chain.ids
    bp.set(quality_gate="support.chained:refuse_reports")  # passes ledger's candidates
    run, states = bp.run("ledger_restore", {"source": str(up1), "cascade": True})
    assert run.state == "failed"
    assert states == {"check": "failed", "restore": "upstream_failed"}
    assert chain.heads() == (up2, rep2)
    said = capfd.readouterr().out  # the task's log
    assert "cascade refused, no head moved: pipeline 'reports'" in said
    assert "refuse_reports refuses checkpoint" in said

    # a field a cascade cannot take fails the check before anything is read
    fields = {"source": str(up1), "cascade": True, "allow_non_restored_state": True}
    run, states = bp.run("ledger_restore", fields)
    assert states == {"check": "failed", "restore": "upstream_failed"}
    # without cascade, ledger alone: its candidates pass the gate
    run, states = bp.run("ledger_restore", {"source": str(up1)})
    assert run.state == "success", states
    assert chain.heads() == (up1, rep2)
