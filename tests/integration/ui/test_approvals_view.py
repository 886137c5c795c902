"""Approvals on the run view, in a real browser: a paused invocation in the list, its waiting call
approved (as asked or with edited arguments) or rejected with a reason on the page, after a
confirmation, and the invocation going on to its end."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from tests._waiting import wait_for
from tests.integration.serve.replicas import Replica
from tests.integration.ui.conftest import finished, screenshot, start, story

pytestmark = pytest.mark.integration


def _paused(service: Replica, text: str) -> str:
    invocation_id = start(service, text)
    wait_for(
        lambda: (story(service, invocation_id) or {}).get("state") == "paused",
        timeout_s=30,
        what=f"invocation {invocation_id} to pause for approval",
    )
    return invocation_id


def _submit_confirmed(browser: WebDriver, form_selector: str) -> None:
    """Send the form, and accept the confirmation the page asks for first."""
    browser.find_element(By.CSS_SELECTOR, f"{form_selector} button").click()
    alert = WebDriverWait(browser, 10).until(expected_conditions.alert_is_present())
    assert "?" in alert.text
    alert.accept()


def test_approving_on_the_page_lets_the_paused_invocation_complete(
    service: Replica, browser: WebDriver, tmp_path: Path
) -> None:
    # given: an invocation paused on a call that needs approval
    invocation_id = _paused(service, "pay mario 100")

    # then: the list shows it paused
    browser.get(f"{service.root}/ui?state=paused")
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-invocation="{invocation_id}"]')
    assert row.find_elements(By.TAG_NAME, "td")[5].text == "paused"

    # and: the approvals page shows the waiting call with its arguments
    browser.get(f"{service.root}/ui/approvals")
    waiting = browser.find_element(By.CSS_SELECTOR, f'section.waiting[data-invocation="{invocation_id}"]')
    assert json.loads(waiting.find_element(By.CSS_SELECTOR, "pre.arguments").text) == {
        "to": "mario",
        "amount": 100,
    }
    screenshot(browser, tmp_path, "ui-approvals")

    # when: a person approves it, and confirms
    _submit_confirmed(browser, f'section.waiting[data-invocation="{invocation_id}"] form.approve')

    # then: the invocation runs the call and completes
    told = finished(service, invocation_id)
    assert told["state"] == "succeeded"
    assert told["final_answer"] == "done: paid 100 to mario"
    wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, '.story[data-state="succeeded"]'),
        timeout_s=30,
        what="the invocation's page to show it completed",
    )


def test_approving_with_edited_arguments_runs_the_call_with_them(
    service: Replica, browser: WebDriver
) -> None:
    invocation_id = _paused(service, "pay luigi 500")
    browser.get(f"{service.root}/ui/invocations/{invocation_id}")
    edited = browser.find_element(By.CSS_SELECTOR, "form.edit textarea")
    edited.clear()
    edited.send_keys('{"to": "luigi", "amount": 50}')
    _submit_confirmed(browser, "form.edit")

    told = finished(service, invocation_id)
    assert told["final_answer"] == "done: paid 50 to luigi"


def test_rejecting_with_a_reason_tells_the_model_and_a_cancelled_confirmation_sends_nothing(
    service: Replica, browser: WebDriver
) -> None:
    invocation_id = _paused(service, "pay wario 9999")
    browser.get(f"{service.root}/ui/invocations/{invocation_id}")

    # when: the person thinks better of it at the confirmation
    browser.find_element(By.CSS_SELECTOR, "form.approve button").click()
    WebDriverWait(browser, 10).until(expected_conditions.alert_is_present()).dismiss()
    # then: nothing was decided
    assert (story(service, invocation_id) or {})["state"] == "paused"

    # when: they reject it with a reason
    browser.find_element(By.CSS_SELECTOR, "form.reject input[name=reason]").send_keys("not to wario")
    _submit_confirmed(browser, "form.reject")

    told = finished(service, invocation_id)
    assert told["state"] == "succeeded"
    assert "not to wario" in told["final_answer"]


def test_a_decision_without_the_session_token_is_refused(service: Replica, browser: WebDriver) -> None:
    # given: a paused invocation, and the browser's own session cookie (as another site's form would send)
    invocation_id = _paused(service, "pay peach 7")
    cookies = {c["name"]: c["value"] for c in browser.get_cookies()}

    # when: a form without the page's token is posted with it
    response = httpx.post(
        f"{service.root}/ui/invocations/{invocation_id}/approvals",
        data={"call_id": "call_s0_0", "decision": "approve"},
        cookies=cookies,
        timeout=10,
    )

    # then: it is refused and the call still waits
    assert response.status_code == 403
    assert (story(service, invocation_id) or {})["state"] == "paused"
