"""Every refusal of `toolfleet serve` in OpenAI's error shape, with the status a client library maps:
bad request, missing or wrong key, unknown agent, too large, at capacity, not ready, and a failure
that never leaks its details."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests._cli import TOOLFLEET, run_command
from tests._waiting import wait_for
from tests.integration.fake_openai import FakeOpenAi
from tests.integration.serve.replicas import (
    AGENT,
    AGENTS_MODULE,
    API_KEY,
    Replica,
    replica_env,
    start_replica,
)
from tests.integration.side_effects import process_client
from tests.integration.worker_processes import REPO_ROOT
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration

MAX_BODY_BYTES = 4096
MAX_MESSAGES = 5


@pytest.fixture(scope="module")
def edge(
    redis_url: str,
    database_url: str,
    upstream: FakeOpenAi,
    serve_worker: WorkerProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Replica]:
    """One replica with tight limits: one invocation at a time, 4 KiB bodies, five messages."""
    env = replica_env(
        redis_url,
        database_url,
        upstream.base_url,
        TOOLFLEET_SERVE_MAX_INVOCATIONS="1",
        TOOLFLEET_SERVE_MAX_BODY_BYTES=str(MAX_BODY_BYTES),
        TOOLFLEET_SERVE_MAX_MESSAGES=str(MAX_MESSAGES),
    )
    replica = start_replica(env, tmp_path_factory.mktemp("edge") / "edge.log", agents=(AGENT, "broken"))
    try:
        yield replica
    finally:
        replica.stop()


def _post(replica: Replica, body: object, key: str | None = API_KEY, **headers: str) -> httpx.Response:
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        f"{replica.base_url}/chat/completions",
        content=content,
        headers={"Content-Type": "application/json", **headers},
        timeout=30,
    )


def _error(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    return error  # type: ignore[no-any-return]


def _ask(text: str) -> dict[str, object]:
    return {"model": AGENT, "messages": [{"role": "user", "content": text}]}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
        ({"model": AGENT, "messages": []}, "messages"),
        ({"model": AGENT, "messages": [{"role": "assistant", "content": "hi"}]}, "messages.0"),
        ({"model": AGENT, "messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
        ({**_ask("hi"), "tools": [{"type": "function", "function": {"name": "x"}}]}, "tools"),
        ({**_ask("hi"), "n": 2}, "n"),
        ({"model": AGENT, "messages": [{"role": "user", "content": "hi"}] * (MAX_MESSAGES + 1)}, "messages"),
    ],
    ids=["not-json", "no-model", "no-messages", "last-not-user", "unknown-role", "tools", "n", "too-many"],
)
def test_a_bad_request_is_400_naming_the_field(edge: Replica, body: object, param: str | None) -> None:
    error = _error(_post(edge, body), 400)

    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


def test_a_missing_or_wrong_key_is_401_and_the_old_key_still_works(edge: Replica) -> None:
    assert _error(_post(edge, _ask("hi"), key=None), 401)["code"] == "invalid_api_key"
    assert _error(_post(edge, _ask("hi"), key="sk-wrong"), 401)["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=edge.base_url, api_key="sk-wrong", max_retries=0).models.list()
    assert _post(edge, _ask("hi"), key="old-key").status_code == 200


def test_an_unknown_agent_is_404(edge: Replica) -> None:
    client = openai.OpenAI(base_url=edge.base_url, api_key=API_KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model="nobody", messages=[{"role": "user", "content": "hi"}])

    assert raised.value.body["param"] == "model"  # type: ignore[index]
    assert "GET /v1/models" in raised.value.message


def test_a_body_over_the_limit_is_413(edge: Replica) -> None:
    error = _error(_post(edge, _ask("x" * MAX_BODY_BYTES)), 413)

    assert str(MAX_BODY_BYTES) in str(error["message"])


def test_beyond_the_replicas_capacity_is_429_with_retry_after(edge: Replica, ns: str) -> None:
    # given: the replica's one place taken by a 3 s nap
    napping = threading.Thread(target=_post, args=(edge, _ask(f"nap {ns} 3")))
    napping.start()
    try:
        wait_for(lambda: process_client().get(f"serve:{ns}:napping"), timeout_s=15, what="the nap started")

        # when: another request comes
        response = _post(edge, _ask("hi"))

        # and: one with an Idempotency-Key
        keyed = _post(edge, _ask("hi"), **{"Idempotency-Key": f"{ns}-key"})

        # then: it is refused for now, saying when to retry
        error = _error(response, 429)
        assert error["type"] == "rate_limit_error"
        assert response.headers["Retry-After"] == "1"
        assert keyed.status_code == 429
    finally:
        napping.join()
    assert _post(edge, _ask("hi")).status_code == 200  # the place is free again
    # and: the keyed request, refused before it started anything, starts afresh when sent again
    again = _post(edge, _ask("hi"), **{"Idempotency-Key": f"{ns}-key"})
    assert again.status_code == 200, again.text
    assert again.json()["choices"][0]["message"]["content"].startswith("heard: hi")


def test_an_unexpected_failure_is_500_without_its_details(edge: Replica) -> None:
    response = _post(edge, {"model": "broken", "messages": [{"role": "user", "content": "hi"}]})

    error = _error(response, 500)
    assert error["type"] == "server_error"
    assert "hunter2" not in response.text and "Traceback" not in response.text
    assert "hunter2" in edge.log()  # the operator's log has it


def test_no_key_appears_in_the_schema_or_the_log(edge: Replica) -> None:
    schema = httpx.get(f"{edge.root}/openapi.json", timeout=10)

    assert schema.status_code == 200 and "/v1/chat/completions" in schema.json()["paths"]
    assert API_KEY not in schema.text
    assert API_KEY not in edge.log() and "old-key" not in edge.log()


def test_a_replica_whose_pool_has_no_worker_is_not_ready(
    redis_url: str, database_url: str, upstream: FakeOpenAi, tmp_path: Path
) -> None:
    replica = start_replica(
        replica_env(redis_url, database_url, upstream.base_url), tmp_path / "lonely.log", agents=("lonely",)
    )
    try:
        response = httpx.get(f"{replica.root}/readyz", timeout=10)
        healthy = httpx.get(f"{replica.root}/healthz", timeout=10)
    finally:
        assert replica.stop(signal.SIGTERM) == 0

    error = _error(response, 503)
    assert "no live worker serves pool 'serve-unstaffed' (needed by lonely)" in str(error["message"])
    assert healthy.status_code == 200


def test_without_keys_it_refuses_to_listen_beyond_loopback(
    redis_url: str, database_url: str, upstream: FakeOpenAi
) -> None:
    env = replica_env(redis_url, database_url, upstream.base_url, TOOLFLEET_API_KEYS=None)

    refused = run_command(
        [
            TOOLFLEET,
            "serve",
            "--agent",
            f"{AGENT}={AGENTS_MODULE}:{AGENT}",
            "--host",
            "0.0.0.0",
            "--port",
            "1",
        ],
        cwd=Path(REPO_ROOT),
        env=env,
    )

    assert refused.returncode == 2
    assert "refusing to listen on 0.0.0.0 without API keys: set TOOLFLEET_API_KEYS" in refused.stderr


def test_a_client_that_leaves_a_stream_cancels_its_invocation_and_frees_its_place(
    edge: Replica, ns: str
) -> None:
    # given: a streamed completion that booked and naps, holding the replica's one place
    body = {
        "model": AGENT,
        "messages": [{"role": "user", "content": f"book {ns} seat; nap {ns} 5"}],
        "stream": True,
    }
    with httpx.stream(
        "POST",
        f"{edge.base_url}/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        lines = response.iter_lines()  # held: a discarded line iterator closes the response
        next(lines)  # the first chunk came
        wait_for(lambda: process_client().get(f"serve:{ns}:napping"), timeout_s=15, what="the nap started")
    # when: the client left (the block closed the connection)

    # then: the invocation is cancelled and its booking undone, and the place is free again
    wait_for(
        lambda: process_client().lrange(f"serve:{ns}:undone", 0, -1), timeout_s=10, what="the booking undone"
    )
    assert process_client().lrange(f"serve:{ns}:undone", 0, -1) == [b"seat"]
    assert wait_for(lambda: _post(edge, _ask("hi")).status_code == 200, timeout_s=5, what="the place freed")


def test_a_failure_once_the_stream_has_started_is_an_error_event_then_done(edge: Replica) -> None:
    body = {"model": "broken", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.stream(
        "POST",
        f"{edge.base_url}/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=30,
    ) as response:
        assert response.status_code == 200  # the status line went before the failure
        data = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]

    assert data[-1] == "[DONE]"
    error = json.loads(data[-2])["error"]
    assert error["type"] == "server_error" and "hunter2" not in data[-2]
