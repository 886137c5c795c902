"""The fleet page in a real browser, over real calls on real workers: lookups that queue on a worker of
concurrency 2, a call that fails, one that times out, and the `clerk`'s bookings and refusal. The
journal then holds each call's queue wait as its worker measured it, and the page shows every pool,
tool, count and chart."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from orchestrator.saga._journal_tables import tool_calls
from tests._waiting import wait_for
from tests.integration.serve.replicas import Replica, replica_env
from tests.integration.ui.conftest import AGENTS, AUTH, DOCS, FLOWER, finished, pool_worker, screenshot, start
from tests.integration.ui.fleet_agents import LOOKUP_S
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration

DISPATCHER = "dispatcher=tests.integration.ui.fleet_agents:dispatcher"
LOOKUPS = 8


@pytest.fixture(scope="module")
def service_env(redis_url: str, database_url: str) -> dict[str, str]:
    """The replica of the folder's fixtures, serving `dispatcher` beside `clerk`."""
    return replica_env(
        redis_url,
        database_url,
        "http://127.0.0.1:9/unused",
        TOOLFLEET_AGENTS=f"{AGENTS},{DISPATCHER}",
        TOOLFLEET_FLOWER_URL=FLOWER,
    )


@pytest.fixture(scope="module")
def fleet_worker(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    """The worker of pool `fleet`: two threads, so that most of a batch of lookups waits its turn."""
    folder = tmp_path_factory.mktemp("fleet-worker")
    with pool_worker(redis_url, folder, "fleet", "tests.integration.ui.fleet_agents", 2) as worker:
        yield worker


def _dispatch(service: Replica, plan: str) -> str:
    response = httpx.post(
        f"{service.base_url}/agents/dispatcher/invocations", json={"input": plan}, headers=AUTH, timeout=30
    )
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _journaled(database_url: str) -> dict[str, list[tuple[str | None, int | None]]]:
    """Each tool's journaled calls: (outcome, queue wait in ms)."""
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                sa.select(tool_calls.c.tool, tool_calls.c.outcome, tool_calls.c.queued_ms)
            )
            found: dict[str, list[tuple[str | None, int | None]]] = {}
            for tool, outcome, queued_ms in rows:
                found.setdefault(tool, []).append((outcome, queued_ms))
            return found
    finally:
        engine.dispose()


def _cells(browser: WebDriver, pool: str, tool: str) -> dict[str, str]:
    row = browser.find_element(
        By.CSS_SELECTOR, f'section.fleet-pool[data-pool="{pool}"] tr[data-tool="{tool}"]'
    )
    return {
        str(cell.get_attribute("class")).removeprefix("number "): cell.text
        for cell in row.find_elements(By.TAG_NAME, "td")[1:]
    }


def test_the_fleet_page_shows_each_pool_and_tool_with_queue_waits_from_the_workers(
    fleet_worker: WorkerProcess, service: Replica, browser: WebDriver, database_url: str, tmp_path: Path
) -> None:
    # given: lookups that queue, a failing call and one that times out; the clerk books twice and fails
    dispatched = _dispatch(service, f"lookup {LOOKUPS} ; flaky ; stall")
    clerk = start(service, "book table ; book room & refuse")
    assert finished(service, dispatched)["state"] == "succeeded"
    assert finished(service, clerk)["state"] == "failed"

    # then: the journal holds each call's outcome, and the queue wait its worker measured
    journaled = _journaled(database_url)
    assert [outcome for outcome, _ in journaled["lookup"]] == ["success"] * LOOKUPS
    assert journaled["flaky"] == [("execution_error", journaled["flaky"][0][1])]
    assert journaled["stall"] == [("timed_out", None)]  # given up at its deadline: no worker told it
    waits = [queued for _, queued in journaled["lookup"] + journaled["flaky"] + journaled["book"]]
    assert all(queued is not None and queued >= 0 for queued in waits), waits
    # 8 lookups of 0.3 s on 2 threads: the last two waited about three rounds of the others
    assert max(queued or 0 for queued in waits) >= 2 * LOOKUP_S * 1000, waits

    # when: a person opens the fleet page
    browser.get(f"{service.root}/ui/fleet")

    # then: both pools, each tool's counts, rates and queue waits, and each pool's two charts
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "section.fleet-pool"), what="the fleet page")
    pools = [
        s.get_attribute("data-pool") for s in browser.find_elements(By.CSS_SELECTOR, "section.fleet-pool")
    ]
    assert pools == ["fleet", "ui"]
    lookup = _cells(browser, "fleet", "lookup")
    assert (lookup["calls"], lookup["failed"], lookup["timed-out"]) == (str(LOOKUPS), "0", "0")
    assert lookup["queued-p95"].endswith(" ms") or lookup["queued-p95"].endswith(" s")
    assert _cells(browser, "fleet", "flaky")["failed"] == "1 (100.0 %)"
    stalled = _cells(browser, "fleet", "stall")
    assert (stalled["timed-out"], stalled["queued-p50"]) == ("1 (100.0 %)", "—")
    assert _cells(browser, "ui", "book")["calls"] == "2"
    assert _cells(browser, "ui", "refuse")["failed"] == "1 (100.0 %)"
    fleet = browser.find_element(By.CSS_SELECTOR, 'section.fleet-pool[data-pool="fleet"]')
    charts = fleet.find_elements(By.CSS_SELECTOR, "svg.fleet-chart")
    assert [c.get_attribute("role") for c in charts] == ["img", "img"]
    calls_label = str(charts[0].get_attribute("aria-label"))
    assert calls_label.startswith("Calls of pool fleet per 2 minutes, the last hour, oldest first: ")
    assert sum(int(n.split()[0]) for n in calls_label.split(": ", 1)[1].split(", ")) == LOOKUPS + 2
    assert fleet.find_elements(By.CSS_SELECTOR, "svg.fleet-chart.calls rect.failed")
    assert fleet.find_elements(By.CSS_SELECTOR, "svg.fleet-chart.latency rect.latency")

    # and: its picture, the whole page 1280 wide
    _whole_page(browser, width=1280)
    path = screenshot(browser, tmp_path, "ui-fleet")
    if os.environ.get("TOOLFLEET_TEST_SCREENSHOTS_TO_DOCS") == "1":
        shutil.copyfile(path, DOCS / path.name)


def _whole_page(browser: WebDriver, width: int) -> None:
    """Size the window so that the whole page shows, `width` wide, with no scroll bar."""
    for _ in range(3):
        page, shown, frame = browser.execute_script(
            "return [document.documentElement.scrollHeight, window.innerHeight,"
            " window.outerHeight - window.innerHeight]"
        )
        if shown >= page:
            return
        browser.set_window_size(width, page + frame)
