"""The Checkpoints JSON API publishes an OpenAPI schema that describes what it answers:
every JSON route has a response model (no 200 typed as a bare object), and real answers
of Airflow's own API app, read from a local store with checkpoints of every kind,
validate against the schema the app publishes ($refs resolved from its components)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from support.airflow_ui import on_local_store, viewer_client

pytestmark = [pytest.mark.airflow]

SCHEMA_URL = "/batchpoint/api/openapi.json"


@pytest.fixture
def local(bp, monkeypatch, tmp_path: Path):
    return on_local_store(bp, monkeypatch, tmp_path)


@pytest.fixture
def api(local, monkeypatch):
    with viewer_client(monkeypatch) as client:
        yield client


def history(local) -> tuple[int, int]:
    """Completed checkpoints, an aborted one, a quality report, a quarantine mark and a
    gated restore: every optional field of the answers is both set and unset somewhere.
    The ids of a checkpoint with a report and of the aborted one."""
    from batchpoint.quality.findings import Finding
    from batchpoint.quality.quarantine import QuarantineStore
    from batchpoint.quality.report import CandidateReport, GateMode
    from batchpoint.runtime.restore import GateResult, RestorePlanner
    from support.fake_epochs import epoch, land_a_file

    driver = local.driver()
    c = driver.coordinator
    first, second = epoch(driver), epoch(driver)
    bad = Finding("balances/balances", "sample:balance-recompute", "3 of 50 keys differ")
    report = CandidateReport(
        "payments", first, "checkpoint", GateMode.RESTORE, time.time(), findings=[bad]
    )
    c.store.put(c.layout.quality_report(first), report.encode())
    QuarantineStore(c.store, c.layout).add(report, time.time())
    land_a_file(driver)
    pending = driver.trigger()
    c.decline(pending.checkpoint_id, pending.expected_tasks[0], "a0", "disk full")
    epoch(driver)
    planner = RestorePlanner(driver, gate=lambda candidate: GateResult(True, name="row counts"))
    planner.apply(planner.plan(second))
    epoch(driver)
    assert second == first + 1
    return first, pending.checkpoint_id


def response_schema(openapi: dict[str, Any], path: str) -> dict[str, Any]:
    """The schema of GET `path`'s 200 answer, with the components its $refs point into."""
    answer = openapi["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
    return {**answer["schema"], "components": openapi["components"]}


def is_typed(schema: dict[str, Any], components: dict[str, Any]) -> bool:
    """A $ref to a model with fields and no others (or an array of one)."""
    if schema.get("type") == "array":
        return is_typed(schema.get("items", {}), components)
    ref = schema.get("$ref", "")
    model = components.get(ref.removeprefix("#/components/schemas/"), {})
    return bool(model.get("properties")) and model.get("additionalProperties") is False


def test_every_json_answer_validates_against_the_published_schema(local, api) -> None:
    first, aborted = history(local)
    openapi = api.get(SCHEMA_URL).json()
    assert openapi["openapi"].startswith("3.1")
    components = openapi["components"]["schemas"]

    # the schema holds the JSON routes, each with a model, and none of the HTML pages
    paths = {p: op for p, ops in openapi["paths"].items() for op in ops.values()}
    assert set(paths) == {
        "/api/pipelines",
        "/api/{pipeline}/checkpoints",
        "/api/{pipeline}/checkpoints/{checkpoint_id}",
    }
    untyped = [
        p
        for p, op in paths.items()
        if not is_typed(op["responses"]["200"]["content"]["application/json"]["schema"], components)
    ]
    assert untyped == [], untyped

    answers = {
        "/api/pipelines": ["/batchpoint/api/pipelines"],
        "/api/{pipeline}/checkpoints": [
            "/batchpoint/api/payments/checkpoints",
            "/batchpoint/api/payments/checkpoints?limit=2",
        ],
        "/api/{pipeline}/checkpoints/{checkpoint_id}": [
            f"/batchpoint/api/payments/checkpoints/{cid}" for cid in (first, aborted, first + 1)
        ],
    }
    for path, urls in answers.items():
        validator = jsonschema.Draft202012Validator(response_schema(openapi, path))
        for url in urls:
            answer = api.get(url)
            assert answer.status_code == 200, (url, answer.text)
            errors = [
                f"{list(e.absolute_path)}: {e.message}"
                for e in validator.iter_errors(answer.json())
            ]
            assert errors == [], (url, errors)

    # what was validated is what the records hold (not an empty page)
    rows = api.get("/batchpoint/api/payments/checkpoints").json()["checkpoints"]
    assert [r["outcome"] for r in rows] == ["COMPLETED"] * 2 + ["ABORTED"] + ["COMPLETED"] * 2
    assert [r["status"] for r in rows] == ["head", "retained", "aborted", "retained", "quarantined"]
    assert [r["quarantined"] for r in rows] == [False] * 4 + [True]
    assert [[e["gate"] for e in r["restores"]] for r in rows] == [[], [], [], ["row counts"], []]
    detail = api.get(f"/batchpoint/api/payments/checkpoints/{first}").json()
    assert detail["quality_report"]["findings"][0]["problem"] == "3 of 50 keys differ"
    assert detail["files"] and detail["tasks"] and detail["quarantine"]


def test_the_schema_is_public_and_the_pages_are_not(local, api) -> None:
    anonymous = {"Authorization": ""}
    assert api.get(SCHEMA_URL, headers=anonymous).status_code == 200
    assert api.get("/batchpoint/api/pipelines", headers=anonymous).status_code == 401
