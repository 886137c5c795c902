"""Tenants of `toolfleet serve`: keys `acme:…`, `globex:…`, a plain key (the default tenant's) and an
operator's key in the keys file (scope `admin`), on two replicas and a worker of pool `tenants`.

A tenant is told nothing of another tenant's invocations, on any route or page: each answers 404
with the body an unknown id gets. Conversations and idempotency keys are each tenant's own, the tools
are given the request's tenant whatever the client sends, and the operator sees every tenant's.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from orchestrator import AiMessage, SqlChatMemoryStore, UserMessage
from tests._waiting import wait_for
from tests.integration.serve.replicas import Replica, replica_env, start_replica
from tests.integration.side_effects import process_client
from tests.integration.sse import server_sent_events
from tests.integration.worker_processes import tool_worker
from tests.metrics_scrape import scrape, total

pytestmark = pytest.mark.integration

MODULE = "tests.integration.serve.tenant_agents"
ACME, GLOBEX, PLAIN, ADMIN = "k1-acme:with:colons", "k2-globex", "k3-plain", "k4-operator"
KEYS = {"acme": ACME, "globex": GLOBEX, "default": PLAIN, "ops": ADMIN}


def auth(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


@pytest.fixture(scope="module")
def tenant_replicas(
    redis_url: str, database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Replica, Replica]]:
    """Two replicas serving `teller` and `vault` to the four keys, and the worker of their tools."""
    logs = tmp_path_factory.mktemp("tenants")
    keys_file = logs / "keys.json"
    keys_file.write_text(json.dumps({"keys": [{"key": ADMIN, "tenant": "ops", "scopes": ["admin"]}]}))
    env = replica_env(
        redis_url,
        database_url,
        "http://127.0.0.1:9/unused",
        TOOLFLEET_API_KEYS=f"acme:{ACME},globex:{GLOBEX},{PLAIN}",
        TOOLFLEET_API_KEYS_FILE=str(keys_file),
    )
    name = f"tenants-{uuid.uuid4().hex[:6]}@integration"
    worker = tool_worker(redis_url, ["tenants"], [MODULE], logs / "worker.log", name)
    agents = ["--agent", f"teller={MODULE}:teller", "--agent", f"vault={MODULE}:vault"]
    try:
        worker.wait_ready(timeout_s=60)
        first = start_replica(env, logs / "a.log", *agents, agents=())
        try:
            second = start_replica(env, logs / "b.log", *agents, agents=())
            try:
                yield first, second
            finally:
                second.stop()
        finally:
            first.stop()
    finally:
        worker.stop()


def start(replica: Replica, tenant: str, agent: str, text: str, **body: Any) -> str:
    """A native invocation of `agent` started by `tenant`: its id."""
    started = httpx.post(
        f"{replica.base_url}/agents/{agent}/invocations",
        json={"input": text, **body},
        headers=auth(tenant),
        timeout=30,
    )
    assert started.status_code == 202, started.text
    return str(started.json()["id"])


def events_until(replica: Replica, tenant: str, invocation_id: str, last: str) -> list[dict[str, Any]]:
    """The invocation's events, read by `tenant`, up to the first of type `last`."""
    url = f"{replica.base_url}/invocations/{invocation_id}/events"
    read: list[dict[str, Any]] = []
    with httpx.stream("GET", url, headers=auth(tenant), timeout=30) as response:
        assert response.status_code == 200, response.read()
        for _, event in server_sent_events(response.iter_lines()):
            read.append(event)
            if event["type"] == last:
                break
    return read


def answer(replica: Replica, tenant: str, invocation_id: str) -> str:
    return str(events_until(replica, tenant, invocation_id, "invocation.succeeded")[-1]["content"])


def told(response: httpx.Response, invocation_id: str) -> tuple[int, str]:
    """A response's status and body, the invocation's id in it made anonymous."""
    return response.status_code, response.text.replace(invocation_id, "<id>")


def ask_all(replica: Replica, tenant: str, invocation_id: str) -> dict[str, tuple[int, str]]:
    """What every route naming the invocation answers `tenant`."""
    url = f"{replica.base_url}/invocations/{invocation_id}"
    decision = {"decisions": [{"call_id": "lock-1", "decision": "approve"}]}
    answers = {
        "story": httpx.get(url, headers=auth(tenant), timeout=30),
        "events": httpx.get(f"{url}/events", headers=auth(tenant), timeout=30),
        "cancel": httpx.post(f"{url}/cancel", headers=auth(tenant), timeout=30),
        "approvals": httpx.post(f"{url}/approvals", json=decision, headers=auth(tenant), timeout=30),
    }
    return {route: told(response, invocation_id) for route, response in answers.items()}


def test_another_tenants_invocation_is_answered_as_an_unknown_one_on_every_route(
    tenant_replicas: tuple[Replica, Replica], database_url: str
) -> None:
    first, second = tenant_replicas
    ns = uuid.uuid4().hex[:8]
    # given: acme's finished invocation and acme's invocation paused for an approval
    done = start(first, "acme", "teller", f"hello {ns}")
    assert answer(first, "acme", done).startswith("tenant acme;")
    paused = start(first, "acme", "vault", ns, conversation_id=f"cv-{ns}")
    assert events_until(first, "acme", paused, "invocation.paused")[-1]["type"] == "invocation.paused"
    unknown = str(uuid.uuid4())

    # then: to globex, on either replica, each route answers as it does for an id nobody knows
    nobody = ask_all(second, "globex", unknown)
    assert {route: status for route, (status, _) in nobody.items()} == dict.fromkeys(nobody, 404)
    for invocation_id in (done, paused):
        assert ask_all(second, "globex", invocation_id) == nobody
        assert ask_all(first, "globex", invocation_id) == nobody
    # and: the paused one still waits, its call not run, nothing decided or cancelled
    story = httpx.get(f"{first.base_url}/invocations/{paused}", headers=auth("acme"), timeout=30).json()
    assert (story["state"], story["tenant"]) == ("paused", "acme")
    assert [w["state"] for w in story["waiting"]] == ["pending"]
    assert process_client().lrange(f"tenants:{ns}:locked", 0, -1) == []

    # when: the operator, who sees every tenant's, reads both and approves the call
    for invocation_id in (done, paused):
        seen = httpx.get(f"{second.base_url}/invocations/{invocation_id}", headers=auth("ops"), timeout=30)
        assert seen.status_code == 200 and seen.json()["tenant"] == "acme"
    decided = httpx.post(
        f"{second.base_url}/invocations/{paused}/approvals",
        json={"decisions": [{"call_id": "lock-1", "decision": "approve"}], "by": "ops"},
        headers=auth("ops"),
        timeout=30,
    )
    assert decided.status_code == 202, decided.text
    # then: the invocation goes on, as acme's, to its end, in acme's conversation
    assert answer(second, "acme", paused) == f"vault: locked {ns}"
    assert process_client().lrange(f"tenants:{ns}:locked", 0, -1) == [b"1"]
    store = SqlChatMemoryStore(database_url)
    try:
        kept = [m.text for m in store.get_messages(f"acme:vault/cv-{ns}") if isinstance(m, AiMessage)]
        assert kept[-1] == f"vault: locked {ns}"
        assert store.get_messages(f"vault/cv-{ns}") == []
    finally:
        store.engine.dispose()


def test_the_tools_are_given_the_requests_tenant_whatever_the_client_sends(
    tenant_replicas: tuple[Replica, Replica],
) -> None:
    first, _ = tenant_replicas
    claimed = start(first, "globex", "teller", "who am I", parameters={"tenant": "acme", "x": 1})
    assert answer(first, "globex", claimed).startswith("tenant globex;")
    plain = start(first, "default", "teller", "who am I", parameters={"tenant": "acme"})
    assert answer(first, "default", plain).startswith("tenant default;")
    completion = httpx.post(
        f"{first.base_url}/chat/completions",
        json={"model": "teller", "messages": [{"role": "user", "content": "who"}], "user": "acme"},
        headers=auth("globex"),
        timeout=30,
    )
    assert completion.status_code == 200, completion.text
    assert completion.json()["choices"][0]["message"]["content"].startswith("tenant globex;")
    # and: the journal keeps each one as its requester's
    for tenant, invocation_id in (("globex", claimed), ("default", plain)):
        story = httpx.get(f"{first.base_url}/invocations/{invocation_id}", headers=auth("ops"), timeout=30)
        assert story.json()["tenant"] == tenant


def _turn(replica: Replica, tenant: str, conversation: str, text: str, *, native: bool) -> str:
    """One turn of `tenant`'s conversation: the answer's history, by the native API or a completion."""
    if native:
        said = answer(replica, tenant, start(replica, tenant, "teller", text, conversation_id=conversation))
    else:
        response = httpx.post(
            f"{replica.base_url}/chat/completions",
            json={
                "model": "teller",
                "messages": [{"role": "user", "content": text}],
                "metadata": {"conversation_id": conversation},
            },
            headers=auth(tenant),
            timeout=30,
        )
        assert response.status_code == 200, response.text
        said = response.json()["choices"][0]["message"]["content"]
    return said.split("; heard: ", 1)[1]


@pytest.mark.parametrize("native", [True, False], ids=["native", "completions"])
def test_one_conversation_id_is_two_conversations_of_two_tenants(
    tenant_replicas: tuple[Replica, Replica], database_url: str, native: bool
) -> None:
    first, second = tenant_replicas
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    # given: the default tenant's conversation as kept before tenants (`agent/id`)
    store = SqlChatMemoryStore(database_url)
    try:
        store.update_messages(f"teller/{conversation}", [UserMessage("kept before")])
    finally:
        store.engine.dispose()
    # when: acme and globex each talk in a conversation of that id, on either replica
    assert _turn(first, "acme", conversation, "acme one", native=native) == "acme one"
    assert _turn(second, "globex", conversation, "globex one", native=native) == "globex one"
    assert _turn(second, "acme", conversation, "acme two", native=native) == "acme one | acme two"
    # then: the default tenant's is its own, read under the id it always had
    said = _turn(first, "default", conversation, "plain one", native=native)
    assert said == "kept before | plain one"


def test_an_idempotency_key_is_each_tenants_own(tenant_replicas: tuple[Replica, Replica]) -> None:
    first, second = tenant_replicas
    key = f"retry-{uuid.uuid4().hex}"

    def started(replica: Replica, tenant: str) -> str:
        response = httpx.post(
            f"{replica.base_url}/agents/teller/invocations",
            json={"input": "once"},
            headers={**auth(tenant), "Idempotency-Key": key},
            timeout=30,
        )
        assert response.status_code == 202, response.text
        return str(response.json()["id"])

    acme = started(first, "acme")
    globex = started(second, "globex")
    assert globex != acme
    assert answer(second, "globex", globex).startswith("tenant globex;")
    assert started(second, "acme") == acme  # the same tenant's retry attaches, on any replica


def _signed_in(replica: Replica, tenant: str) -> httpx.Client:
    """A browser-like client signed in to the run view with `tenant`'s key."""
    client = httpx.Client(base_url=replica.root, timeout=30)
    form = client.get("/ui/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce is not None
    signed = client.post("/ui/login", data={"nonce": nonce[1], "key": KEYS[tenant]})
    assert signed.status_code == 303, signed.text
    return client


def test_the_run_view_shows_a_tenant_its_own_invocations_and_the_operator_every_one(
    tenant_replicas: tuple[Replica, Replica],
) -> None:
    first, second = tenant_replicas
    ns = uuid.uuid4().hex[:8]
    acme = start(first, "acme", "teller", f"view {ns}")
    answer(first, "acme", acme)
    globex = start(first, "globex", "teller", f"view {ns}")
    answer(first, "globex", globex)
    paused = start(first, "acme", "vault", ns)
    events_until(first, "acme", paused, "invocation.paused")
    viewers = {tenant: _signed_in(second, tenant) for tenant in ("acme", "globex", "ops")}
    try:
        rows = {tenant: client.get("/ui/rows").text for tenant, client in viewers.items()}
        assert acme in rows["acme"] and paused in rows["acme"] and globex not in rows["acme"]
        assert globex in rows["globex"] and acme not in rows["globex"] and paused not in rows["globex"]
        assert acme in rows["ops"] and globex in rows["ops"] and paused in rows["ops"]
        waiting = {tenant: client.get("/ui/approvals").text for tenant, client in viewers.items()}
        assert paused in waiting["acme"] and paused in waiting["ops"] and paused not in waiting["globex"]

        # a page of acme's invocation is, to globex, the page of an invocation nobody knows
        unknown = str(uuid.uuid4())
        globex_view = viewers["globex"]
        for page in ("", "/timeline", "/events"):
            nobody = told(globex_view.get(f"/ui/invocations/{unknown}{page}"), unknown)
            assert nobody[0] == 404
            for invocation_id in (acme, paused):
                seen = globex_view.get(f"/ui/invocations/{invocation_id}{page}")
                assert told(seen, invocation_id) == nobody
            assert viewers["acme"].get(f"/ui/invocations/{acme}{page}").status_code == 200
        assert viewers["ops"].get(f"/ui/invocations/{acme}").status_code == 200

        # and globex's decision on acme's waiting call is refused as one on an unknown invocation
        def decide(invocation_id: str) -> tuple[int, str]:
            page = globex_view.get("/ui/approvals").text
            token = re.search(r'name="csrf" value="([^"]+)"', page)
            assert token is not None
            form = {"csrf": token[1], "call_id": "lock-1", "decision": "approve"}
            sent = globex_view.post(f"/ui/invocations/{invocation_id}/approvals", data=form)
            return told(sent, invocation_id)

        refused = decide(paused)
        assert refused[0] == 404 and refused == decide(unknown)
        assert process_client().lrange(f"tenants:{ns}:locked", 0, -1) == []
    finally:
        for client in viewers.values():
            client.close()
        httpx.post(f"{first.base_url}/invocations/{paused}/cancel", headers=auth("acme"), timeout=30)


def test_the_served_invocations_are_counted_by_tenant(tenant_replicas: tuple[Replica, Replica]) -> None:
    first, _ = tenant_replicas
    metrics = f"{first.root}/metrics"
    before = scrape(metrics)
    invocation_id = start(first, "globex", "teller", "count me")
    answer(first, "globex", invocation_id)

    def counted() -> bool:
        after = scrape(metrics)
        ended = "toolfleet_served_invocations_ended_total"
        return total(after, ended, agent="teller", tenant="globex", outcome="succeeded") == 1 + total(
            before, ended, agent="teller", tenant="globex", outcome="succeeded"
        )

    wait_for(counted, timeout_s=10, what="the invocation counted as globex's")
    after = scrape(metrics)
    started = "toolfleet_served_invocations_started_total"
    assert total(after, started, agent="teller", tenant="globex") == 1 + total(
        before, started, agent="teller", tenant="globex"
    )
    assert total(after, started, tenant="acme") == total(before, started, tenant="acme")
