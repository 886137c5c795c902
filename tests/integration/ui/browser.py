"""Debian's Chromium, headless, driven by Selenium through Debian's chromedriver: nothing is
downloaded at run time. Without a browser the browser tests are skipped, and fail in CI."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests._postgres import in_ci

__all__ = ["CHROMEDRIVER", "CHROMIUM", "start_browser", "what_it_saw"]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL = "apt-get install -y chromium chromium-driver"


def _unavailable(why: str) -> pytest.OutcomeException:
    message = f"no browser for the run view's tests ({why}); install it: {INSTALL}"
    if in_ci():
        return pytest.fail.Exception(f"{message} (CI is set: the browser tests may not be skipped)")
    return pytest.skip.Exception(message)


def start_browser(profile: Path) -> WebDriver:
    """A headless Chromium at 1280×900 with a fresh profile in `profile`."""
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.exists(binary) or shutil.which(Path(binary).name)):
            raise _unavailable(f"{binary} is missing")
    options = Options()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, for `what_it_saw`
    try:
        return webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    except WebDriverException as exc:
        raise _unavailable(f"Chromium did not start: {exc.msg}") from exc


def what_it_saw(browser: WebDriver) -> str:
    """The page's console (failed requests included) and its timeline, for a test's failure message."""
    try:
        console = "\n".join(f"{e['level']} {e['message']}" for e in browser.get_log("browser")[-30:])
        timeline = browser.execute_script(
            "var t = document.getElementById('timeline'); return t ? t.outerHTML.slice(0, 3000) : ''"
        )
    except WebDriverException as exc:
        return f"(the browser could not be read: {exc.msg})"
    return f"console:\n{console or '(empty)'}\ntimeline:\n{timeline}"


def attribute_of(browser: WebDriver, selector: str, name: str) -> str:
    """Attribute `name` of the first element `selector` finds; "" while there is none, or while the
    page's live update is replacing it (read again)."""
    try:
        return str(browser.find_element(By.CSS_SELECTOR, selector).get_attribute(name) or "")
    except (NoSuchElementException, StaleElementReferenceException):
        return ""


def text_of(browser: WebDriver, selector: str) -> str:
    """The text of the first element `selector` finds; "" while there is none, or while the page's live
    update is replacing it (the element read is then gone: read again)."""
    try:
        return str(browser.find_element(By.CSS_SELECTOR, selector).text)
    except (NoSuchElementException, StaleElementReferenceException):
        return ""
