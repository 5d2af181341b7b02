"""A failing candidate's Data Docs in a real browser, offline: a real gate run (GX on
Spark) refuses the newest checkpoint and chooses the one before; headless Chromium, which
resolves no host but the loopback, logs in to a real Airflow api-server, opens the
refused checkpoint's page, follows its Data Docs link and finds that checkpoint's failed
validation, styled and scripted by assets the UI serves itself, naming the state it
validated. Screenshots under build/ui-screenshots/."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest

from support.airflow_stack import PASSWORD, USER, AirflowStack
from support.browser import (
    INSTALL_HINT,
    OFFLINE,
    chromium_paths,
    headless_chromium,
    log_in,
    screenshot,
    wait_for,
)

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.spark, pytest.mark.s3]

SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "ui-screenshots"
#: What a page that loaded its assets has: jQuery, bootstrap-table's plugin on it, and
#: Font Awesome's solid face.
LOADED = (
    "return [typeof window.jQuery, typeof (window.jQuery && jQuery.fn.bootstrapTable),"
    " document.fonts.check('900 16px \"Font Awesome 6 Free\"')]"
)


@pytest.mark.skipif(chromium_paths() is None, reason=f"no chromium here: {INSTALL_HINT}")
def test_a_refused_checkpoints_data_docs_open_offline_from_its_page(
    bp: Any,
    airflow_home: Path,
    good_run: Any,
    make_gate: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By

    from support.bad_deploys import buggy_balances, deploy, negative_counts
    from support.payments import GOOD_EPOCHS, SUITES_ONLY

    deploy(good_run.runner.pipeline, buggy_balances(negative_counts))
    bad = good_run.epoch(GOOD_EPOCHS + 1).outcome.checkpoint_id
    refused, chosen = make_gate(good_run, quality=SUITES_ONLY).run().candidates
    assert refused.checkpoint_id == bad and not refused.passed and chosen.passed

    bp.set(root=good_run.store.uri)  # the UI reads the gate's store
    monkeypatch.delenv("AIRFLOW_CONN_BATCHPOINT_STORAGE")
    stack = AirflowStack(tmp_path / "airflow", Path(airflow_home) / "airflow.db", dict(os.environ))
    with stack, headless_chromium(flags=(OFFLINE,)) as browser:
        stack.start(("api-server",))
        stack.wait_healthy()
        log_in(browser, stack.base_url, USER, PASSWORD)

        browser.get(f"{stack.base_url}/batchpoint/payments/checkpoints/{bad}")
        wait_for(browser, lambda b: b.find_elements(By.LINK_TEXT, "Data Docs"))[0].click()
        wait_for(browser, lambda b: "Validation Results" in b.page_source)
        shot = screenshot(browser, SCREENSHOTS, "data-docs-index")
        index_loaded = browser.execute_script(LOADED)
        index_text = browser.find_element(By.TAG_NAME, "body").text

        # the rows' links, as the index holds them for its table's script
        pages = re.findall(r"'_table_row_link_path': '(validations/[^']+)'", browser.page_source)
        assert pages, browser.page_source[:3000]
        browser.get(urljoin(browser.current_url, next(p for p in pages if "balances" in p)))
        wait_for(browser, lambda b: "Overview" in b.find_element(By.TAG_NAME, "body").text)
        screenshot(browser, SCREENSHOTS, "data-docs-validation")
        page_text = browser.find_element(By.TAG_NAME, "body").text
        page_loaded = browser.execute_script(LOADED)

    assert shot.stat().st_size > 10_000
    # the index lists this checkpoint's validations, drawn by its scripts offline
    assert index_loaded == ["function", "function", True], index_loaded
    assert "Showing 1 to 2 of 2 rows" in index_text, index_text  # one a suite
    assert index_text.count(f"payments checkpoint {bad}") == len(SUITES_ONLY.states)
    assert f"checkpoint {chosen.checkpoint_id}" not in index_text
    # its validation failed, and names the state it validated
    assert page_loaded == ["function", "function", True], page_loaded
    assert re.search(r"Status:\s*Failed", page_text), page_text[:2000]
    assert f"payments checkpoint {bad}" in page_text
    assert "Data asset: None" not in page_text
    assert "Data asset: payments: balances/balances" in page_text, page_text[:2000]
