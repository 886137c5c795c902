"""What the tests of carried-on invocations share: a survivor replica (for the module) and, per test,
a doomed one that is SIGKILLed at a chosen point of an invocation it runs, started by one of two
clients — `stream` (the native API, its events followed) or `whole` (the official `openai` client's
non-streamed chat completion with an `Idempotency-Key`, through a load balancer in front of both,
its own retries reaching the survivor) — and what came of it, read from outside."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.integration.fake_openai import FakeOpenAi
from tests.integration.serve.conftest import HEARTBEAT_TTL_S
from tests.integration.serve.failover import failover
from tests.integration.serve.replicas import AGENT, API_KEY, Replica, replica_env, start_replica
from tests.integration.serve.test_invocations import AUTH, _read_all
from tests.integration.side_effects import process_client
from tests.integration.sse import server_sent_events

__all__ = [
    "ADOPTED_WITHIN_S",
    "CLIENTS",
    "Fleet",
    "Outcome",
    "asked",
    "carried_on_once",
    "effects",
    "fleet",
    "heard_in_conversation",
]

CLIENTS = ("stream", "whole")
# The survivor adopts within the replicas' heartbeat TTL, then half a TTL until it looks, + 2 s.
ADOPTED_WITHIN_S = 1.5 * HEARTBEAT_TTL_S + 2


@dataclass
class Outcome:
    """An invocation whose replica was killed: its id, its answer as its client got it, its events
    (id, event) as the survivor serves them, and how long after the kill it was adopted."""

    invocation_id: str
    answer: str | None
    events: list[tuple[str, dict[str, Any]]]
    adopted_in_s: float

    @property
    def types(self) -> list[str]:
        return [str(event["type"]) for _, event in self.events]


@dataclass
class Fleet:
    """The module's survivor and what a doomed replica is started with."""

    survivor: Replica
    env: dict[str, str]
    logs: Path
    agents: tuple[str, ...]

    def run(
        self,
        client: str,
        text: str,
        killed_when: Callable[[], bool],
        *,
        conversation_id: str,
        agent: str = AGENT,
        doomed_env: Mapping[str, str] | None = None,
        after_kill: Callable[[], object] | None = None,
    ) -> Outcome:
        """Start `text` on a doomed replica through `client`, SIGKILL the replica once `killed_when()`
        holds (then call `after_kill`), and read what the survivor made of the invocation."""
        env = {**self.env, **(doomed_env or {})}
        doomed = start_replica(env, self.logs / f"doomed-{uuid.uuid4().hex[:6]}.log", agents=self.agents)
        try:
            with failover([doomed.port, self.survivor.port]) as port:
                if client == "stream":
                    invocation_id, answer, killed_at = self._streamed(
                        doomed, agent, text, conversation_id, killed_when, after_kill
                    )
                else:
                    invocation_id, answer, killed_at = self._whole(
                        doomed, port, agent, text, conversation_id, killed_when, after_kill
                    )
        finally:
            doomed.stop()
        events = _read_all(self.survivor, invocation_id)
        adopted = [i for i, event in events if event["type"] == "invocation.adopted"]
        adopted_in = int(adopted[0].split("-")[0]) / 1000 - killed_at if adopted else float("nan")
        return Outcome(invocation_id, answer, events, adopted_in)

    def _streamed(
        self,
        doomed: Replica,
        agent: str,
        text: str,
        conversation_id: str,
        killed_when: Callable[[], bool],
        after_kill: Callable[[], object] | None,
    ) -> tuple[str, str | None, float]:
        started = httpx.post(
            f"{doomed.base_url}/agents/{agent}/invocations",
            json={"input": text, "conversation_id": conversation_id},
            headers=AUTH,
            timeout=30,
        )
        assert started.status_code == 202, started.text
        invocation_id = str(started.json()["id"])
        heard: list[tuple[str, dict[str, Any]]] = []  # what the client read before its replica died
        following = threading.Thread(target=_follow, args=(doomed, invocation_id, heard), daemon=True)
        following.start()
        # killed once its client has read some of the stream (on a loaded machine it may lag behind)
        killed_at = _kill_when(doomed, lambda: killed_when() and bool(heard), after_kill)
        following.join(timeout=30)
        # the client reconnects where it can reach, the survivor, with the last event id it read:
        # with what it read before, every event of the stream once, in order, to the end
        rest = _read_all(self.survivor, invocation_id, heard[-1][0] if heard else None)
        whole = [i for i, _ in _read_all(self.survivor, invocation_id)]
        assert heard and [i for i, _ in heard + rest] == whole, (heard, rest, whole)
        last = rest[-1][1]
        return invocation_id, str(last.get("content")) if "content" in last else None, killed_at

    def _whole(
        self,
        doomed: Replica,
        port: int,
        agent: str,
        text: str,
        conversation_id: str,
        killed_when: Callable[[], bool],
        after_kill: Callable[[], object] | None,
    ) -> tuple[str, str | None, float]:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, timeout=90)
        key = uuid.uuid4().hex
        got: dict[str, Any] = {}

        def ask() -> None:
            try:
                got["raw"] = client.chat.completions.with_raw_response.create(
                    model=agent,
                    messages=[{"role": "user", "content": text}],
                    metadata={"conversation_id": conversation_id},
                    extra_headers={"Idempotency-Key": key},
                )
            except Exception as exc:  # told by the assertion below
                got["error"] = exc

        asking = threading.Thread(target=ask)
        asking.start()
        killed_at = _kill_when(doomed, killed_when, after_kill)
        asking.join(timeout=120)
        assert "error" not in got and "raw" in got, got
        raw = got["raw"]
        completion = raw.parse()
        return str(raw.headers["X-Invocation-Id"]), completion.choices[0].message.content, killed_at


def _follow(replica: Replica, invocation_id: str, heard: list[tuple[str, dict[str, Any]]]) -> None:
    """Read the invocation's events from `replica` into `heard` until its connection breaks."""
    url = f"{replica.base_url}/invocations/{invocation_id}/events"
    with contextlib.suppress(httpx.HTTPError), httpx.stream("GET", url, headers=AUTH, timeout=30) as response:
        heard.extend(server_sent_events(response.iter_lines()))


def carried_on_once(outcome: Outcome, survivor: Replica) -> None:
    """The invocation went on on the survivor once, its stream tells it once, in order, to its end,
    and its journal says it succeeded with the answer its client got."""
    story = httpx.get(f"{survivor.base_url}/invocations/{outcome.invocation_id}", headers=AUTH, timeout=10)
    assert story.json()["state"] == "succeeded" and story.json()["final_answer"] == outcome.answer, story.text
    types = outcome.types
    assert types.count("invocation.adopted") == 1, types
    ends = [t for t in types if t in ("invocation.succeeded", "invocation.failed", "invocation.cancelled")]
    assert ends == ["invocation.succeeded"] and types[-1] == ends[-1], types
    print(f"adopted {outcome.adopted_in_s:.2f} s after the kill")  # shown with -s: docs/RELIABILITY.md
    assert outcome.adopted_in_s < ADOPTED_WITHIN_S, f"adopted {outcome.adopted_in_s:.2f} s after the kill"
    told = [(str(e["type"]), str(e["call_id"])) for _, e in outcome.events if e.get("call_id") is not None]
    told = [t for t in told if t[0] != "tool_call.progress"]
    assert len(told) == len(set(told)), told  # each call queued, started and finished once


def _kill_when(doomed: Replica, ready: Callable[[], bool], after_kill: Callable[[], object] | None) -> float:
    deadline = time.monotonic() + 30
    while not ready():
        assert time.monotonic() < deadline, f"the point to kill at never came:\n{doomed.log()[-3000:]}"
        time.sleep(0.02)
    doomed.process.kill()
    killed_at = time.time()
    doomed.process.wait()
    if after_kill is not None:
        after_kill()
    return killed_at


def fleet_env(redis_url: str, database_url: str, upstream: FakeOpenAi) -> dict[str, str]:
    return replica_env(redis_url, database_url, upstream.base_url)


def effects(ns: str) -> dict[str, Any]:
    """What the tools did for `ns`, counted in Redis outside the replicas."""
    client = process_client()
    return {
        "booked": [b.decode() for b in client.lrange(f"serve:{ns}:booked", 0, -1)],
        "undone": [b.decode() for b in client.lrange(f"serve:{ns}:undone", 0, -1)],
        "stamped": [b.decode() for b in client.lrange(f"serve:{ns}:stamped", 0, -1)],
        "napped": int(client.get(f"serve:{ns}:napping") or 0),
    }


def asked(upstream: FakeOpenAi, ns: str) -> int:
    """How often the model was asked about `ns`'s plan."""
    return sum(1 for body in upstream.requests if any(ns in str(m.get("content")) for m in body["messages"]))


def heard_in_conversation(survivor: Replica, conversation_id: str) -> str | None:
    """The user messages the conversation holds, as the model hears them on one more turn."""
    started = httpx.post(
        f"{survivor.base_url}/agents/{AGENT}/invocations",
        json={"input": "what did I say?", "conversation_id": conversation_id},
        headers=AUTH,
        timeout=30,
    )
    assert started.status_code == 202, started.text
    last = _read_all(survivor, str(started.json()["id"]))[-1][1]
    return str(last.get("content"))


def fleet(
    redis_url: str, database_url: str, upstream: FakeOpenAi, logs: Path, agents: tuple[str, ...] = (AGENT,)
) -> Iterator[Fleet]:
    """A survivor replica for the module's tests (their doomed replicas share its environment)."""
    env = fleet_env(redis_url, database_url, upstream)
    survivor = start_replica(env, logs / "survivor.log", agents=agents)
    try:
        yield Fleet(survivor, env, logs, agents)
    finally:
        survivor.stop()
