"""`toolfleet serve` refuses a JSON body holding `NaN`, `Infinity`, `-Infinity` or a number too large for a
float (which Python reads as infinite): 400 in the service's error shape naming where the number is, on
every route that takes a body, with nothing journaled or started; a body without one still passes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis

from orchestrator.saga.journal import Journal
from tests._waiting import wait_for
from tests.integration.fake_openai import FakeOpenAi
from tests.integration.serve.replicas import AGENT, API_KEY, Replica, replica_env, start_replica

pytestmark = pytest.mark.integration

AUTHORIZED = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def journal_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A journal of this module's replica alone: what it holds is what these requests left."""
    return f"sqlite:///{tmp_path_factory.mktemp('finite-json') / 'journal.db'}"


@pytest.fixture(scope="module")
def replica(
    redis_url: str, journal_url: str, upstream: FakeOpenAi, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replica]:
    env = replica_env(redis_url, journal_url, upstream.base_url)
    started = start_replica(env, tmp_path_factory.mktemp("finite-json-replica") / "serve.log")
    try:
        yield started
    finally:
        started.stop()


def _journaled(journal_url: str) -> list[str]:
    journal = Journal(journal_url)
    try:
        return [record.id for record in journal.invocations(limit=1000)]
    finally:
        journal.engine.dispose()


def _event_streams(redis_url: str) -> set[bytes]:
    client = redis.Redis.from_url(redis_url)
    try:
        return set(client.scan_iter("toolfleet:events:*"))
    finally:
        client.close()


def _post(replica: Replica, path: str, body: str) -> httpx.Response:
    return httpx.post(f"{replica.root}{path}", content=body.encode(), headers=AUTHORIZED, timeout=30)


INVOCATIONS = f"/v1/agents/{AGENT}/invocations"
COMPLETIONS = "/v1/chat/completions"


@pytest.mark.parametrize(
    ("path", "body", "param", "written"),
    [
        (INVOCATIONS, '{"input": "hi", "parameters": {"limit": NaN}}', "parameters.limit", "NaN"),
        (
            INVOCATIONS,
            '{"input": "hi", "parameters": {"filters": [{"min": 1}, {"max": Infinity}]}}',
            "parameters.filters.1.max",
            "Infinity",
        ),
        (INVOCATIONS, '{"input": "hi", "parameters": {"floor": -Infinity}}', "parameters.floor", "-Infinity"),
        (INVOCATIONS, '{"input": "hi", "priority": NaN}', "priority", "NaN"),
        (INVOCATIONS, '{"input": "hi", "parameters": {"huge": 1e400}}', "parameters.huge", "1e400"),
        (
            COMPLETIONS,
            f'{{"model": "{AGENT}", "messages": [{{"role": "user", "content": "hi"}}], "temperature": NaN}}',
            "temperature",
            "NaN",
        ),
        (
            COMPLETIONS,
            f'{{"model": "{AGENT}", "messages": [{{"role": "user", "content": "hi", "weight": -Infinity}}]}}',
            "messages.0.weight",
            "-Infinity",
        ),
        (
            f"/a2a/{AGENT}",
            '{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": '
            '{"role": "user", "parts": [{"kind": "text", "text": "hi"}], "messageId": "m1", '
            '"metadata": {"score": Infinity}}}}',
            "params.message.metadata.score",
            "Infinity",
        ),
        (
            f"/v1/invocations/{uuid.uuid4()}/approvals",
            '{"decisions": [{"call_id": "c1", "decision": "approve", "arguments": {"amount": NaN}}]}',
            "decisions.0.arguments.amount",
            "NaN",
        ),
    ],
    ids=[
        "parameters-nan",
        "parameters-nested-infinity",
        "parameters-minus-infinity",
        "priority-nan",
        "parameters-too-large",
        "completion-temperature-nan",
        "completion-message-minus-infinity",
        "a2a-metadata-infinity",
        "approval-arguments-nan",
    ],
)
def test_a_body_holding_a_non_finite_number_is_400_naming_where_and_nothing_is_journaled(
    replica: Replica, journal_url: str, redis_url: str, path: str, body: str, param: str, written: str
) -> None:
    # given
    journaled, streams = _journaled(journal_url), _event_streams(redis_url)
    # when
    response = _post(replica, path, body)
    # then: refused in the service's error shape, saying where the number is
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] is None
    assert error["param"] == param
    assert error["message"].startswith(f"invalid request: {param}: {written} ")
    # and nothing was started: no invocation journaled, no event stream opened
    assert _journaled(journal_url) == journaled
    assert _event_streams(redis_url) == streams


def test_a_body_with_finite_numbers_and_the_words_nan_and_infinity_in_strings_passes(
    replica: Replica, journal_url: str
) -> None:
    # given: large and small numbers, and the words as text
    body = (
        '{"input": "hi NaN Infinity", "parameters": {"limit": 5, "ratio": 1.5e308, "tiny": 1e-400, '
        '"note": "NaN", "bound": "-Infinity"}}'
    )
    # when
    response = _post(replica, INVOCATIONS, body)
    # then: it starts, and its invocation is journaled with those parameters
    assert response.status_code == 202, response.text
    invocation_id = response.json()["id"]
    wait_for(lambda: invocation_id in _journaled(journal_url), timeout_s=30, what="the invocation journaled")
    # and a completion with a finite temperature is answered
    completion = _post(
        replica,
        COMPLETIONS,
        f'{{"model": "{AGENT}", "messages": [{{"role": "user", "content": "hi"}}], "temperature": 0.5}}',
    )
    assert completion.status_code == 200, completion.text
    assert completion.json()["choices"][0]["message"]["content"] == "heard: hi"


def test_a_body_that_is_not_json_is_still_refused_by_its_route(replica: Replica) -> None:
    response = _post(replica, COMPLETIONS, "{not json")

    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("the request body is not valid JSON")


def test_a_body_over_the_limit_is_still_413(replica: Replica) -> None:
    # the replica's limit is the default, 1 MiB: the body passes it by a byte
    body = '{"input": "' + "x" * (1 << 20) + '"}'

    response = _post(replica, INVOCATIONS, body)

    assert response.status_code == 413, response.text


def test_without_a_key_a_body_holding_nan_is_401_its_body_unread(replica: Replica) -> None:
    response = httpx.post(
        f"{replica.root}{INVOCATIONS}", content=b'{"input": "hi", "parameters": {"limit": NaN}}', timeout=30
    )

    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (INVOCATIONS, '{"input": "hi\\u0000there"}', "input"),
        (INVOCATIONS, '{"input": "hi", "parameters": {"note": ["ok", "a\\u0000b"]}}', "parameters.note.1"),
        (INVOCATIONS, '{"input": "hi", "parameters": {"k\\u0000": 1}}', "parameters"),
        (
            COMPLETIONS,
            f'{{"model": "{AGENT}", "messages": [{{"role": "user", "content": "\\u0000"}}]}}',
            "messages.0.content",
        ),
    ],
    ids=["input", "nested-value", "key", "completion"],
)
def test_a_body_holding_nul_in_a_string_is_400_naming_where_and_nothing_is_journaled(
    replica: Replica, journal_url: str, redis_url: str, path: str, body: str, param: str
) -> None:
    journaled, streams = _journaled(journal_url), _event_streams(redis_url)
    response = _post(replica, path, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert (
        error["message"]
        == f"invalid request: {param}: a string holding NUL (\\u0000): the journal cannot store it"
    )
    assert _journaled(journal_url) == journaled
    assert _event_streams(redis_url) == streams


def test_the_text_backslash_u0000_is_not_nul_and_passes(replica: Replica, journal_url: str) -> None:
    response = _post(replica, INVOCATIONS, '{"input": "the escape \\\\u0000 as text"}')
    assert response.status_code == 202, response.text
    invocation_id = response.json()["id"]
    wait_for(lambda: invocation_id in _journaled(journal_url), timeout_s=30, what="the invocation journaled")
