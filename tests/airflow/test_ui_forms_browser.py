"""Every trigger form a user meets, submitted with its defaults in a real browser:
headless Chromium against a running Airflow api-server opens Airflow's own trigger form
of each batchpoint DAG, presses Trigger without touching a field, and checks the run
that was created and its conf; then the plugin's "Take a savepoint" form on a paused
DAG, once unpausing it on trigger (the form's default, as Airflow's own form does) and
once leaving it paused, when the form must say that the run waits. The pipeline's page
shows the paused checkpoint DAG and its pending checkpoint with that checkpoint's
deadline. Screenshots go to build/ui-screenshots/forms-*.png."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from support.airflow_stack import PASSWORD, USER, AirflowStack
from support.browser import (
    INSTALL_HINT,
    chromium_paths,
    headless_chromium,
    log_in,
    screenshot,
    wait_for,
)

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.s3]

SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "ui-screenshots"

#: What each DAG's form sends when nothing is touched: no key is required but the ones
#: with a safe default (the gate on, no dry run is harmless: it restores only what passes).
DEFAULT_CONF: dict[str, dict[str, Any]] = {
    "payments_checkpoint": {},
    "payments_savepoint": {"target": None, "stop_pipeline": False, "description": None},
    "payments_restore": {
        "source": "latest",
        "parallelism": None,
        "dry_run": False,
        "claim_mode": "no_claim",
        "allow_non_restored_state": False,
        "cascade": False,
        "quality_gate": True,
        "confirm_ungated": None,
        "max_candidates": None,
        "skip_suites": [],
    },
}


def open_trigger_form(browser: Any, stack: AirflowStack, dag_id: str) -> tuple[Any, Any]:
    """Airflow's own trigger form of `dag_id` (the DAG page's Trigger button): the dialog
    and its Trigger button, once its fields are drawn."""
    from selenium.webdriver.common.by import By

    browser.get(f"{stack.base_url}/dags/{dag_id}")
    button = wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, TRIGGER_BUTTON))[0]
    wait_for(browser, lambda b: button.is_enabled())
    button.click()
    submit = wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, TRIGGER_SUBMIT))[0]
    dialog = browser.find_element(By.CSS_SELECTOR, "[role=dialog]")
    time.sleep(1)  # the form validates its fields once drawn: let its first pass settle
    return dialog, submit


TRIGGER_BUTTON = "[data-testid=trigger-dag-button]"
TRIGGER_SUBMIT = "[data-testid=trigger-dag-submit]"
DOCS_BUTTON = "[data-testid=markdown-button]"


def open_pipeline_page(browser: Any, stack: AirflowStack) -> Any:
    """Browse -> Checkpoints -> payments, switched into the plugin's frame."""
    from selenium.webdriver.common.by import By

    browser.switch_to.default_content()
    browser.get(f"{stack.base_url}/plugin/batchpoint")
    frame = wait_for(browser, lambda b: b.find_elements(By.TAG_NAME, "iframe"))[0]
    browser.switch_to.frame(frame)
    wait_for(browser, lambda b: b.find_elements(By.LINK_TEXT, "payments"))[0].click()
    wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "form#savepoint"))
    return frame


def runs_of(stack: AirflowStack, dag_id: str) -> list[dict[str, Any]]:
    return stack.api("GET", f"/dags/{dag_id}/dagRuns")["dag_runs"]


def paused(stack: AirflowStack, dag_id: str) -> bool:
    return bool(stack.api("GET", f"/dags/{dag_id}")["is_paused"])


def start_stack(bp: Any, airflow_home: Path, tmp_path: Path) -> AirflowStack:
    stack = AirflowStack(tmp_path / "airflow", Path(airflow_home) / "airflow.db", dict(os.environ))
    serialized = stack.airflow("dags", "reserialize")  # the forms' DAGs must exist
    assert serialized.returncode == 0, serialized.stderr[-2000:]
    return stack


@pytest.mark.skipif(chromium_paths() is None, reason=f"no chromium here: {INSTALL_HINT}")
def test_each_trigger_form_submits_with_its_defaults(bp, airflow_home, tmp_path):
    from selenium.webdriver.common.by import By

    from batchpoint.protocol.checkpoint import CheckpointType
    from support.fake_epochs import epoch, land_a_file

    driver = bp.driver()
    epoch(driver)
    land_a_file(driver)
    pending = driver.trigger(CheckpointType.CHECKPOINT)  # its run stopped with the DAG paused

    stack = start_stack(bp, airflow_home, tmp_path)
    with stack, headless_chromium(height=1400) as browser:
        stack.start(("api-server",))  # no scheduler: a run stays queued, as created
        stack.wait_healthy()
        log_in(browser, stack.base_url, USER, PASSWORD)

        for dag_id, conf in DEFAULT_CONF.items():
            dialog, submit = open_trigger_form(browser, stack, dag_id)
            screenshot(browser, SCREENSHOTS, f"forms-{dag_id}-trigger")
            assert submit.is_enabled(), (
                f"{dag_id}: Trigger disabled with the defaults:\n{dialog.text}"
            )
            assert "This field is required" not in dialog.text, dialog.text
            # the Airflow database is the session's: other tests' runs may be there
            before = {r["dag_run_id"] for r in runs_of(stack, dag_id)}
            submit.click()
            runs = wait_for(
                browser,
                lambda b, d=dag_id, old=before: [
                    r for r in runs_of(stack, d) if r["dag_run_id"] not in old
                ],
            )
            assert len(runs) == 1 and runs[0]["run_type"] == "manual", runs
            assert runs[0]["conf"] == conf, (dag_id, runs[0]["conf"])

        # The checkpoint DAG's docs (its page's "Dag Docs") say what Airflow's own
        # actions do to checkpoints.
        browser.get(f"{stack.base_url}/dags/payments_checkpoint")
        wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, DOCS_BUTTON))[0].click()
        heading = "What Airflow's actions do to checkpoints"
        docs = wait_for(browser, lambda b: b.find_elements(By.XPATH, f'//*[text()="{heading}"]'))
        dialog = docs[0].find_element(By.XPATH, "./ancestor::*[@role='dialog']")
        browser.execute_script("arguments[0].scrollIntoView()", docs[0])
        wait_for(browser, lambda b: "Backfill" in dialog.text)
        said = [line.split(" ")[0] for line in dialog.text.splitlines()]
        assert {"Clear", "Mark", "Pause:", "Backfill:"} <= set(said), dialog.text
        time.sleep(1)  # for the screenshot only: the dialog fades in
        screenshot(browser, SCREENSHOTS, "forms-checkpoint-docs")

        # The plugin's page: the checkpoint DAG paused, with the checkpoint it left pending.
        stack.api("PATCH", "/dags/payments_checkpoint", json={"is_paused": True})
        stack.api("PATCH", "/dags/payments_savepoint", json={"is_paused": True})
        frame = open_pipeline_page(browser, stack)
        notice = browser.find_element(By.CSS_SELECTOR, ".paused").text
        deadline = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(pending.deadline))
        assert "payments_checkpoint is paused" in notice, notice
        assert f"checkpoint {pending.checkpoint_id}" in notice and deadline in notice, notice
        browser.switch_to.default_content()
        screenshot(browser, SCREENSHOTS, "forms-pipeline-paused")

        # "Take a savepoint" on the paused savepoint DAG: unpausing it is the default
        browser.switch_to.frame(frame)
        form = browser.find_element(By.CSS_SELECTOR, "form#savepoint")
        unpause = form.find_element(By.CSS_SELECTOR, "input[name=unpause]")
        assert unpause.is_selected() and "Unpause payments_savepoint on trigger" in form.text
        form.find_element(By.CSS_SELECTOR, "button").click()
        output = form.find_element(By.TAG_NAME, "output")
        wait_for(browser, lambda b: output.text.startswith(("triggered", "refused", "queued")))
        assert output.text.startswith("triggered "), output.text
        assert not paused(stack, "payments_savepoint")
        run_id = output.text.removeprefix("triggered ")
        conf = stack.api("GET", f"/dags/payments_savepoint/dagRuns/{run_id}")["conf"]
        assert conf == {"description": "", "target": "", "stop_pipeline": False}, conf
        browser.switch_to.default_content()
        screenshot(browser, SCREENSHOTS, "forms-savepoint-unpaused")

        # ... and left paused, the form says so: the run waits, it is not running
        stack.api("PATCH", "/dags/payments_savepoint", json={"is_paused": True})
        # the Airflow database is the session's: other tests' runs may be there
        savepoint_runs = len(runs_of(stack, "payments_savepoint"))
        open_pipeline_page(browser, stack)
        form = browser.find_element(By.CSS_SELECTOR, "form#savepoint")
        form.find_element(By.CSS_SELECTOR, "input[name=unpause]").click()
        form.find_element(By.CSS_SELECTOR, "button").click()
        output = form.find_element(By.TAG_NAME, "output")
        wait_for(browser, lambda b: output.text.startswith(("triggered", "refused", "queued")))
        assert output.text.startswith("queued "), output.text
        assert "payments_savepoint is paused" in output.text, output.text
        assert paused(stack, "payments_savepoint")
        assert len(runs_of(stack, "payments_savepoint")) == savepoint_runs + 1
        browser.switch_to.default_content()
        screenshot(browser, SCREENSHOTS, "forms-savepoint-paused")
