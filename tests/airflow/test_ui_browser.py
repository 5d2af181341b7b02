"""The Checkpoints pages in a real browser: headless Chromium against a running Airflow
api-server with the plugin loaded logs in through Airflow's login form, opens Browse ->
Checkpoints (the plugin's page inside the UI), follows the links to a pipeline and to a
checkpoint's drill-down, opens a DAG's Checkpoints tab (the React view), and saves a
screenshot of each under build/ui-screenshots/."""

from __future__ import annotations

import os
import time
from pathlib import Path

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


@pytest.mark.skipif(chromium_paths() is None, reason=f"no chromium here: {INSTALL_HINT}")
def test_a_user_logs_in_and_browses_the_checkpoints(bp, airflow_home, tmp_path):
    from selenium.webdriver.common.by import By

    from batchpoint.quality.findings import Finding
    from batchpoint.quality.report import CandidateReport, GateMode
    from support.fake_epochs import epoch

    driver = bp.driver()
    ids = [epoch(driver) for _ in range(3)]
    bad = Finding("balances/balances", "sample:balance-recompute", "2 of 50 keys differ")
    report = CandidateReport("payments", ids[-1], "checkpoint", GateMode.RESTORE, time.time())
    report.findings.append(bad)
    bp.store.put(driver.coordinator.layout.quality_report(ids[-1]), report.encode())

    stack = AirflowStack(tmp_path / "airflow", Path(airflow_home) / "airflow.db", dict(os.environ))
    serialized = stack.airflow("dags", "reserialize")  # the restore form's DAG must exist
    assert serialized.returncode == 0, serialized.stderr[-2000:]
    with stack, headless_chromium() as browser:
        stack.start(("api-server",))
        stack.wait_healthy()

        log_in(browser, stack.base_url, USER, PASSWORD)

        # Browse -> Checkpoints: the plugin's page in the UI's frame
        browser.get(f"{stack.base_url}/plugin/batchpoint")
        frame = wait_for(browser, lambda b: b.find_elements(By.TAG_NAME, "iframe"))[0]
        browser.switch_to.frame(frame)
        link = wait_for(browser, lambda b: b.find_elements(By.LINK_TEXT, "payments"))[0]
        row = browser.find_element(By.CSS_SELECTOR, "tr.running").text
        assert "payments" in row and str(ids[-1]) in row, row  # head, latest checkpoint
        browser.switch_to.default_content()
        screenshot(browser, SCREENSHOTS, "1-browse-checkpoints")

        browser.switch_to.frame(frame)
        link.click()
        wait_for(browser, lambda b: "History" in b.find_element(By.TAG_NAME, "body").text)
        body = browser.find_element(By.TAG_NAME, "body").text
        assert f"checkpoint {ids[-1]}" in body and "running" in body
        assert "3 on this page: 3 completed" in body
        history = [r.text.split()[0] for r in browser.find_elements(By.CSS_SELECTOR, "tbody tr")]
        assert history[:3] == [str(i) for i in reversed(ids)], history
        browser.switch_to.default_content()
        screenshot(browser, SCREENSHOTS, "2-pipeline")

        browser.switch_to.frame(frame)
        browser.find_element(By.LINK_TEXT, str(ids[-1])).click()
        wait_for(browser, lambda b: "Quality gate" in b.find_element(By.TAG_NAME, "body").text)
        body = browser.find_element(By.TAG_NAME, "body").text
        assert f"payments: checkpoint {ids[-1]}" in body
        assert "2 of 50 keys differ" in body and "verdict: FAILED" in body
        expected = driver.coordinator.get_checkpoint(ids[-1]).expected_tasks
        tasks = browser.find_elements(
            By.XPATH, "//h3[text()='Tasks']/following-sibling::table[1]//tbody/tr"
        )
        assert sorted(t.text.split()[0] for t in tasks) == sorted(map(str, expected))
        browser.switch_to.default_content()
        shot = screenshot(browser, SCREENSHOTS, "3-checkpoint")
        assert shot.stat().st_size > 10_000  # a rendered page, not a blank one

        # the restore form triggers the restore DAG through Airflow's API, with the UI's
        # session (a dry run by default), and links the run it created
        browser.switch_to.frame(frame)
        browser.find_element(By.CSS_SELECTOR, "form#restore button").click()
        output = browser.find_element(By.CSS_SELECTOR, "form#restore output")
        wait_for(browser, lambda b: output.text.startswith(("triggered ", "refused")))
        assert output.text.startswith("triggered "), output.text
        run_id = output.text.removeprefix("triggered ")
        conf = stack.api("GET", f"/dags/payments_restore/dagRuns/{run_id}")["conf"]
        assert conf["source"] == str(ids[-1]) and conf["dry_run"] is True, conf
        browser.switch_to.default_content()
        screenshot(browser, SCREENSHOTS, "4-restore-triggered")

        # Airflow's colour mode reaches the pages: "dark" under Airflow's own key (the
        # frame shares the UI's origin, so its localStorage) marks the page dark and its
        # colours turn (Chromium also gives the frame the dark UI's prefers-color-scheme,
        # so either dark rule does it; test_ui_templates.py checks both are there)
        browser.switch_to.frame(frame)
        style = "return getComputedStyle(document.body).backgroundColor"
        light = browser.execute_script(style)
        browser.execute_script("localStorage.setItem('theme', 'dark'); location.reload()")
        wait_for(browser, lambda b: "Quality gate" in b.find_element(By.TAG_NAME, "body").text)
        assert browser.execute_script("return document.documentElement.className") == "dark"
        dark = browser.execute_script(style)
        assert light == "rgb(255, 255, 255)" and dark != light, (light, dark)
        browser.switch_to.default_content()
        screenshot(browser, SCREENSHOTS, "5-dark-mode")

        # A DAG's Checkpoints tab: the React view (react_apps) that the UI itself imports
        # and draws with its own components, reading the JSON API with the UI's session
        browser.get(f"{stack.base_url}/dags/payments_checkpoint/plugin/batchpoint_dag")
        rows = wait_for(
            browser,
            lambda b: b.find_elements(By.CSS_SELECTOR, "[data-testid=batchpoint-history] tbody tr"),
        )
        assert [r.text.split()[0] for r in rows] == [str(i) for i in reversed(ids)]
        assert "head" in rows[0].text  # the newest completed checkpoint
        status = browser.find_element(By.CSS_SELECTOR, "[data-testid=batchpoint-status]").text
        assert status.startswith("running"), status
        full = browser.find_element(By.CSS_SELECTOR, "[data-testid=batchpoint-full-page]")
        assert full.get_attribute("href") == f"{stack.base_url}/batchpoint/payments"
        screenshot(browser, SCREENSHOTS, "6-dag-checkpoints-tab")
