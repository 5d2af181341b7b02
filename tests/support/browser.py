"""Headless Chromium for the UI tests, through Selenium and Debian's chromium and
chromium-driver (`./dev test` installs them when it may; see README)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

INSTALL_HINT = "apt-get update && apt-get install -y chromium chromium-driver"


def chromium_paths() -> tuple[str, str] | None:
    """(browser, driver), or None when either is missing."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@contextlib.contextmanager
def headless_chromium(
    width: int = 1400, height: int = 1000, flags: tuple[str, ...] = ()
) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    paths = chromium_paths()
    if paths is None:
        raise RuntimeError(f"chromium and chromedriver are needed: {INSTALL_HINT}")
    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for flag in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespaces for the sandbox
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        *flags,
    ):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(paths[1]), options=options)
    try:
        yield browser
    finally:
        browser.quit()


#: Chromium's flag that resolves no host name but the loopback's: a page that needs the
#: internet (a CDN's stylesheet, a font) renders as it would offline.
OFFLINE = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"


def wait_for(browser: Any, condition: Callable[[Any], Any], timeout: float = 60) -> Any:
    """The condition's first truthy value; a TimeoutException naming the page otherwise."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(browser, timeout, poll_frequency=0.2).until(condition)
    except TimeoutException:
        raise TimeoutException(
            f"waited {timeout}s on {browser.current_url}; page text:\n"
            + browser.find_element("tag name", "body").text[:3000]
        ) from None


def screenshot(browser: Any, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    browser.save_screenshot(str(path))
    return path


def log_in(browser: Any, base_url: str, user: str, password: str) -> None:
    """Through Airflow's own login form (not logged in, its UI sends us there); done when
    the session's token cookie is set."""
    from selenium.webdriver.common.by import By

    browser.get(f"{base_url}/")
    wait_for(browser, lambda b: b.find_elements(By.NAME, "username"))
    browser.find_element(By.NAME, "username").send_keys(user)
    browser.find_element(By.NAME, "password").send_keys(password)
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(browser, lambda b: b.get_cookie("_token"))
