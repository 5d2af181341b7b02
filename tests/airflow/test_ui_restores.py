"""Restores as Flink's web UI shows them ("Latest Restore"): after real restores (the one
restore path, RestorePlanner, with and without a gate) the pipeline's status, in the JSON
and on its page, says when the last one happened, to which checkpoint, its restore
generation and whether a gate passed it; the history marks each checkpoint a restore went
back to. Airflow's own API app and plugin, a local store, checkpoints without Spark."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from support.airflow_ui import on_local_store, viewer_client

pytestmark = [pytest.mark.airflow]


@pytest.fixture
def local(bp, monkeypatch, tmp_path: Path):
    return on_local_store(bp, monkeypatch, tmp_path)


@pytest.fixture
def api(local, monkeypatch):
    with viewer_client(monkeypatch) as client:
        yield client


def status(api) -> dict:
    (listed,) = api.get("/batchpoint/api/pipelines").json()
    page = api.get("/batchpoint/api/payments/checkpoints").json()
    assert page["overview"] == listed["overview"]  # one status, wherever it is read
    return listed["overview"]


def marks(api) -> dict[int, list[tuple[int, str | None]]]:
    """checkpoint id -> the restores that went back to it: (generation, gate)."""
    rows = api.get("/batchpoint/api/payments/checkpoints").json()["checkpoints"]
    restores = {r["checkpoint_id"]: r["restores"] for r in rows}
    return {cid: [(e["restore_generation"], e["gate"]) for e in r] for cid, r in restores.items()}


def test_the_latest_restore_is_in_the_status_and_the_history_marks_each(local, api) -> None:
    from batchpoint.runtime.restore import GateResult, RestorePlanner, restore_checkpoint
    from support.fake_epochs import epoch

    driver = local.driver()
    for _ in range(3):
        epoch(driver)
    assert status(api)["latest_restore"] is None
    assert "<dt>latest restore</dt><dd>none</dd>" in api.get("/batchpoint/payments").text

    # a gated restore to 2, as the restore DAG runs one: the gate passed the target
    seen: list[int] = []

    def gate(candidate):
        seen.append(candidate.checkpoint_id)
        return GateResult(True, {"rows_ok": True}, name="row-count gate")

    before = time.time()
    planner = RestorePlanner(driver, gate=gate)
    planner.apply(planner.plan(2))
    latest = status(api)["latest_restore"]
    assert seen == [2]
    assert before <= latest.pop("restored_at") <= time.time()
    assert latest == {
        "restore_generation": 1,
        "checkpoint_id": 2,
        "previous_head": 3,
        "gate": "row-count gate",
        "gated": True,
        "passed_over": [],
        "quarantined": [],
        "in_progress": False,
    }
    assert marks(api) == {3: [], 2: [(1, "row-count gate")], 1: []}

    # the pipeline goes on, then an ungated restore goes back to 2 again
    assert epoch(driver) == 4
    restore_checkpoint(driver, 2)
    latest = status(api)["latest_restore"]
    assert (latest["restore_generation"], latest["checkpoint_id"]) == (2, 2)
    assert (latest["previous_head"], latest["gated"], latest["gate"]) == (4, False, None)
    assert marks(api) == {4: [], 3: [], 2: [(2, None), (1, "row-count gate")], 1: []}

    page = api.get("/batchpoint/payments").text
    assert "<dt>latest restore</dt><dd>to checkpoint 2: restore generation 2 at " in page
    assert ", ungated</dd>" in page
    (row,) = [r for r in page.split("<tr ") if "checkpoints/2'>2</a>" in r]
    assert row.startswith("class='head restored'")  # restored to: the head again
    assert "restore generation 2 at " in row and "gated by the row-count gate" in row
    assert "restored" not in next(r for r in page.split("<tr ") if "checkpoints/4'>4</a>" in r)
