"""Invariant 15: a restore whose deploy would leave stored state unrestored is refused
before any Spark job. The quality gate (Great Expectations over a candidate's state) is
a Spark job and its verdicts quarantine, so the planner judges the code's deploy on a
candidate once its files and records hold and before the gate reads it: the refusal
is the DeployRefused `apply` raises, no gate ran, nothing was quarantined.

Built by the real coordinator on a local store, no Spark: the operator's tasks ack
state files whose handles record the Spark schema of the declaration (as
test_deploy_base_verdicts.py does). The gate is a callable that records its calls
(the Spark job it stands for never runs here).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from batchpoint.errors import DeployRefused
from batchpoint.ops.cascade import CascadeContext, plan_cascade_of
from batchpoint.ops.gates import GateChoice
from batchpoint.ops.restore import apply_restore, restore
from batchpoint.protocol.checkpoint import CompletedCheckpoint, FileHandle, PendingCheckpoint
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.metrics import TaskMetrics
from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.protocol.quarantine import QuarantineStore
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.gated_restore import gated_restore
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.cascade_plan import MemberAction
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import GateOptions, GateResult, RestoreCandidate
from batchpoint.runtime.streams import state_stream
from batchpoint.spark.compat import from_arrow_schema
from batchpoint.state.keygroups import key_group_range_for_subtask
from batchpoint.storage import StoreRef

EVENTS = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("n", pa.int64())])
STATE = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("c", pa.int64())])


def build(states: dict[str, pa.Schema]) -> Pipeline:
    p = Pipeline("gated")
    p.source("events", schema=EVENTS, root="in/events")
    p.operator("op", inputs=["events"], key=["k"], states=states)(lambda ctx: None)
    p.sink("out", inputs=["op"], key=["k"])
    return p


def _handles(driver: PipelineDriver, pending: PendingCheckpoint, code: Pipeline, task):
    op = driver.coordinator.load_spec().operator(task.operator)
    if op.kind is not OperatorKind.OPERATOR:
        return []
    opdef = next(o for o in code.operators.values() if o.name == task.operator)
    groups = key_group_range_for_subtask(op.max_parallelism, op.parallelism, task.subtask)
    handles = []
    for name, declared in opdef.states.items():
        data = f"{task} {pending.checkpoint_id} {name}\n".encode()
        key = f"gated/files/{task.operator}-{name}-{task.subtask}-{pending.checkpoint_id}.parquet"
        driver.store.put(key, data)
        meta = {"spark_schema": from_arrow_schema(declared).json()}
        stream = state_stream(opdef.state_uid(name))
        digest = hashlib.sha256(data).hexdigest()
        handles.append(
            FileHandle(key, len(data), digest, 1, (groups.start, groups.end), stream, meta)
        )
    return handles


def epoch(ref: StoreRef, code: Pipeline) -> CompletedCheckpoint:
    """One checkpoint of `code`, completed by acks of fake state files."""
    driver = PipelineDriver(code, ref, CheckpointConfig())
    pending = driver.trigger()
    for task in pending.expected_tasks:
        handles = _handles(driver, pending, code, task)
        driver.coordinator.acknowledge(pending.checkpoint_id, task, "a1", handles, TaskMetrics())
    outcome = driver.coordinator.try_finalize(pending.checkpoint_id)
    assert outcome is not None and outcome.completed is not None, outcome
    driver.notify_complete(pending.checkpoint_id)
    return outcome.completed


class RecordingGate:
    """Stands for the Great Expectations Spark job: records each candidate it is asked
    about; fails the newest (3), so that a restore it judged would fall back."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, candidate: RestoreCandidate) -> GateResult:
        self.calls.append(candidate.checkpoint_id)
        return GateResult(candidate.checkpoint_id != 3, "row counts")


@pytest.fixture
def dropped(tmp_path: Path) -> PipelineDriver:
    """Three checkpoints of code with states a and b; the driver runs code without b."""
    ref = StoreRef.of((tmp_path / "store").as_uri())
    v1 = build({"a": STATE, "b": STATE})
    for _ in range(3):
        epoch(ref, v1)
    return PipelineDriver(build({"a": STATE}), ref, CheckpointConfig())


def apply_s_refusal(driver: PipelineDriver, checkpoint_id: int) -> str:
    """What `apply` refuses the deploy with today: the one decision, on that checkpoint."""
    with pytest.raises(DeployRefused) as refused:
        driver.check_deploy(driver.coordinator.completed.get(checkpoint_id))
    return str(refused.value)


def nothing_quarantined(driver: PipelineDriver) -> bool:
    return QuarantineStore(driver.store, PipelineLayout("gated")).ids() == []


@pytest.mark.parametrize("check_only", [False, True])
def test_a_restore_refuses_the_deploy_before_the_gate_runs(
    dropped: PipelineDriver, check_only: bool
) -> None:
    # check_only: the restore DAG's check task; else `batchpoint restore`
    gate = RecordingGate()
    with pytest.raises(DeployRefused) as refused:
        restore(
            dropped, "latest", GateChoice(gate, "fake gate"), GateOptions(), check_only=check_only
        )
    assert str(refused.value) == apply_s_refusal(dropped, 3)
    assert gate.calls == []  # no Spark job, no verdict
    assert nothing_quarantined(dropped)
    assert dropped.coordinator.head.get().checkpoint_id == 3


def test_an_allowed_deploy_is_gated_and_restored_with_the_allowance(
    dropped: PipelineDriver,
) -> None:
    gate = RecordingGate()
    run = restore(
        dropped, "latest", GateChoice(gate, "fake gate"), GateOptions(),
        allow_non_restored_state=True,
    )  # fmt: skip
    assert gate.calls == [3, 2] and run.plan.chosen_id == 2
    assert dropped.coordinator.head.get().checkpoint_id == 2
    assert dropped.coordinator.control.load().restore.allow_non_restored_state


def test_apply_still_judges_a_plan_made_elsewhere(dropped: PipelineDriver) -> None:
    # the check task allowed it; the restore task is not told to
    gate = RecordingGate()
    checked = restore(
        dropped, "latest", GateChoice(gate, "fake gate"), GateOptions(),
        check_only=True, allow_non_restored_state=True,
    )  # fmt: skip
    with pytest.raises(DeployRefused) as refused:
        apply_restore(dropped, checked.plan)
    assert str(refused.value) == apply_s_refusal(dropped, 2)
    assert dropped.coordinator.head.get().checkpoint_id == 3


def test_a_cascade_refuses_the_root_before_its_gate_runs(dropped: PipelineDriver) -> None:
    gate = RecordingGate()
    context = CascadeContext(
        {"gated": dropped.pipeline}, dropped.store_ref, CheckpointConfig(), lambda _p: gate
    )
    plan = plan_cascade_of(context, "gated", "latest", record=True)
    (member,) = plan.members
    assert member.action is MemberAction.REFUSED
    assert member.reason == apply_s_refusal(dropped, 3)
    assert gate.calls == [] and nothing_quarantined(dropped)


def test_the_quality_gates_restore_refuses_before_the_gate_runs(
    dropped: PipelineDriver,
) -> None:
    gate = QualityGate(dropped.pipeline, dropped.store_ref)  # integrity only: no suites
    with pytest.raises(DeployRefused) as refused:
        gated_restore(dropped, gate)
    assert str(refused.value) == apply_s_refusal(dropped, 3)
    # the gate never ran: it stores a report of each candidate it judges
    assert [gate.stored_report(cid) for cid in (3, 2, 1)] == [None, None, None]
    assert gate.quarantine.ids() == [] and nothing_quarantined(dropped)


def code_without_b() -> Pipeline:
    """The pipeline reference the restore DAG's check task loads."""
    return build({"a": STATE})


@pytest.mark.airflow
@pytest.mark.parametrize("allow", [False, True])
def test_the_restore_dags_check_task_refuses_before_the_gate_runs(
    dropped: PipelineDriver, allow: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Airflow's home is this test's unless tests/airflow/conftest.py set one already.
    monkeypatch.setenv("AIRFLOW_HOME", os.environ.get("AIRFLOW_HOME", str(tmp_path / "af")))
    compat = pytest.importorskip("batchpoint.airflow.compat")
    from batchpoint.airflow.operators.restore import RestoreCheckOperator

    for name in [n for n in os.environ if n.startswith("BATCHPOINT_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("BATCHPOINT_ROOT", dropped.store_ref.uri)
    gate = RecordingGate()
    check = RestoreCheckOperator(
        task_id="check", pipeline_ref=f"{__name__}:code_without_b", gate=gate, source="latest"
    )
    context: dict[str, Any] = {"params": {"allow_non_restored_state": allow}}
    if not allow:
        with pytest.raises(compat.AirflowFailException) as failed:
            check.execute(context)  # type: ignore[arg-type]
        # as the check of the chosen candidate failed it: the refusal and how to allow it
        refused = f"{apply_s_refusal(dropped, 3)} (the form's 'Allow non-restored state' allows it)"
        assert str(failed.value) == refused
        assert gate.calls == [] and nothing_quarantined(dropped)
        return
    # allowed: the check plans with the allowance (gated as usual); the head stays
    assert check.execute(context)["checkpoint_id"] == 2  # type: ignore[arg-type]
    assert gate.calls == [3, 2] and dropped.coordinator.head.get().checkpoint_id == 3
