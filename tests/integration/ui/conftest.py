"""Fixtures of the run view's tests: a worker of pool `ui`, one `toolfleet serve` replica serving the
agent `clerk` (tests/integration/ui_agents.py) on a fresh PostgreSQL database and the test Redis,
and a headless Chromium signed in to its run view."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests._waiting import wait_for
from tests.integration.serve.replicas import API_KEY, Replica, replica_env, start_replica
from tests.integration.ui.browser import start_browser
from tests.integration.worker_processes import tool_worker
from tests.orchestrator._databases import fresh_database
from workers.runtime.process import WorkerProcess

AGENT = "clerk"
# `front` serves the same service (whose own name is `clerk`) under another name: its invocations are front's
FRONT = "front"
AGENTS = f"{AGENT}=tests.integration.ui_agents:{AGENT},{FRONT}=tests.integration.ui_agents:{AGENT}"
FLOWER = "http://flower.example.test:5555"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
FINISHED = ("succeeded", "failed", "cancelled")
DOCS = Path(__file__).resolve().parents[3] / "docs"
README_PICTURES = (
    "ui-invocations",
    "ui-invocation",
    "ui-pools",
    "ui-approvals",
    "ui-invocation-live",
    "ui-search",
    "ui-timeline",
    "ui-fleet",
)


@pytest.fixture(scope="module")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fresh_database("postgresql", tmp_path_factory.mktemp("ui-db")) as url:
        yield url


@contextlib.contextmanager
def pool_worker(
    redis_url: str, folder: Path, pool: str, module: str, concurrency: int
) -> Iterator[WorkerProcess]:
    """A running threads worker of `pool` serving `module`'s tools, its log in `folder`."""
    worker = tool_worker(
        redis_url,
        [pool],
        [module],
        folder / f"{pool}.log",
        f"{pool}-{uuid.uuid4().hex[:6]}@integration",
        concurrency=concurrency,
    )
    with worker.running(timeout_s=60) as running:
        yield running


@pytest.fixture(scope="module")
def ui_worker(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    with pool_worker(
        redis_url, tmp_path_factory.mktemp("ui-worker"), "ui", "tests.integration.ui_agents", 8
    ) as w:
        yield w


@pytest.fixture(scope="module")
def service_env(redis_url: str, database_url: str) -> dict[str, str]:
    return replica_env(
        redis_url,
        database_url,
        "http://127.0.0.1:9/unused",
        TOOLFLEET_AGENTS=AGENTS,
        TOOLFLEET_FLOWER_URL=FLOWER,
    )


@pytest.fixture(scope="module")
def service(
    service_env: dict[str, str], ui_worker: WorkerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replica]:
    replica = start_replica(service_env, tmp_path_factory.mktemp("ui-serve") / "serve.log", agents=())
    try:
        yield replica
    finally:
        replica.stop()


@pytest.fixture(scope="module")
def browser(service: Replica, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """A browser signed in to the service's run view with one of its keys."""
    driver = start_browser(tmp_path_factory.mktemp("chromium-profile"))
    try:
        driver.get(f"{service.root}/ui")
        wait_for(lambda: "/ui/login" in driver.current_url, what="the sign-in form")
        driver.find_element(By.NAME, "key").send_keys(API_KEY)
        driver.find_element(By.CSS_SELECTOR, "form.login button").click()
        wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "table.runs"), what="the invocations")
        yield driver
    finally:
        driver.quit()


def start(service: Replica, text: str) -> str:
    """Start an invocation of `clerk` through the native API; its id."""
    response = httpx.post(
        f"{service.base_url}/agents/{AGENT}/invocations", json={"input": text}, headers=AUTH, timeout=30
    )
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def story(service: Replica, invocation_id: str) -> dict[str, Any] | None:
    response = httpx.get(f"{service.base_url}/invocations/{invocation_id}", headers=AUTH, timeout=10)
    return response.json() if response.status_code == 200 else None


def finished(service: Replica, invocation_id: str, timeout_s: float = 60) -> dict[str, Any]:
    """The journal's story of the invocation once it has ended."""

    def ended() -> dict[str, Any] | None:
        told = story(service, invocation_id)
        return told if told and told["state"] in FINISHED else None

    return wait_for(ended, timeout_s=timeout_s, what=f"invocation {invocation_id} to end")


def screenshot(driver: WebDriver, folder: Path, name: str) -> Path:
    """Save the page as `name`.png in `folder` (the test's own directory); with
    `TOOLFLEET_TEST_SCREENSHOTS_TO_DOCS=1`, also as docs/`name`.png, the README's pictures."""
    wait_for(lambda: driver.execute_script("return document.readyState") == "complete", what="the page")
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"no screenshot saved at {path}"
    assert path.stat().st_size > 10_000
    if os.environ.get("TOOLFLEET_TEST_SCREENSHOTS_TO_DOCS") == "1" and name in README_PICTURES:
        shutil.copyfile(path, DOCS / path.name)
    return path
