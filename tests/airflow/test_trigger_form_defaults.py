"""Every trigger form can be submitted as it opens: no field Airflow's form would require
(a type without null whose default is empty) unless the DAG really needs a value there,
and a run with the defaults does what the form says. The browser's side of it, pressing
Trigger in Airflow's own form, is test_ui_forms_browser.py; the Checkpoints page's
paused-DAG notice and unpause box are checked here on the rendered HTML."""

from __future__ import annotations

from typing import Any

import pytest

from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.dag_factory import _savepoint_params
from batchpoint.airflow.restore_form import restore_params
from batchpoint.airflow.ui_pages import render_checkpoint, render_pipeline
from batchpoint.airflow.ui_schedule import paused_notice
from demo.payments import pipeline

#: The fields whose value a run cannot do without: each has a default that fills it.
REALLY_REQUIRED = {"source", "dry_run", "claim_mode", "allow_non_restored_state"}
DAGS = {k: f"payments_{k}" for k in ("checkpoint", "savepoint", "restore")}


def _required_by_airflows_form(schema: dict[str, Any]) -> bool:
    # The rule of Airflow 3's trigger form: a field whose type does not admit null is
    # required, and an empty text field is null.
    kind = schema.get("type")
    return bool(kind) and not (isinstance(kind, list) and "null" in kind)


@pytest.mark.parametrize("form", ["savepoint", "restore"])
def test_no_field_is_required_that_a_run_can_do_without(form):
    deployment = AirflowDeployment.from_env(
        {"BATCHPOINT_ROOT": "file:///tmp/unused", "BATCHPOINT_SPARK_MODE": "local"}
    )
    params = (
        _savepoint_params(pipeline, deployment) if form == "savepoint" else restore_params(pipeline)
    )
    for name, param in params.items():
        if _required_by_airflows_form(param.schema):
            assert param.value not in (None, ""), f"{form}.{name} is required and empty"
            if param.schema.get("type") not in ("boolean", "array"):
                assert name in REALLY_REQUIRED, f"{form}.{name} need not be required"


def test_the_restore_confirmation_is_asked_only_with_the_gate_off():
    params = restore_params(pipeline)
    assert params["quality_gate"].value is True  # the harmless default ...
    assert params["confirm_ungated"].value is None  # ... needs no confirmation
    assert "null" in params["confirm_ungated"].schema["type"]


def _about(pending: list[int]) -> dict[str, Any]:
    overview = {"status": "running", "head": 1, "pending": pending}
    return {"pipeline": "payments", "root": "file:///r", "overview": overview}


PAGE = {"checkpoints": [], "older": None, "summary": {"count": 0, "completed": 0, "failed": 0}}


def _page(html_paused: set[str], pending: dict[int, float]) -> str:
    page = {**PAGE, "summary": {**PAGE["summary"], "in_progress": len(pending)}}
    return render_pipeline(_about(list(pending)), page, {}, DAGS, html_paused, pending)


def test_a_paused_checkpoint_dag_is_shown_with_its_pending_checkpoints_deadline():
    deadline = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
    html = _page({"payments_checkpoint"}, {7: deadline})
    assert "<p class='paused'>payments_checkpoint is paused: checkpoint 7 is pending" in html
    assert "2027-01-15 08:00:00 UTC" in html
    assert "payments_checkpoint is paused" not in _page(set(), {7: deadline})
    idle = paused_notice("payments_checkpoint", True, {}, now=0.0)
    assert idle is not None and "no checkpoint is taken until it is unpaused" in idle.text
    overdue = paused_notice("payments_checkpoint", True, {7: deadline}, now=deadline + 1)
    assert overdue is not None and overdue.overdue and "expired at" in overdue.text


def test_the_plugins_forms_offer_to_unpause_a_paused_dag():
    box = "name='unpause' data-role='unpause' checked"
    assert box in _page({"payments_savepoint"}, {})
    assert "Unpause payments_savepoint on trigger" in _page({"payments_savepoint"}, {})
    assert "data-role='unpause'" not in _page({"payments_checkpoint"}, {})
    detail = {
        "checkpoint_id": 3,
        "type": "checkpoint",
        "status": "head",
        "status_meaning": "completed, the newest of the current timeline",
        "trigger_time": 0.0,
        "duration_s": 1.0,
        "state_size": 1,
        "rows": 1,
        "acknowledged": 1,
        "expected": 1,
        "tasks": [],
        "files": [],
    }
    assert box in render_checkpoint("payments", detail, DAGS, {"payments_restore"})
    assert "data-role='unpause'" not in render_checkpoint("payments", detail, DAGS)


@pytest.mark.airflow
@pytest.mark.s3
def test_the_savepoint_and_restore_dags_run_with_their_forms_defaults(bp, write_epoch):
    from support.fake_epochs import epoch

    write_epoch(0)
    defaults = {"target": None, "stop_pipeline": False, "description": None}
    run, states = bp.run("payments_savepoint", defaults)
    assert run.state == "success", states
    ti = next(t for t in run.get_task_instances() if t.task_id == "export_savepoint")
    location = ti.xcom_pull(task_ids="export_savepoint")["location"]
    assert location.startswith(f"{bp.root}/savepoints/payments/savepoint-"), location

    head = epoch(bp.driver())
    conf = {name: param.value for name, param in restore_params(pipeline).items()}
    run, states = bp.run("payments_restore", conf)
    assert run.state == "success", states
    assert bp.driver().coordinator.head.get().checkpoint_id == head
