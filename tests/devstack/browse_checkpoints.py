"""Browse -> Checkpoints in headless Chromium, run by the stack test on the api-server's
host (its network namespace, where the UI answers at http://localhost:8080 as its
AIRFLOW__API__BASE_URL says): log in through Airflow's form, open the plugin's page, the
pipeline's history and one checkpoint's page; print what they show as one JSON line and
save a screenshot of each.

    python browse_checkpoints.py BASE_URL USER PASSWORD CHECKPOINT_ID SCREENSHOTS_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support.*

from support.browser import headless_chromium, screenshot, wait_for


def main(base: str, user: str, password: str, checkpoint_id: str, shots: Path) -> dict:
    from selenium.webdriver.common.by import By

    seen: dict = {}
    with headless_chromium() as browser:
        browser.get(f"{base}/")  # not logged in: Airflow sends us to its login
        wait_for(browser, lambda b: b.find_elements(By.NAME, "username"), timeout=120)
        browser.find_element(By.NAME, "username").send_keys(user)
        browser.find_element(By.NAME, "password").send_keys(password)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_for(browser, lambda b: b.get_cookie("_token"), timeout=120)

        browser.get(f"{base}/plugin/batchpoint")  # Browse -> Checkpoints
        frame = wait_for(browser, lambda b: b.find_elements(By.TAG_NAME, "iframe"), 120)[0]
        browser.switch_to.frame(frame)
        link = wait_for(browser, lambda b: b.find_elements(By.LINK_TEXT, "payments"), 120)[0]
        seen["index_rows"] = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "tbody tr")]
        browser.switch_to.default_content()
        screenshot(browser, shots, "stack-1-browse-checkpoints")

        browser.switch_to.frame(frame)
        link.click()
        wait_for(browser, lambda b: "History" in b.find_element(By.TAG_NAME, "body").text, 120)
        seen["pipeline_page"] = browser.find_element(By.TAG_NAME, "body").text
        seen["history"] = [
            [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in browser.find_elements(By.CSS_SELECTOR, "tbody tr")
        ]
        browser.switch_to.default_content()
        screenshot(browser, shots, "stack-2-history")

        browser.switch_to.frame(frame)
        browser.find_element(By.LINK_TEXT, checkpoint_id).click()
        wait_for(
            browser,
            lambda b: "restore generation" in b.find_element(By.TAG_NAME, "body").text,
            120,
        )
        seen["checkpoint_page"] = browser.find_element(By.TAG_NAME, "body").text
        browser.switch_to.default_content()
        screenshot(browser, shots, "stack-3-checkpoint-after-restore")
    return seen


if __name__ == "__main__":
    base_url, user, password, checkpoint, folder = sys.argv[1:6]
    print(json.dumps(main(base_url, user, password, checkpoint, Path(folder))), flush=True)
