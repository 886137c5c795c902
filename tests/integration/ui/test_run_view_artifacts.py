"""The run view lists each call's artifacts: name, type and size, a link to the bytes (served behind
the view's own sign-in, a tenant's own only), a picture of an image and the beginning of a text. The
tool runs on a real worker, the view is a real replica's; a real browser shows the page."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from orchestrator.saga.journal import Journal
from tests._waiting import wait_for
from tests.artifact_stores import ArtifactStoreUrl
from tests.integration.serve.artifact_agents import BIG_NAME, POOL, made
from tests.integration.serve.replicas import API_KEY, Replica, replica_env, start_replica
from tests.integration.ui.conftest import AUTH, finished, screenshot
from tests.integration.worker_processes import tool_worker
from workers.artifacts import ArtifactRef, ArtifactStore, refs_in, size_text

pytestmark = pytest.mark.integration

MODULE = "tests.integration.serve.artifact_agents"
GLOBEX = "k-globex-run-view"
PREVIEW_CHARS = 2000


@pytest.fixture(scope="module")
def service(
    redis_url: str,
    database_url: str,
    dir_artifact_url: ArtifactStoreUrl,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Replica]:
    """The replica the conftest's browser signs in to (the default tenant's key), serving `drawer`,
    with the worker of its tool; both on a directory store. globex has a key too."""
    logs = tmp_path_factory.mktemp("ui-artifacts")
    env = replica_env(
        redis_url,
        database_url,
        "http://127.0.0.1:9/unused",
        TOOLFLEET_API_KEYS=f"{API_KEY},globex:{GLOBEX}",
        **dir_artifact_url.worker_env(),
    )
    name = f"ui-artifacts-{uuid.uuid4().hex[:6]}@integration"
    worker = tool_worker(
        redis_url, [POOL], [MODULE], logs / "worker.log", name, env=dir_artifact_url.worker_env()
    )
    with worker.running(timeout_s=60):
        replica = start_replica(env, logs / "serve.log", "--agent", f"drawer={MODULE}:drawer", agents=())
        try:
            yield replica
        finally:
            replica.stop()


def drawn(service: Replica, database_url: str, ns: str) -> tuple[str, list[ArtifactRef]]:
    """A `drawer` invocation of the default tenant's, once it succeeded: its id and its artifacts."""
    started = httpx.post(
        f"{service.base_url}/agents/drawer/invocations", json={"input": ns}, headers=AUTH, timeout=30
    )
    assert started.status_code == 202, started.text
    invocation_id = str(started.json()["id"])
    assert finished(service, invocation_id)["state"] == "succeeded", service.log()[-3000:]
    journal = Journal(database_url)
    try:
        [call] = journal.calls(invocation_id)
    finally:
        journal.engine.dispose()
    return invocation_id, refs_in(call.result_object)


def signed_in(service: Replica, key: str) -> httpx.Client:
    """A browser-like client signed in to the run view with `key`."""
    client = httpx.Client(base_url=service.root, timeout=30)
    form = client.get("/ui/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce is not None
    signed = client.post("/ui/login", data={"nonce": nonce[1], "key": key})
    assert signed.status_code == 303, signed.text
    return client


def test_a_calls_artifacts_are_listed_an_image_shown_and_a_texts_beginning_quoted(
    service: Replica, browser: WebDriver, database_url: str, tmp_path: Path
) -> None:
    # given: an invocation whose call returned five artifacts
    ns = f"view-{uuid.uuid4().hex[:8]}"
    invocation_id, refs = drawn(service, database_url, ns)
    expected = made(ns)

    # when: a person opens its page
    browser.get(f"{service.root}/ui/invocations/{invocation_id}")
    items = wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, "li.call li.artifact"), what="the call's artifacts"
    )

    # then: each is listed, linked to its bytes, with its type and size
    assert [item.find_element(By.CSS_SELECTOR, ".artifact-name").text for item in items] == [
        m.name for m in expected
    ]
    links = [item.find_element(By.CSS_SELECTOR, "a.artifact-name").get_attribute("href") for item in items]
    assert links == [f"{service.root}/ui/artifacts/{ref.id}" for ref in refs]
    facts = [item.find_element(By.CSS_SELECTOR, ".artifact-facts").text for item in items]
    assert facts[0] == "application/octet-stream · 2.6 MB"
    assert facts[3] == f"image/png · {size_text(len(expected[3].data))}"
    # and: the picture is loaded through the view (its sign-in, its policy) and kept small by the stylesheet
    picture = items[3].find_element(By.CSS_SELECTOR, "img.artifact-image")
    assert wait_for(lambda: browser.execute_script("return arguments[0].naturalWidth", picture) == 640)
    assert picture.value_of_css_property("max-height") == "320px"
    assert picture.size["height"] <= 322 and picture.size["width"] <= 512 + 2  # 640 x 480, shown smaller
    assert [i for i, item in enumerate(items) if item.find_elements(By.TAG_NAME, "img")] == [3]
    # and: a text's first 2,000 characters are quoted, as text, saying when there is more
    quoted = [item.find_elements(By.CSS_SELECTOR, "pre.artifact-text") for item in items]
    assert [i for i, found in enumerate(quoted) if found] == [1, 2, 4]
    assert quoted[4][0].get_attribute("textContent") == "<script>alert(1)</script>"  # shown, never run
    assert quoted[1][0].get_attribute("textContent") == expected[1].data.decode()[:PREVIEW_CHARS]
    assert "its first 2000 characters" in items[1].text
    assert quoted[2][0].get_attribute("textContent") == f"<b>{ns}</b> & short"
    assert "its first" not in items[2].text
    browser.execute_script("arguments[0].scrollIntoView()", items[0])
    screenshot(browser, tmp_path, "ui-artifacts")


def test_the_views_artifact_route_serves_a_tenant_its_own_artifacts_only(
    service: Replica, database_url: str
) -> None:
    # given: the default tenant's artifacts, and two people signed in: its own, and globex
    ns = f"route-{uuid.uuid4().hex[:8]}"
    invocation_id, refs = drawn(service, database_url, ns)
    own, globex = signed_in(service, API_KEY), signed_in(service, GLOBEX)
    try:
        # when: each asks for them
        for ref, item in zip(refs, made(ns), strict=True):
            mine = own.get(f"/ui/artifacts/{ref.id}")
            theirs = globex.get(f"/ui/artifacts/{ref.id}")
            # then: its own tenant gets the bytes, as a download; globex what an unknown id gets
            assert mine.status_code == 200 and hashlib.sha256(mine.content).hexdigest() == ref.sha256
            assert mine.content == item.data
            assert mine.headers["content-disposition"].startswith("attachment;")
            assert mine.headers["x-content-type-options"] == "nosniff"
            unknown = uuid.uuid4().hex
            nobodys = globex.get(f"/ui/artifacts/{unknown}")
            assert (theirs.status_code, theirs.text.replace(ref.id, "<id>")) == (
                404,
                nobodys.text.replace(unknown, "<id>"),
            )
            assert "No such artifact" in theirs.text
        assert own.head(f"/ui/artifacts/{refs[0].id}").headers["content-length"] == str(refs[0].size)
        assert own.get("/ui/artifacts/not-an-id").status_code == 404
        # and: globex's view of the invocation page is no more than of an unknown one
        assert globex.get(f"/ui/invocations/{invocation_id}").status_code == 404
        assert BIG_NAME not in globex.get(f"/ui/invocations/{invocation_id}").text
    finally:
        own.close()
        globex.close()
    # and: without a sign-in, the view asks for one
    anonymous = httpx.get(f"{service.root}/ui/artifacts/{refs[0].id}", timeout=30)
    assert anonymous.status_code == 303 and "/ui/login" in anonymous.headers["location"]


def test_a_removed_artifact_is_listed_without_its_link(
    service: Replica, database_url: str, dir_artifact_url: ArtifactStoreUrl
) -> None:
    # given: an invocation's text artifact removed from the store
    ns = f"removed-{uuid.uuid4().hex[:8]}"
    invocation_id, refs = drawn(service, database_url, ns)
    assert ArtifactStore.from_url(dir_artifact_url.url).delete(refs[2].id)
    client = signed_in(service, API_KEY)
    try:
        # when: its page is read
        page = client.get(f"/ui/invocations/{invocation_id}")
        # then: the artifact is named, said to be removed, neither linked nor quoted; the others are
        assert page.status_code == 200
        item = re.search(
            rf'<li class="artifact artifact-gone" data-artifact="{refs[2].ref}">(.*?)</li>', page.text, re.S
        )
        assert item is not None, page.text
        assert "short.txt" in item[1] and "removed from the artifact store" in item[1]
        assert "href" not in item[1] and "<pre" not in item[1]
        assert f'href="/ui/artifacts/{refs[1].id}"' in page.text
        assert client.get(f"/ui/artifacts/{refs[2].id}").status_code == 404
    finally:
        client.close()
