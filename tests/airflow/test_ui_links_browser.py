"""A checkpoint and the Airflow run that made it, in a real browser: headless Chromium
against an api-server with the plugin follows a checkpoint's page (Browse ->
Checkpoints, inside the UI's frame) to its DAG run, comes back through the run's
Checkpoint tab (where the tasks' "Checkpoint" extra link also leads, inside the frame),
and goes on to the log of the try that acked; on the way, the barrier reads as a table
and a long quality-report line wraps inside the page at a laptop's width."""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import quote, unquote

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
FRAME_TEXT = "return document.body.innerText"


def long_report(pipeline: str, checkpoint_id: int) -> bytes:
    """A passing report whose summary is one line of several hundred characters."""
    from batchpoint.quality.report import CandidateReport, GateMode

    states = {f"uid-{i}": f"operator_{i}/state_{i}" for i in range(8)}
    stats = {"successful_expectations": 7, "evaluated_expectations": 7}
    return CandidateReport(
        pipeline,
        checkpoint_id,
        "checkpoint",
        GateMode.RESTORE,
        time.time(),
        gx_results={uid: {"balances_suite": {"statistics": stats}} for uid in states},
        suites_run=True,
        states=states,
    ).encode()


def in_frame(browser, wanted: str):
    """Into the UI's plugin frame once its page says `wanted`."""
    from selenium.webdriver.common.by import By

    frame = wait_for(browser, lambda b: b.find_elements(By.TAG_NAME, "iframe"))[0]
    browser.switch_to.frame(frame)
    wait_for(browser, lambda b: wanted in b.execute_script(FRAME_TEXT))


@pytest.mark.skipif(chromium_paths() is None, reason=f"no chromium here: {INSTALL_HINT}")
def test_a_checkpoint_leads_to_its_run_and_back(bp, write_epoch, airflow_home, tmp_path):
    from selenium.webdriver.common.by import By

    write_epoch(0)
    run, states = bp.run("payments_checkpoint")  # in the database the stack copies
    assert run.state == "success", states
    driver = bp.driver()
    bp.store.put(driver.coordinator.layout.quality_report(1), long_report("payments", 1))
    partitions = sum(len(p) for p in driver.coordinator.get_checkpoint(1).barrier.values())
    run_page = f"/dags/payments_checkpoint/runs/{quote(run.run_id, safe='')}"

    stack = AirflowStack(tmp_path / "airflow", Path(airflow_home) / "airflow.db", dict(os.environ))
    with stack, headless_chromium(1280, 900) as browser:
        stack.start(("api-server",))
        stack.wait_healthy()
        log_in(browser, stack.base_url, USER, PASSWORD)

        # Browse -> Checkpoints -> payments -> checkpoint 1, inside the UI's frame
        browser.get(f"{stack.base_url}/plugin/batchpoint")
        in_frame(browser, "payments")
        browser.find_element(By.LINK_TEXT, "payments").click()
        wait_for(browser, lambda b: b.find_elements(By.LINK_TEXT, "1"))[0].click()
        wait_for(browser, lambda b: "Quality gate" in b.execute_script(FRAME_TEXT))
        barrier = browser.find_elements(By.CSS_SELECTOR, "table.barrier tbody tr")
        assert len(barrier) == partitions and barrier[0].text.startswith("events p0")
        # the report's long line wraps: neither it nor the page runs off the right edge
        report = browser.find_element(By.CSS_SELECTOR, "pre.report")
        widths = "return [arguments[0].scrollWidth, arguments[0].clientWidth]"
        assert (
            browser.execute_script(widths, report)[0] <= browser.execute_script(widths, report)[1]
        )
        page = browser.execute_script(widths.replace("arguments[0]", "document.documentElement"))
        assert page[0] <= page[1], page
        browser.switch_to.default_content()
        screenshot(browser, SCREENSHOTS, "links-1-checkpoint")

        # to the run that made it: Airflow's own run page, in the UI's window
        browser.switch_to.frame(browser.find_element(By.TAG_NAME, "iframe"))
        browser.find_element(By.CSS_SELECTOR, "a.dag-run").click()
        browser.switch_to.default_content()
        wait_for(browser, lambda b: unquote(b.current_url) == unquote(stack.base_url + run_page))
        screenshot(browser, SCREENSHOTS, "links-2-dag-run")

        # and back: the run's Checkpoint tab shows its checkpoint inside the frame
        tab = "a[href$='/plugin/batchpoint_run']"
        wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, tab))[0].click()
        in_frame(browser, "payments: checkpoint 1")
        browser.switch_to.default_content()
        screenshot(browser, SCREENSHOTS, "links-3-run-tab")

        # the tasks' extra link names that tab, relative to the UI's base URL
        links = stack.api(
            "GET", f"/dags/payments_checkpoint/dagRuns/{run.run_id}/taskInstances/trigger/links"
        )
        browser.get(f"{stack.base_url}/{links['extra_links']['Checkpoint']}")
        in_frame(browser, "payments: checkpoint 1")

        # on to the log of the try of dedup's task that acked
        browser.find_element(By.XPATH, "//tr[td[1]='dedup#0']//a").click()
        browser.switch_to.default_content()
        log = f"{run_page}/tasks/operators.dedup?try_number=1"
        wait_for(browser, lambda b: unquote(b.current_url) == unquote(stack.base_url + log))
