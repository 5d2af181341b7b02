"""A user reads a quarantined and a discarded checkpoint's status in a real browser:
headless Chromium against a running Airflow api-server, Browse -> Checkpoints -> the
pipeline (inside Airflow's frame) and the DAG's Checkpoints tab (the React view), over a
history with a checkpoint in every status (tests/support/status_history.py)."""

from __future__ import annotations

import os
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
from support.status_history import EXPECTED, QUARANTINE_REASON, every_status

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.s3]

SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "ui-screenshots"


def _in_frame(browser, ready):
    """Wait until the plugin's frame (a new one after a link that navigates Airflow's own
    page) shows what `ready` looks for; the driver is left inside it."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    def inside(b):
        b.switch_to.default_content()
        frames = b.find_elements(By.TAG_NAME, "iframe")
        if not frames:
            return None
        try:
            b.switch_to.frame(frames[0])
            return ready(b)
        except WebDriverException:
            return None

    return wait_for(browser, inside)


def _body(browser) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.TAG_NAME, "body").text


def _statuses(rows) -> dict[int, str]:
    """checkpoint id -> the status word of each history row (id, type, status, ...)."""
    cells = [row.text.split() for row in rows]
    return {int(c[0]): c[2] for c in cells if len(c) > 2 and c[0].isdigit()}


@pytest.mark.skipif(chromium_paths() is None, reason=f"no chromium here: {INSTALL_HINT}")
def test_a_user_reads_a_quarantined_and_a_discarded_checkpoint(bp, airflow_home, tmp_path):
    from selenium.webdriver.common.by import By

    every_status(bp.driver())
    quarantined, discarded = 5, 2
    assert (EXPECTED[quarantined], EXPECTED[discarded]) == ("quarantined", "discarded")

    stack = AirflowStack(tmp_path / "airflow", Path(airflow_home) / "airflow.db", dict(os.environ))
    serialized = stack.airflow("dags", "reserialize")  # the DAG tab needs the DAGs
    assert serialized.returncode == 0, serialized.stderr[-2000:]
    with stack, headless_chromium() as browser:
        stack.start(("api-server",))
        stack.wait_healthy()
        log_in(browser, stack.base_url, USER, PASSWORD)

        # the pipeline's history inside Airflow's frame: one status a row
        browser.get(f"{stack.base_url}/plugin/batchpoint")
        _in_frame(browser, lambda b: b.find_elements(By.LINK_TEXT, "payments"))[0].click()
        rows = "tbody tr"
        _in_frame(browser, lambda b: len(_statuses(b.find_elements(By.CSS_SELECTOR, rows))) > 1)
        shown = _statuses(browser.find_elements(By.CSS_SELECTOR, rows))
        assert shown == EXPECTED, _body(browser)
        browser.switch_to.default_content()
        screenshot(browser, SCREENSHOTS, "status-1-pipeline")

        # the quarantined checkpoint's page says so, who and why, and offers no restore
        _in_frame(browser, lambda b: b.find_elements(By.LINK_TEXT, str(quarantined)))[0].click()
        _in_frame(browser, lambda b: "Tasks" in _body(b) and "quarantined:" in _body(b))
        body = _body(browser)
        assert "quarantined: completed, but found unfit for a restore" in body, body
        assert f"by a restore: {QUARANTINE_REASON}" in body, body
        assert not browser.find_elements(By.CSS_SELECTOR, "form#restore")
        browser.switch_to.default_content()
        screenshot(browser, SCREENSHOTS, "status-2-quarantined")

        # the discarded one: completed, no longer retained, no restore offered either
        browser.get(
            f"{stack.base_url}/plugin/batchpoint/batchpoint/payments/checkpoints/{discarded}"
        )
        _in_frame(browser, lambda b: "Tasks" in _body(b) and "discarded:" in _body(b))
        body = _body(browser)
        assert "discarded: completed, no longer retained" in body, body
        assert not browser.find_elements(By.CSS_SELECTOR, "form#restore")
        browser.switch_to.default_content()
        screenshot(browser, SCREENSHOTS, "status-3-discarded")

        # the DAG's Checkpoints tab (React) shows the same words
        browser.get(f"{stack.base_url}/dags/payments_checkpoint/plugin/batchpoint_dag")
        selector = "[data-testid=batchpoint-history] tbody tr"
        wait_for(browser, lambda b: len(_statuses(b.find_elements(By.CSS_SELECTOR, selector))) > 1)
        tab = _statuses(browser.find_elements(By.CSS_SELECTOR, selector))
        assert tab[quarantined] == "quarantined" and tab[discarded] == "discarded", tab
        screenshot(browser, SCREENSHOTS, "status-4-dag-tab")
