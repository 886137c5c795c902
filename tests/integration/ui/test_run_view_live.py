"""The run view kept live in a real browser, over real runs on a worker: the list takes in new
invocations and their ends by itself, a running call shows its worker and its time as they come,
the list is searched by id, conversation and tool, and every invocation says its agent and
conversation, whatever started it."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests._waiting import wait_for
from tests.integration.serve.replicas import Replica
from tests.integration.ui.browser import attribute_of, text_of, what_it_saw
from tests.integration.ui.conftest import AGENT, AUTH, FRONT, finished, screenshot, start, story

pytestmark = pytest.mark.integration


def _start(service: Replica, text: str, agent: str = AGENT, conversation: str | None = None) -> str:
    body: dict[str, object] = {"input": text}
    if conversation is not None:
        body["conversation_id"] = conversation
    response = httpx.post(
        f"{service.base_url}/agents/{agent}/invocations", json=body, headers=AUTH, timeout=30
    )
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _shown(browser: WebDriver) -> list[str]:
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.run")
    try:
        return [str(row.get_attribute("data-invocation")) for row in rows]
    except Exception:  # the list was swapped while read: read again
        return []


def _cell(browser: WebDriver, invocation_id: str, column: int) -> str:
    return text_of(browser, f'tr[data-invocation="{invocation_id}"] td:nth-child({column})')


def test_the_list_takes_in_a_new_invocation_and_its_end_without_a_reload(
    service: Replica, browser: WebDriver, tmp_path: Path
) -> None:
    # given: the list open, with nothing running
    browser.get(f"{service.root}/ui")
    browser.execute_script("window.sameDocument = true")

    # when: an invocation starts elsewhere, and runs for a few seconds
    invocation_id = start(service, "crawl 6 3")

    # then: its row comes in, running, then ends as succeeded, on the same document
    try:
        wait_for(lambda: invocation_id in _shown(browser), timeout_s=15, what="the new row")
        wait_for(lambda: _cell(browser, invocation_id, 6) == "running", timeout_s=10, what="running")
        first = _cell(browser, invocation_id, 5)
        wait_for(
            lambda: _cell(browser, invocation_id, 5) not in ("", first), timeout_s=5, what="time to move"
        )
        screenshot(browser, tmp_path, "ui-invocations-live")
        wait_for(lambda: _cell(browser, invocation_id, 6) == "succeeded", timeout_s=30, what="its end")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{what_it_saw(browser)}\n{service.log()[-2000:]}") from None
    assert browser.execute_script("return window.sameDocument") is True
    assert finished(service, invocation_id)["state"] == "succeeded"


def test_a_running_call_shows_its_worker_and_its_time_as_they_come(
    service: Replica, browser: WebDriver, tmp_path: Path
) -> None:
    # given: an invocation whose one call runs for 6 seconds, its page open
    invocation_id = start(service, "crawl 12 6")
    browser.get(f"{service.root}/ui/invocations/{invocation_id}")
    browser.execute_script("window.sameDocument = true")

    # when: the worker starts the call
    try:
        wait_for(
            lambda: attribute_of(browser, "li.call", "data-step") == "started", timeout_s=20, what="started"
        )
        worker = wait_for(
            lambda: (w := text_of(browser, "li.call .worker")) not in ("", "—") and w, what="the worker"
        )
        # then: while it runs, the journal has it dispatched and no worker yet; the page names its worker
        told = story(service, invocation_id)
        assert told is not None and told["calls"][0]["state"] == "dispatched"
        assert worker.endswith("@integration")
        assert "started" in text_of(browser, "li.call .step")
        # and: the waterfall's running bar names it too
        wait_for(
            lambda: worker in text_of(browser, 'svg.waterfall g.row[data-kind="running"] text.label'),
            timeout_s=10,
            what="the worker on the running bar",
        )
        # and: its time goes on, and the invocation's too, without a fetch of the page
        seen = text_of(browser, "li.call .elapsed")
        wait_for(lambda: text_of(browser, "li.call .elapsed") not in ("", seen), timeout_s=4, what="a tick")
        assert text_of(browser, ".status .elapsed") != "", "the invocation's own time"
        screenshot(browser, tmp_path, "ui-invocation-live")
        wait_for(
            lambda: browser.find_elements(By.CSS_SELECTOR, '.story[data-state="succeeded"]'),
            timeout_s=30,
            what="the end",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{what_it_saw(browser)}\n{service.log()[-2000:]}") from None
    # once ended, the call's worker is the journal's, and the time stops
    wait_for(lambda: text_of(browser, "li.call .worker") == worker, timeout_s=5, what="the journal's worker")
    assert text_of(browser, "li.call .elapsed") != ""
    assert browser.find_elements(By.CSS_SELECTOR, "li.call .elapsed[data-since]") == []
    assert browser.execute_script("return window.sameDocument") is True


def test_the_list_is_searched_by_id_conversation_and_tool_and_names_agent_and_conversation(
    service: Replica, browser: WebDriver, tmp_path: Path
) -> None:
    # given: an invocation of `front` (the service named `clerk`, served as `front`) in a conversation,
    # and two of `clerk` without one, one of them calling `echo`
    conversation = f"ticket-{uuid.uuid4().hex[:8]}"
    fronted = _start(service, "book desk", agent=FRONT, conversation=conversation)
    plain = _start(service, "book chair")
    echoed = _start(service, f"echo {uuid.uuid4().hex}")
    for invocation_id in (fronted, plain, echoed):
        finished(service, invocation_id)

    # then: the list names each one's agent and conversation
    browser.get(f"{service.root}/ui")
    wait_for(lambda: fronted in _shown(browser), what="the rows")
    assert _cell(browser, fronted, 1) == FRONT
    assert _cell(browser, fronted, 7) == conversation
    assert _cell(browser, plain, 1) == AGENT

    # and: its page too
    browser.get(f"{service.root}/ui/invocations/{fronted}")
    facts = browser.find_element(By.CSS_SELECTOR, "dl.facts").text
    assert f"Agent\n{FRONT}" in facts and f"Conversation\n{conversation}" in facts

    # and: the agent filter offers both names
    browser.get(f"{service.root}/ui")
    offered = [
        o.get_attribute("value") for o in browser.find_elements(By.CSS_SELECTOR, "select[name=agent] option")
    ]
    assert {AGENT, FRONT} <= set(offered)

    def searched(text: str) -> set[str]:
        browser.get(f"{service.root}/ui")
        box = browser.find_element(By.NAME, "q")
        box.clear()
        box.send_keys(text)
        box.submit()
        wait_for(lambda: "q=" in browser.current_url, what="the search")
        return set(_shown(browser))

    # when/then: a search keeps what matches, by an id's first characters, a conversation, a tool
    assert searched(plain[:8]) == {plain}
    assert searched(conversation) == {fronted}
    assert searched(conversation[:10]) == {fronted}
    by_tool = searched("echo")
    assert echoed in by_tool and plain not in by_tool and fronted not in by_tool
    screenshot(browser, tmp_path, "ui-search")
    # and: LIKE's wildcards are searched as themselves
    assert searched("%") == set() and searched("_") == set()
    # and: control characters (PostgreSQL refuses NUL in text) are left out, not an error
    browser.get(f"{service.root}/ui?q={plain[:4]}%00{plain[4:8]}&agent={AGENT}%00")
    assert set(_shown(browser)) == {plain}


def test_a_paused_invocation_counts_the_calls_it_waits_on(service: Replica, browser: WebDriver) -> None:
    invocation_id = start(service, "pay ada 5")
    wait_for(lambda: (story(service, invocation_id) or {}).get("state") == "paused", what="the pause")
    browser.get(f"{service.root}/ui")
    wait_for(lambda: invocation_id in _shown(browser), what="the row")
    assert _cell(browser, invocation_id, 3) == "1"
    assert _cell(browser, invocation_id, 6) == "paused"


def _rows_of_the_waterfall(browser: WebDriver) -> list[tuple[str, str]]:
    rows = browser.find_elements(By.CSS_SELECTOR, "svg.waterfall g.row")
    return [
        (str(r.get_attribute("data-kind")), r.find_element(By.CSS_SELECTOR, "text.label").text) for r in rows
    ]


def test_the_timeline_draws_turns_calls_and_compensations_against_time(
    service: Replica, browser: WebDriver, tmp_path: Path
) -> None:
    # given: a saga whose second turn's refused call fails it after two bookings, which are undone
    invocation_id = start(service, "book flight ; book hotel & refuse")
    assert finished(service, invocation_id)["state"] == "failed"

    # when: its page is opened
    browser.get(f"{service.root}/ui/invocations/{invocation_id}")

    # then: the waterfall has the turns, their calls under them, then the undos, latest first
    kinds = [kind for kind, _ in _rows_of_the_waterfall(browser)]
    assert kinds == ["model", "ok", "model", "ok", "error", "undo-ok", "undo-ok"], kinds
    labels = [label for _, label in _rows_of_the_waterfall(browser)]
    assert labels[0].startswith("model · turn 1") and labels[2].startswith("model · turn 2")
    assert labels[1].startswith("book") and labels[4].startswith("refuse")
    assert all(label.startswith("undo book") for label in labels[5:])
    # each undo is linked to the call it undoes, and bars go left to right in time
    links = browser.find_elements(By.CSS_SELECTOR, "svg.waterfall path.link")
    assert len(links) == 2
    starts = [
        float(r.find_element(By.CSS_SELECTOR, "rect.span").get_attribute("x") or 0)
        for r in browser.find_elements(By.CSS_SELECTOR, "svg.waterfall g.row")
    ]
    assert starts[0] <= starts[1] <= starts[2] <= starts[3] and starts[5] >= starts[4]
    # drawn with the view's stylesheet (the page refuses the SVG's inline <style>): bars are coloured
    fill = browser.execute_script(
        "return getComputedStyle(document.querySelector('svg.waterfall g.row.error rect.span')).fill"
    )
    assert fill not in ("", "rgb(0, 0, 0)"), fill
    screenshot(browser, tmp_path, "ui-timeline")


def test_the_timeline_of_a_running_invocation_grows_while_its_call_runs(
    service: Replica, browser: WebDriver
) -> None:
    invocation_id = start(service, "crawl 8 4")
    browser.get(f"{service.root}/ui/invocations/{invocation_id}")
    running = wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, 'svg.waterfall g.row.open[data-kind="running"]'),
        timeout_s=20,
        what="an open bar for the running call",
    )
    assert running
    wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, 'svg.waterfall g.row[data-kind="ok"]'),
        timeout_s=30,
        what="the call's bar closed as it ended",
    )
    # once the invocation has ended (its last model turn too), nothing is left open
    wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, '.story[data-state="succeeded"]'),
        timeout_s=30,
        what="the invocation's end",
    )
    assert browser.find_elements(By.CSS_SELECTOR, "svg.waterfall g.row.open") == []
