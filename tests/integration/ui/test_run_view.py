"""The run view in a real browser, over real runs on a worker: the list, one invocation followed live,
model output shown as text, the pools; and `toolfleet ui` alone on the same database and Redis."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from tests._cli import TOOLFLEET
from tests._ports import free_port
from tests._waiting import wait_for
from tests.integration.serve.replicas import Replica
from tests.integration.starting import journaled_late
from tests.integration.ui.browser import attribute_of, text_of, what_it_saw
from tests.integration.ui.conftest import AGENT, FLOWER, finished, screenshot, start, story
from tests.integration.worker_processes import REPO_ROOT

pytestmark = pytest.mark.integration

T = TypeVar("T")

PAYLOAD = "<script>window.pwned = 1; document.title = 'pwned'</script><img src=x onerror=\"window.pwned=2\">"


def _live(
    browser: WebDriver, service: Replica, invocation_id: str, condition: Callable[[], T], what: str
) -> T:
    """`wait_for(condition)` on a page following a running invocation; failing, it says what the page,
    the journal and the replica saw."""
    try:
        return wait_for(condition, timeout_s=40, what=what)
    except AssertionError as exc:
        told = story(service, invocation_id) or {}
        calls = [(c["tool"], c["state"], c.get("progress")) for c in told.get("calls", [])]
        raise AssertionError(
            f"{exc}\n{what_it_saw(browser)}\njournal: {told.get('state')} {calls}\n"
            f"replica log:\n{service.log()[-3000:]}"
        ) from None


def _row(browser: WebDriver, invocation_id: str) -> WebElement:
    return browser.find_element(By.CSS_SELECTOR, f'tr[data-invocation="{invocation_id}"]')


def _cells(row: WebElement) -> list[str]:
    return [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]


def test_the_list_shows_a_completed_and_a_failed_and_compensated_invocation(
    service: Replica, browser: WebDriver, tmp_path: Path
) -> None:
    # given: one invocation that completes, one whose refused call fails it after two bookings
    completed = start(service, "book table")
    failed = start(service, "book flight ; book hotel & refuse")
    assert finished(service, completed)["state"] == "succeeded"
    told = finished(service, failed)
    assert told["state"] == "failed"
    assert [c["compensation"]["state"] for c in told["calls"] if c["tool"] == "book"] == ["succeeded"] * 2

    # when: a person opens the list
    browser.get(f"{service.root}/ui")

    # then: each row says its agent, first words, calls and outcome
    assert _cells(_row(browser, completed))[:3] == [AGENT, "book table", "1"]
    assert _cells(_row(browser, completed))[5] == "succeeded"
    assert _cells(_row(browser, failed))[:3] == [AGENT, "book flight ; book hotel & refuse", "3"]
    assert _cells(_row(browser, failed))[5] == "failed, compensated (2 undone)"
    screenshot(browser, tmp_path, "ui-invocations")

    # and: the state filter keeps only what it names
    browser.get(f"{service.root}/ui?state=compensated&agent={AGENT}")
    shown = {row.get_attribute("data-invocation") for row in browser.find_elements(By.CSS_SELECTOR, "tr.run")}
    assert failed in shown and completed not in shown

    # and: the failed invocation's page tells its calls, its compensations and links to Flower
    browser.get(f"{service.root}/ui/invocations/{failed}")
    calls = browser.find_elements(By.CSS_SELECTOR, "li.call")
    assert [c.find_element(By.CLASS_NAME, "tool").text for c in calls] == ["book", "book", "refuse"]
    assert [c.find_element(By.CLASS_NAME, "pool").text for c in calls] == ["ui"] * 3
    assert all(c.find_element(By.CLASS_NAME, "worker").text.endswith("@integration") for c in calls)
    links = [c.find_element(By.CLASS_NAME, "flower").get_attribute("href") for c in calls]
    assert links == [f"{FLOWER}/task/{c['task_id']}" for c in told["calls"]]
    turns = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "section.turn h2")]
    assert turns == ["Model turn 1", "Model turn 2"]
    undone = browser.find_elements(By.CSS_SELECTOR, "section.compensations li.compensation")
    assert [u.find_element(By.TAG_NAME, "strong").text for u in undone] == ["book", "book"]
    assert "the desk refuses" in browser.find_element(By.CSS_SELECTOR, "section.failure").text
    screenshot(browser, tmp_path, "ui-invocation")


def test_a_running_call_progresses_on_screen_without_a_reload(
    service: Replica, browser: WebDriver, tmp_path: Path
) -> None:
    # given: an invocation whose one call reports 16 steps over 8 seconds
    invocation_id = start(service, "crawl 16 8")
    browser.get(f"{service.root}/ui/invocations/{invocation_id}")
    browser.execute_script("window.sameDocument = true")

    def fraction() -> float:  # 0 while there is no bar, or the live update is replacing it
        value = attribute_of(browser, "li.call progress", "value")
        return float(value) if value else 0.0

    # when: the call runs
    first = _live(browser, service, invocation_id, lambda: fraction() or None, "a first progress report")
    later = wait_for(lambda: (now := fraction()) > first and now, timeout_s=30, what="the bar to move on")
    message = wait_for(lambda: text_of(browser, "li.call .progress-message"), what="the progress message")
    screenshot(browser, tmp_path, "ui-invocation-running")

    # then: the bar moved and its message followed, on the same document (no reload)
    assert 0 < first < later <= 1
    assert message.startswith("step ") and message.endswith(" of 16")
    assert browser.execute_script("return window.sameDocument") is True

    # and: the end shows up too, still without a reload
    wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, '.story[data-state="succeeded"]'),
        timeout_s=40,
        what="the page to show the invocation succeeded",
    )
    wait_for(
        lambda: "crawled 16 steps" in text_of(browser, "section.answer"), timeout_s=10, what="the answer"
    )
    assert browser.execute_script("return window.sameDocument") is True


def test_a_page_that_fell_behind_its_running_call_catches_up_on_the_next_progress_report(
    service: Replica, browser: WebDriver
) -> None:
    def fraction(selector: str) -> float:  # 0 while there is no bar, or no report on it yet
        value = attribute_of(browser, selector, "value")
        return float(value) if value else 0.0

    # given: a page following a call that reports 16 steps over 8 seconds
    invocation_id = start(service, "crawl 16 8")
    browser.get(f"{service.root}/ui/invocations/{invocation_id}")
    _live(browser, service, invocation_id, lambda: fraction("li.call progress") or None, "a first report")

    # when: the page loses the call (as one rendered before the call's first events would show it)
    browser.execute_script(
        "document.getElementById('timeline').innerHTML = '<div class=\"story\" data-active=\"true\"></div>'"
    )

    # then: a later progress report of the call brings the call and its bar back while it still runs
    back = _live(
        browser,
        service,
        invocation_id,
        lambda: fraction(".story[data-state='running'] li.call progress") or None,
        "the running call's bar to come back",
    )
    assert 0 < back < 1
    finished(service, invocation_id)


def test_a_model_answer_with_a_script_is_shown_as_text_and_runs_nothing(
    service: Replica, browser: WebDriver
) -> None:
    # given: a tool result and a model answer carrying a script and an image that runs one on error
    invocation_id = start(service, f"echo {PAYLOAD}")
    assert finished(service, invocation_id)["final_answer"] == f"said: {PAYLOAD}"

    # when: the list and the invocation's page are shown
    browser.get(f"{service.root}/ui")
    listed = _cells(_row(browser, invocation_id))[1]
    browser.get(f"{service.root}/ui/invocations/{invocation_id}")
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "section.answer"), what="the answer")

    # then: the markup is text on the page, and nothing of it ran
    assert browser.find_element(By.CSS_SELECTOR, "section.answer pre").text == f"said: {PAYLOAD}"
    assert browser.find_element(By.CSS_SELECTOR, "pre.result").text == PAYLOAD
    assert listed.startswith("echo <script>window.pwned")
    assert browser.find_elements(By.CSS_SELECTOR, "main script, main img") == []
    assert browser.execute_script("return window.pwned === undefined") is True
    assert browser.title != "pwned"


def test_the_pools_page_shows_the_live_catalog(service: Replica, browser: WebDriver, tmp_path: Path) -> None:
    # given: the worker of pool `ui` is alive
    browser.get(f"{service.root}/ui/pools")

    # then: its pool, kind, concurrency, tools and heartbeat are on the page
    pool = browser.find_element(By.CSS_SELECTOR, 'section.pool[data-pool="ui"]')
    text = pool.text
    assert "1 worker · kind threads · concurrency 8" in text
    assert "Tools: book (compensable), crawl, echo, pay, refuse" in text
    cells = pool.find_elements(By.CSS_SELECTOR, "table.workers td")
    assert cells[0].text.startswith("ui-") and cells[0].text.endswith("@integration")
    assert cells[4].text.endswith(" s") or cells[4].text.endswith(" ms")
    screenshot(browser, tmp_path, "ui-pools")


@pytest.fixture
def ui_alone(service_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """`toolfleet ui` on its own, with basic authentication, on the service's database and Redis."""
    port = free_port()
    env = {**service_env, "TOOLFLEET_UI_BASIC_AUTH": "ops:hunter22"}
    log = tmp_path / "ui.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [TOOLFLEET, "ui", "--port", str(port)], cwd=REPO_ROOT, env=env, stdout=out, stderr=out
        )
    root = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert process.poll() is None, log.read_text()
        try:
            return httpx.get(f"{root}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(answers, timeout_s=30, what="toolfleet ui answering")
        yield root
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_toolfleet_ui_alone_shows_the_same_invocations_behind_basic_authentication(
    service: Replica, ui_alone: str
) -> None:
    invocation_id = start(service, "book seat")
    finished(service, invocation_id)

    refused = httpx.get(f"{ui_alone}/ui", timeout=10)
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Basic")
    assert httpx.get(f"{ui_alone}/ui", auth=("ops", "wrong"), timeout=10).status_code == 401

    page = httpx.get(f"{ui_alone}/ui/invocations/{invocation_id}", auth=("ops", "hunter22"), timeout=10)
    assert page.status_code == 200
    assert "booked seat" in page.text and 'class="tool">book<' in page.text
    pools = httpx.get(f"{ui_alone}/ui/pools", auth=("ops", "hunter22"), timeout=10)
    assert 'data-pool="ui"' in pools.text


def test_a_page_opened_as_its_invocation_starts_waits_for_its_journal_row(
    service: Replica, browser: WebDriver, redis_url: str, database_url: str
) -> None:
    # given: an invocation whose first event is written, and whose journal row comes a second later
    with journaled_late(redis_url, database_url, AGENT, "book table") as invocation_id:
        # when: its page is opened meanwhile
        browser.get(f"{service.root}/ui/invocations/{invocation_id}")

    # then: the page shows it (its first words), not "No such invocation"
    assert "No such invocation" not in browser.page_source
    assert browser.find_elements(By.ID, "timeline")
    assert "book table" in browser.page_source


# Counts the page's event-stream connections (`streamOpens`) and their failures (`streamErrors`).
COUNT_STREAMS = """
(function () {
  var Original = window.EventSource;
  window.streamOpens = 0;
  window.streamErrors = 0;
  function Counted(url, options) {
    var source = new Original(url, options);
    source.addEventListener("open", function () { window.streamOpens += 1; });
    source.addEventListener("error", function () { window.streamErrors += 1; });
    return source;
  }
  Counted.prototype = Original.prototype;
  Counted.CONNECTING = Original.CONNECTING;
  Counted.OPEN = Original.OPEN;
  Counted.CLOSED = Original.CLOSED;
  window.EventSource = Counted;
})();
"""


def test_a_call_quiet_past_the_keep_alive_keeps_the_page_on_one_connection(
    service: Replica, browser: WebDriver
) -> None:
    # given: a page that counts its event-stream connections, following a call quiet for 17 s (past
    # the Redis client's 5 s read timeout, and past the 15 s keep-alive)
    added = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": COUNT_STREAMS})
    try:
        invocation_id = start(service, "crawl 1 17")
        browser.get(f"{service.root}/ui/invocations/{invocation_id}")
        _live(
            browser,
            service,
            invocation_id,
            lambda: browser.execute_script("return window.streamOpens"),
            "a stream",
        )

        # when: the call ends, after its silence
        _live(
            browser,
            service,
            invocation_id,
            lambda: browser.find_elements(By.CSS_SELECTOR, '.story[data-state="succeeded"]'),
            "the page to show the invocation succeeded",
        )

        # then: the page heard the end on the one connection it opened: never dropped, never reopened
        assert browser.execute_script("return [window.streamOpens, window.streamErrors]") == [1, 0]
    finally:
        browser.execute_cdp_cmd(
            "Page.removeScriptToEvaluateOnNewDocument", {"identifier": added["identifier"]}
        )
