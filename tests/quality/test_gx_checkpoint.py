"""The gate through GX ValidationDefinitions and a GX Checkpoint: a user's file context
(its saved suite, its Checkpoint's actions) gates a restore and the actions run once per
gate run; without one, each gate run builds a Data Docs site, stored beside the reports
and linked from the checkpoint's page. Real GX, real Spark, the payments pipeline."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest

from batchpoint.errors import ConfigError
from batchpoint.quality.findings import Check
from batchpoint.quality.gated_restore import gated_restore
from batchpoint.quality.suites import PipelineQuality, StateQuality
from support.bad_deploys import buggy_balances, deploy, negative_counts
from support.payments import GOOD_EPOCHS, LAYOUT, SUITES_ONLY
from support.restoring import gate_reports

HEAD = GOOD_EPOCHS
CHECKPOINT = "on_restore"


def _append_action() -> type:
    """A GX action of the user's, defined as GX documents custom actions: it appends
    what it was given to a file. Registered with GX once per process (by its `type`)."""
    from great_expectations.checkpoint.actions import ValidationAction

    if "AppendRun" in globals():
        return globals()["AppendRun"]

    class AppendRun(ValidationAction):
        type: Literal["batchpoint_test_append_run"] = "batchpoint_test_append_run"
        path: str

        def run(self, checkpoint_result: Any, action_context: Any = None) -> dict:
            line = {
                "success": checkpoint_result.success,
                "runs": sorted({str(k.run_id.run_name) for k in checkpoint_result.run_results}),
                "suites": sorted(r.suite_name for r in checkpoint_result.run_results.values()),
            }
            with open(self.path, "a") as out:
                out.write(json.dumps(line) + "\n")
            return {}

    globals()["AppendRun"] = AppendRun
    return AppendRun


def _user_project(root: Path, actions_log: Path) -> PipelineQuality:
    """A GX user's file context, made through GX's API: a saved suite for the balances
    state and a Checkpoint whose actions are their own and a Data Docs update."""
    import great_expectations as gx
    from great_expectations.checkpoint.actions import UpdateDataDocsAction

    context = gx.get_context(mode="file", project_root_dir=root)
    suite = context.suites.add(gx.ExpectationSuite(name="balances_gx"))
    suite.add_expectation(gx.expectations.ExpectColumnValuesToNotBeNull(column="account_id"))
    suite.add_expectation(
        gx.expectations.ExpectColumnValuesToBeBetween(column="event_count", min_value=1)
    )
    suite.save()
    append = _append_action()
    context.checkpoints.add(
        gx.Checkpoint(
            name=CHECKPOINT,
            validation_definitions=[],
            actions=[
                append(name="append", path=str(actions_log)),
                UpdateDataDocsAction(name="docs"),
            ],
        )
    )
    return PipelineQuality(
        states=(StateQuality("balances", "balances", suite="balances_gx"),),
        suites_dir=root / "gx" / "expectations",
    )


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.spark
@pytest.mark.slow
def test_a_gx_saved_suite_gates_a_restore_and_the_users_checkpoint_acts_once_per_run(
    good_run: Any, make_gate: Callable[..., Any], tmp_path: Path
) -> None:
    from batchpoint.quality.hook import QualityRestoreGate
    from batchpoint.runtime.restore import RestorePlanner

    actions_log = tmp_path / "actions.jsonl"
    project = tmp_path / "project"
    quality = _user_project(project, actions_log)
    deploy(good_run.runner.pipeline, buggy_balances(negative_counts))
    bad = good_run.epoch(HEAD + 1).outcome
    assert bad is not None and bad.completed is not None
    options = {"quality": quality, "gx_project": project, "gx_checkpoint": CHECKPOINT}

    restored = gated_restore(good_run.runner.driver, make_gate(good_run, **options))

    candidates = gate_reports(restored)
    assert [c.checkpoint_id for c in candidates] == [HEAD + 1, HEAD]
    failed, chosen = candidates
    assert {f.check for f in failed.findings} == {f"{Check.SUITE}:balances_gx"}
    assert "event_count" in failed.findings[0].problem and failed.quarantined
    assert chosen.passed and restored.plan.chosen_id == HEAD and restored.head is not None
    # two candidates, the failing one validated twice (quick, then with details): the
    # user's actions ran once, on the verdict that counts
    assert _lines(actions_log) == [
        {"success": True, "runs": [f"payments checkpoint {HEAD}"], "suites": ["balances_gx"]}
    ]
    # the user's own Data Docs site was updated, and each report of the run links it
    site = project / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
    assert site.is_file()
    assert chosen.data_docs == failed.data_docs == site.as_uri()

    # the restore DAG's path (the planner with the hook): once more, once
    hook = QualityRestoreGate(lambda: make_gate(good_run, **options))
    plan = RestorePlanner(good_run.runner.driver, gate=hook).plan("latest")
    assert plan.chosen is not None and plan.chosen.checkpoint_id == HEAD
    assert len(_lines(actions_log)) == 2
    dry = hook.configured(record=False)  # a dry run records nothing and acts on nothing
    assert RestorePlanner(good_run.runner.driver, gate=dry).plan(HEAD).chosen is not None
    assert len(_lines(actions_log)) == 2


@pytest.mark.spark
def test_each_gate_run_builds_data_docs_beside_its_report_linked_from_the_page(
    good_run: Any, make_gate: Callable[..., Any]
) -> None:
    from batchpoint.airflow.dag_names import dag_ids
    from batchpoint.airflow.ui_models import CheckpointDetailModel
    from batchpoint.airflow.ui_pages import render_checkpoint
    from batchpoint.ops.overview import checkpoint_page

    gate = make_gate(good_run, quality=SUITES_ONLY)
    first = gate.run(HEAD).candidates[0]
    second = gate.run(HEAD).candidates[0]

    prefix = LAYOUT.checkpoint(HEAD) + "data-docs/"
    assert first.data_docs and second.data_docs and first.data_docs != second.data_docs
    for link in (first.data_docs, second.data_docs):
        key = link.removeprefix(good_run.store.uri.rstrip("/") + "/")
        assert key.startswith(prefix) and key.endswith("/index.html")
        index = good_run.store.get(key).data.decode()
        # this run's validations of the declared suites, and no other run's
        assert "payments_balances" in index and "payments_seen" in index
        run_folder = key.removeprefix(prefix).split("/")[0]
        pages = [o.key for o in good_run.store.list(prefix + run_folder + "/validations/")]
        assert len([p for p in pages if p.endswith(".html")]) == 2, pages

    # the checkpoint's page (its JSON model and its HTML) links the latest run's site
    page = checkpoint_page(good_run.runner.driver.coordinator, HEAD).to_json()
    model = CheckpointDetailModel.model_validate(page)
    assert model.quality_report is not None and model.quality_report.data_docs == second.data_docs
    html = render_checkpoint("payments", page, dag_ids("payments"))
    # through the UI's route (test_ui_data_docs.py), relative to the checkpoint's page
    key = second.data_docs.removeprefix(good_run.store.child(LAYOUT.checkpoint(HEAD)))
    assert key.startswith("data-docs/") and f"href='{HEAD}/{key}'" in html


@pytest.mark.spark
def test_a_refused_candidates_own_failed_results_are_in_the_data_docs_its_report_links(
    good_run: Any, make_gate: Callable[..., Any]
) -> None:
    deploy(good_run.runner.pipeline, buggy_balances(negative_counts))
    bad = good_run.epoch(HEAD + 1).outcome
    assert bad is not None and bad.completed is not None

    refused, chosen = make_gate(good_run, quality=SUITES_ONLY).run().candidates
    assert refused.checkpoint_id == HEAD + 1 and not refused.passed and chosen.passed

    for report in (refused, chosen):
        # the site beside the checkpoint, of its own run alone, naming the states
        cid = report.checkpoint_id
        assert report.data_docs is not None
        key = report.data_docs.removeprefix(good_run.store.uri.rstrip("/") + "/")
        assert key.startswith(LAYOUT.checkpoint(cid) + "data-docs/"), key
        folder = key.removesuffix("index.html")
        pages = {
            o.key.removeprefix(folder): good_run.store.get(o.key).data.decode()
            for o in good_run.store.list(folder + "validations/")
            if o.key.endswith(".html")
        }
        assert len(pages) == 2, sorted(pages)
        assert all(f"/payments checkpoint {cid}/" in path for path in pages), sorted(pages)
        balances = next(html for path, html in pages.items() if "payments_balances" in path)
        assert "Data asset: payments: balances/balances" in balances
        status = re.search(r"Status:</span>\s*<i[^>]*></i>\s*(\w+)", balances)
        assert status is not None and status[1] == ("Failed" if report is refused else "Succeeded")
    # the stored report of the refused checkpoint links its own site, not the chosen one's
    stored = make_gate(good_run, quality=SUITES_ONLY).stored_report(HEAD + 1)
    assert stored is not None and stored.data_docs == refused.data_docs != chosen.data_docs


@pytest.mark.spark
def test_a_dry_run_builds_no_data_docs(good_run: Any, make_gate: Callable[..., Any]) -> None:
    before = {o.key for o in good_run.store.list(LAYOUT.checkpoint(HEAD))}
    report = make_gate(good_run, quality=SUITES_ONLY).run(HEAD, dry_run=True)
    assert report.chosen == HEAD and report.candidates[0].data_docs is None
    assert {o.key for o in good_run.store.list(LAYOUT.checkpoint(HEAD))} == before


@pytest.mark.spark
def test_a_mistyped_gx_project_or_checkpoint_is_a_config_error(
    good_run: Any, make_gate: Callable[..., Any], tmp_path: Path
) -> None:
    quality = _user_project(tmp_path / "project", tmp_path / "actions.jsonl")
    with pytest.raises(ConfigError, match=r"is not a GX project: no .*great_expectations.yml"):
        make_gate(good_run, quality=quality, gx_project=tmp_path / "projcet").prepare()
    assert not (tmp_path / "projcet").exists()  # GX would have made a new project there
    with pytest.raises(ConfigError, match=r"has no Checkpoint 'on_restroe' \(it has: on_restore\)"):
        make_gate(
            good_run, quality=quality, gx_project=tmp_path / "project", gx_checkpoint="on_restroe"
        ).prepare()
    with pytest.raises(ConfigError, match="gx_checkpoint='on_restore' needs gx_project"):
        make_gate(good_run, quality=quality, gx_checkpoint=CHECKPOINT)


def test_a_run_site_is_stored_with_the_stores_api_on_each_backend(
    store: Any, tmp_path: Path
) -> None:
    from batchpoint.quality.gx_checkpoint import publish_site, run_folder_name

    site = tmp_path / "site"
    page = site / "validations" / "payments_balances" / "run" / "page.html"
    page.parent.mkdir(parents=True)
    page.write_text("<html>validation</html>")
    (site / "index.html").write_text("<a href='validations/payments_balances/run/page.html'>")
    prefix = LAYOUT.checkpoint(HEAD) + f"data-docs/{run_folder_name(0.0)}/"

    link = publish_site(store, prefix, site)

    assert link == store.child(prefix + "index.html")
    assert store.get(prefix + "index.html").data.startswith(b"<a href='validations/")
    # the pages keep their paths below the index, so its relative links hold
    assert store.get(prefix + "validations/payments_balances/run/page.html").data == (
        b"<html>validation</html>"
    )
    assert prefix.startswith(LAYOUT.checkpoint(HEAD) + "data-docs/19700101T000000.000Z-")
