"""The native API of `toolfleet serve`: an invocation's events as they happen, resumed on the other
replica after a dropped connection with nothing lost or repeated; its journaled story; cancellation
from any replica, which stops a long tool at once and compensates what was done."""

from __future__ import annotations

import time

import httpx
import pytest

from tests._waiting import wait_for
from tests.integration.serve.replicas import AGENT, API_KEY, Replica
from tests.integration.side_effects import process_client
from tests.integration.sse import server_sent_events
from tests.integration.starting import journaled_late

pytestmark = pytest.mark.integration

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def _start(replica: Replica, text: str, agent: str = AGENT, **fields: object) -> str:
    response = httpx.post(
        f"{replica.base_url}/agents/{agent}/invocations",
        json={"input": text, **fields},
        headers=AUTH,
        timeout=30,
    )
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "running" and body["events"] == f"/v1/invocations/{body['id']}/events"
    return str(body["id"])


def _read_all(
    replica: Replica, invocation_id: str, last_event_id: str | None = None
) -> list[tuple[str, dict]]:
    headers = {**AUTH, **({"Last-Event-ID": last_event_id} if last_event_id else {})}
    url = f"{replica.base_url}/invocations/{invocation_id}/events"
    with httpx.stream("GET", url, headers=headers, timeout=30) as response:
        assert response.status_code == 200, response.read()
        return list(server_sent_events(response.iter_lines()))


def test_an_invocation_streams_its_calls_and_its_answer(replicas: tuple[Replica, Replica]) -> None:
    with httpx.stream(
        "POST",
        f"{replicas[0].base_url}/agents/{AGENT}/invocations",
        json={"input": "add 2 3"},
        headers={**AUTH, "Accept": "text/event-stream"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        invocation_id = response.headers["X-Invocation-Id"]
        events = [event for _, event in server_sent_events(response.iter_lines())]

    types = [e["type"] for e in events if e["type"] != "text.delta"]
    assert types == [
        "invocation.started",
        "tool_call.queued",
        "tool_call.started",
        "tool_call.finished",
        "invocation.succeeded",
    ]
    assert "".join(str(e["text"]) for e in events if e["type"] == "text.delta").strip() == "done: 5"
    finished = events[3]
    assert finished["tool"] == "add" and finished["pool"] == "serve" and finished["outcome"] == "success"
    assert isinstance(finished["worker"], str) and finished["worker"].startswith("serve-")
    assert isinstance(finished["elapsed_ms"], float)
    assert str(events[-1]["content"]).strip() == "done: 5"  # the upstream streams words, each with a space
    # the journal tells the same story, from either replica
    story = httpx.get(f"{replicas[1].base_url}/invocations/{invocation_id}", headers=AUTH, timeout=10).json()
    assert story["state"] == "succeeded" and story["final_answer"].strip() == "done: 5"
    assert [(c["tool"], c["state"], c["pool"]) for c in story["calls"]] == [("add", "succeeded", "serve")]
    # every call event names the call and its task, as the journal does; the finish reason is lower case
    [call] = story["calls"]
    named = {(e["call_id"], e["task_id"]) for e in events if e["type"].startswith("tool_call.")}
    assert named == {(call["call_id"], call["task_id"])}, (named, call)
    assert events[-1]["finish_reason"] == "stop"


def test_a_dropped_event_stream_resumes_on_the_other_replica(
    replicas: tuple[Replica, Replica], ns: str
) -> None:
    # given: an invocation of three steps, its events read on the first replica until the first call ends
    invocation_id = _start(replicas[0], f"add 1 2; nap {ns} 0.5; add 3 4")
    seen: list[tuple[str, dict]] = []
    url = f"{replicas[0].base_url}/invocations/{invocation_id}/events"
    with httpx.stream("GET", url, headers=AUTH, timeout=30) as response:
        for entry in server_sent_events(response.iter_lines()):
            seen.append(entry)
            if entry[1]["type"] == "tool_call.finished":
                break  # the connection drops here

    # when: the client reconnects to the other replica with the last id it saw
    rest = _read_all(replicas[1], invocation_id, last_event_id=seen[-1][0])

    # then: together they are every event once, in order, as the whole stream holds them
    whole = _read_all(replicas[1], invocation_id)
    assert seen + rest == whole
    ids = [entry_id for entry_id, _ in whole]
    assert len(set(ids)) == len(ids)
    assert [e["type"] for _, e in whole].count("tool_call.finished") == 3
    assert whole[-1][1]["type"] == "invocation.succeeded" and whole[-1][1]["content"].strip() == "done: 7"


def test_cancel_stops_a_long_tool_at_once_and_compensates(replicas: tuple[Replica, Replica], ns: str) -> None:
    # given: an invocation that booked, then naps 5 s, on the first replica
    invocation_id = _start(replicas[0], f"book {ns} trip; nap {ns} 5")
    wait_for(lambda: process_client().get(f"serve:{ns}:napping"), timeout_s=15, what="the nap started")

    # when: the other replica is asked to cancel it
    asked = time.monotonic()
    response = httpx.post(
        f"{replicas[1].base_url}/invocations/{invocation_id}/cancel", headers=AUTH, timeout=10
    )
    assert response.status_code == 202 and response.json()["status"] == "cancelling"
    events = _read_all(replicas[1], invocation_id)
    stopped_in = time.monotonic() - asked

    # then: it ended cancelled well before the nap would have, its booking undone
    assert events[-1][1]["type"] == "invocation.cancelled"
    # (0.2–0.5 s measured, the compensation's round trip included; the nap had 5 s to go)
    assert stopped_in < 2.0, f"stopped {stopped_in:.3f} s after the cancel"
    assert process_client().lrange(f"serve:{ns}:undone", 0, -1) == [b"trip"]
    compensations = [e for _, e in events if e["type"].startswith("compensation.")]
    assert [e["type"] for e in compensations][-1] == "compensation.finished"
    assert compensations[-1]["tool"] == "book" and compensations[-1]["outcome"] == "success"
    story = httpx.get(f"{replicas[0].base_url}/invocations/{invocation_id}", headers=AUTH, timeout=10).json()
    assert story["state"] == "cancelled"
    assert [(c["tool"], c["state"]) for c in story["calls"]][:1] == [("book", "compensated")]
    # and: an invocation that has ended cannot be cancelled again
    again = httpx.post(f"{replicas[0].base_url}/invocations/{invocation_id}/cancel", headers=AUTH, timeout=10)
    assert again.status_code == 409 and again.json()["error"]["type"] == "invalid_request_error"


# Ways to spell one UUID that parse as it: each names the same invocation, answered in canonical form.
SPELLINGS = {
    "upper-case": str.upper,
    "braces": lambda i: "{" + i + "}",
    "urn": lambda i: "urn:uuid:" + i,
    "no-hyphens": lambda i: i.replace("-", ""),
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_an_invocation_id_spelled_any_way_a_uuid_parses_names_that_invocation(
    replicas: tuple[Replica, Replica], ns: str, spelling: str
) -> None:
    # given: an invocation that naps 2 s
    invocation_id = _start(replicas[0], f"nap {ns} 2")
    wait_for(lambda: process_client().get(f"serve:{ns}:napping"), timeout_s=15, what="the nap started")
    spelled = SPELLINGS[spelling](invocation_id)

    # when: the other replica is asked to cancel it by its id spelled another way
    response = httpx.post(f"{replicas[1].base_url}/invocations/{spelled}/cancel", headers=AUTH, timeout=10)

    # then: it is that invocation that is cancelled, named canonically; its events and its story are
    # read by the same spelling
    assert response.status_code == 202, response.text
    assert response.json() == {"id": invocation_id, "object": "invocation", "status": "cancelling"}
    events = _read_all(replicas[1], spelled)
    assert events[-1][1]["type"] == "invocation.cancelled"
    story = httpx.get(f"{replicas[0].base_url}/invocations/{spelled}", headers=AUTH, timeout=10).json()
    assert (story["id"], story["state"]) == (invocation_id, "cancelled")


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("POST", "/agents/nobody/invocations", {}, 404),
        ("GET", "/invocations/not-an-id", {}, 404),
        ("GET", "/invocations/00000000-0000-0000-0000-000000000000", {}, 404),
        ("GET", "/invocations/00000000-0000-0000-0000-000000000000/events", {}, 404),
        (
            "GET",
            "/invocations/00000000-0000-0000-0000-000000000000/events",
            {"Last-Event-ID": "x; drop"},
            400,
        ),
        (
            "GET",
            "/invocations/00000000-0000-0000-0000-000000000000/events",
            {"Last-Event-ID": f"{2**64}-0"},  # past the range of a Redis stream id
            400,
        ),
        ("POST", "/invocations/00000000-0000-0000-0000-000000000000/cancel", {}, 404),
    ],
)
def test_unknown_invocations_and_bad_ids_are_refused(
    replicas: tuple[Replica, Replica], method: str, path: str, headers: dict[str, str], status: int
) -> None:
    response = httpx.request(
        method, replicas[0].base_url + path, json={"input": "hi"}, headers={**AUTH, **headers}, timeout=10
    )

    assert response.status_code == status, response.text
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_a_native_invocation_continues_a_conversation(replicas: tuple[Replica, Replica], ns: str) -> None:
    conversation = f"native-{ns}"
    first = _start(replicas[0], "hello", conversation_id=conversation)
    _read_all(replicas[0], first)
    second = _start(replicas[1], "again", conversation_id=conversation)

    events = _read_all(replicas[0], second)

    assert events[-1][1]["content"].strip() == "heard: hello | again"


def test_an_invocation_asked_for_as_it_starts_is_told_once_journaled(
    replicas: tuple[Replica, Replica], redis_url: str, database_url: str
) -> None:
    # given: an invocation whose first event is written, and whose journal row comes a second later
    with journaled_late(redis_url, database_url, AGENT, "add 1 1") as invocation_id:
        # when: its story is asked for meanwhile
        response = httpx.get(f"{replicas[1].base_url}/invocations/{invocation_id}", headers=AUTH, timeout=10)

    # then: it is told, not a 404
    assert response.status_code == 200, response.text
    assert (response.json()["id"], response.json()["user_message"]) == (invocation_id, "add 1 1")
