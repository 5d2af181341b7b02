"""The restore DAG as a deployment runs it: a real api-server and scheduler
(LocalExecutor), so its check and restore tasks are two task runs in processes of their
own, the plan crossing between them as the check's XCom through the execution API.
The quality gate (the real QualityRestoreGate, integrity only: no Spark) fails and
quarantines the newest checkpoint, whose file has a flipped byte; the restore goes to the
one before it and its records say so: gated, by which gate, what it passed over and
quarantined, on the status page the api-server serves as in the stored records."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support import fake_epochs
from support.airflow_stack import AirflowStack

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.s3]

#: The deployment's gate (BATCHPOINT_QUALITY_GATE), a module the task processes import.
GATE_MODULE = """
from batchpoint.quality.hook import restore_gate
from batchpoint.quality.suites import PipelineQuality

# Integrity only (every file's sha256): no Spark, and a flipped byte fails it.
gate = restore_gate("demo.payments:pipeline", quality=PipelineQuality(count_rows=False))
"""


def test_the_restore_dags_two_tasks_record_a_gated_restore(bp, airflow_home, tmp_path):
    from batchpoint.protocol.restores import RestoreRecord
    from batchpoint.quality.gate import QualityGate
    from demo.payments import pipeline

    driver = bp.driver()
    for _ in range(3):
        fake_epochs.epoch(driver)
    fake_epochs.break_a_file(driver, 3)
    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "restore_dag_gate.py").write_text(GATE_MODULE)
    bp.set(quality_gate="restore_dag_gate:gate")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(gates), os.environ["PYTHONPATH"]])}
    # The gate builds its QualityGate from the environment (Settings.from_env), as the
    # demo's does, not from the task's storage connection: the store's keys there too.
    env.update({f"BATCHPOINT_S3_{k.upper()}": v for k, v in bp.seaweed.storage_options().items()})
    stack = AirflowStack(tmp_path / "airflow", Path(airflow_home) / "airflow.db", env)
    serialized = stack.airflow("dags", "reserialize")
    assert serialized.returncode == 0, serialized.stderr[-2000:]

    with stack:
        stack.start(("api-server", "scheduler"))
        stack.wait_healthy()
        stack.api(
            "PATCH",
            "/dags/payments_restore",
            params={"update_mask": "is_paused"},
            json={"is_paused": False},
        )
        run = stack.api(
            "POST",
            "/dags/payments_restore/dagRuns",
            json={"logical_date": None, "conf": {"source": "latest", "dry_run": False}},
        )
        state = stack.wait_for_run("payments_restore", run["dag_run_id"], timeout=600)
        states = stack.task_states("payments_restore", run["dag_run_id"])
        assert state == "success", (states, stack.tail("scheduler"))
        assert states == {"check": "success", "restore": "success"}
        (listed,) = stack.get("/batchpoint/api/pipelines").json()
        page = stack.get("/batchpoint/payments").text

    c = driver.coordinator
    assert c.head.get().checkpoint_id == 2
    assert QualityGate(pipeline, bp.settings.store_ref).quarantine.ids() == [3]
    # the restore task applied the check task's plan: its record is the gate's outcome
    restore = c.control.load().restore
    assert restore is not None and restore.target == 2
    assert (restore.gate, restore.passed_over, restore.quarantined) == ("quality gate", (3,), (3,))
    stored = c.reports.restore_record(1)
    assert stored is not None
    record = RestoreRecord.decode(stored.key, stored.data)
    assert (record.gate, record.passed_over, record.quarantined) == ("quality gate", (3,), (3,))
    # ...and what the api-server serves reads it so: the status JSON and the page
    latest = listed["overview"]["latest_restore"]
    assert (latest["checkpoint_id"], latest["gated"], latest["gate"]) == (2, True, "quality gate")
    assert (latest["passed_over"], latest["quarantined"]) == ([3], [3])
    line = "gated by the quality gate; passed over checkpoint 3 (quarantined 3)"
    assert "<dt>latest restore</dt><dd>to checkpoint 2: restore generation 1 at " in page
    assert f", {line}</dd>" in page, page[page.find("latest restore") :][:400]
