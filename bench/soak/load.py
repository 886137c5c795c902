"""The soak's load generator, run on its own host: `python -m bench.soak.load CONFIG` (JSON: `replicas`,
`api_key`, `clients`, `seconds`, `seed`, `out`).

Each client runs conversations of 1-3 turns, one turn at a time, until `seconds` have passed; each
turn asks for a random plan (`bench/soak/model.py`) in one of four ways:

- `openai`: the official `openai` client's chat completion, with an `Idempotency-Key`;
- `stream`: the same, streamed;
- `native`: `POST /v1/agents/soak/invocations` with an `Idempotency-Key`, then its event stream,
  followed to its end with `Last-Event-ID` across reconnects; calls that wait for approval are
  decided by the client (a bot: mostly approved);
- `cancel`: `native`, cancelled from outside a moment after it started.

A request that fails on its way (a replica killed, a link cut) is sent again, with the same key, to
the other replica, until it has its answer or `REQUEST_DEADLINE_S` passes. What each request got is
appended to `out` as one JSON line when it ends: the checks read it.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import uuid
from typing import Any

import httpx
import openai

from bench.soak.model import plan_text
from tests.integration.sse import server_sent_events

__all__ = ["MODES", "main", "random_plan"]

MODES = ("openai", "stream", "native", "cancel")
REQUEST_DEADLINE_S = 150.0
AGENT = "soak"
# Sent again (with the same Idempotency-Key), as the official SDKs do: these and every 5xx.
RETRIED = (408, 409, 425, 429)
TERMINAL = ("invocation.succeeded", "invocation.failed", "invocation.cancelled")
_write = threading.Lock()


def random_plan(rng: random.Random, plan_id: str, *, approvals: bool) -> list[list[list[Any]]]:
    """1-3 steps of 1-3 calls: bookings, charges, stamps, crunches, sometimes a refusal or a wire."""
    kinds = ["book", "book", "charge", "stamp", "crunch"] + (["wire"] if approvals else [])
    steps: list[list[list[Any]]] = []
    for step in range(rng.randint(1, 3)):
        calls: list[list[Any]] = []
        for index in range(rng.randint(1, 3)):
            ref = f"{plan_id}.{step}.{index}"
            kind = "refuse" if rng.random() < 0.08 else rng.choice(kinds)
            if kind == "charge":
                calls.append([kind, ref, round(rng.uniform(0.1, 1.0), 2)])
            elif kind == "crunch":
                calls.append([kind, ref, round(rng.uniform(0.5, 2.5), 2)])
            else:
                calls.append([kind, ref])
        steps.append(calls)
    return steps


class Client:
    def __init__(self, number: int, config: dict[str, Any]) -> None:
        self.number = number
        self.replicas: list[str] = list(config["replicas"])
        self.key = str(config["api_key"])
        self.out = str(config["out"])
        self.rng = random.Random(f"{config['seed']}-{number}")
        self.until = time.monotonic() + float(config["seconds"])
        self.turn_replica = number % len(self.replicas)
        self.http = httpx.Client(timeout=httpx.Timeout(60.0, connect=5.0), headers=self._auth())

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def run(self) -> None:
        conversation = 0
        while time.monotonic() < self.until:
            conversation += 1
            conversation_id = f"conv-{self.number}-{conversation}"
            for turn in range(self.rng.randint(1, 3)):
                if time.monotonic() >= self.until:
                    break
                mode = self.rng.choice(MODES)
                plan_id = f"p{self.number}x{conversation}x{turn}x{uuid.uuid4().hex[:6]}"
                steps = random_plan(self.rng, plan_id, approvals=mode in ("native", "cancel"))
                record = {
                    "client": self.number,
                    "conversation": conversation_id,
                    "turn": turn,
                    "mode": mode,
                    "plan": plan_id,
                    "text": plan_text(plan_id, steps),
                    "key": uuid.uuid4().hex,
                    "started": time.time(),
                    "attempts": 0,
                    "invocation": None,
                    "answer": None,
                    "error": None,
                    "events": [],
                }
                try:
                    if mode in ("openai", "stream"):
                        self._completion(record, stream=mode == "stream")
                    else:
                        self._native(record, cancel=mode == "cancel")
                except Exception as exc:  # recorded: the checks count a request without its answer
                    record["error"] = f"{type(exc).__name__}: {exc}"[:500]
                record["ended"] = time.time()
                with _write, open(self.out, "a") as out:
                    out.write(json.dumps(record) + "\n")

    def _failed(self, record: dict[str, Any], error: str) -> None:
        """Note a failed attempt (which replica, when, what) and keep it as the request's error."""
        record["error"] = error[:300]
        record.setdefault("failures", []).append([self.turn_replica, round(time.time(), 2), error[:160]])

    def _replica(self, failed: bool) -> str:
        if failed:
            self.turn_replica = (self.turn_replica + 1) % len(self.replicas)
        return self.replicas[self.turn_replica]

    # -- the official openai client ------------------------------------------------------------------

    def _completion(self, record: dict[str, Any], *, stream: bool) -> None:
        deadline = time.monotonic() + REQUEST_DEADLINE_S
        failed = False
        while True:
            record["attempts"] += 1
            client = openai.OpenAI(
                base_url=self._replica(failed) + "/v1", api_key=self.key, timeout=90, max_retries=0
            )
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model=AGENT,
                    messages=[{"role": "user", "content": record["text"]}],
                    metadata={"conversation_id": record["conversation"]},
                    extra_headers={"Idempotency-Key": record["key"]},
                    stream=stream,
                )
                record["invocation"] = raw.headers.get("X-Invocation-Id")
                watchdog = _closing_at(deadline, raw.http_response.close)
                if stream:
                    pieces, finished = [], False
                    for chunk in raw.parse():
                        for choice in chunk.choices:
                            pieces.append(choice.delta.content or "")
                            finished = finished or choice.finish_reason is not None
                    if not finished:
                        raise ConnectionError("the stream ended without a finish reason")
                    record["answer"] = "".join(pieces)
                else:
                    record["answer"] = raw.parse().choices[0].message.content
                watchdog.cancel()
                record["error"] = None
                return
            except (openai.APIConnectionError, ConnectionError, httpx.HTTPError) as exc:
                self._failed(record, f"{type(exc).__name__}: {exc}")
            except openai.APIStatusError as exc:  # a 5xx is sent again; its invocation noted
                record["invocation"] = exc.response.headers.get("X-Invocation-Id") or record["invocation"]
                self._failed(record, f"{exc.status_code}: {exc.message}")
                if exc.status_code not in RETRIED and exc.status_code < 500:
                    return
            except openai.APIError as exc:  # told in the stream, after its headers
                self._failed(record, f"{type(exc).__name__}: {exc.message}")
                # sent again when the service says so: the key is busy, or the invocation went on
                # in another replica (this one was taken for dead)
                if exc.code not in ("idempotency_key_in_use", "service_unavailable"):
                    return
            finally:
                client.close()
            failed = True
            if time.monotonic() > deadline:
                return
            time.sleep(self.rng.uniform(0.2, 1.0))

    # -- the native API ------------------------------------------------------------------------------

    def _native(self, record: dict[str, Any], *, cancel: bool) -> None:
        deadline = time.monotonic() + REQUEST_DEADLINE_S
        body = {"input": record["text"], "conversation_id": record["conversation"]}
        failed = False
        while record["invocation"] is None:
            record["attempts"] += 1
            try:
                response = self.http.post(
                    f"{self._replica(failed)}/v1/agents/{AGENT}/invocations",
                    json=body,
                    headers={"Idempotency-Key": record["key"]},
                )
                if response.status_code == 202:
                    record["invocation"] = response.json()["id"]
                    break
                self._failed(record, f"{response.status_code}: {response.text[:200]}")
                if response.status_code not in RETRIED and response.status_code < 500:
                    return
            except httpx.HTTPError as exc:
                self._failed(record, f"{type(exc).__name__}: {exc}")
            failed = True
            if time.monotonic() > deadline:
                return
            time.sleep(self.rng.uniform(0.2, 1.0))
        record["error"] = None
        if cancel:
            threading.Thread(target=self._cancel, args=(record["invocation"],), daemon=True).start()
        self._follow(record, deadline)

    def _follow(self, record: dict[str, Any], deadline: float) -> None:
        invocation = record["invocation"]
        last: str | None = None
        failed = False
        decided: set[str] = set()
        while time.monotonic() < deadline:
            headers = {"Last-Event-ID": last} if last else {}
            url = f"{self._replica(failed)}/v1/invocations/{invocation}/events"
            try:
                with self.http.stream("GET", url, headers=headers) as response:
                    watchdog = _closing_at(deadline, response.close)  # keep-alives never end a read
                    if response.status_code != 200:
                        raise httpx.HTTPError(f"{response.status_code}")
                    for event_id, event in server_sent_events(response.iter_lines()):
                        record["events"].append(event_id)
                        last = event_id
                        if event["type"] == "approval.requested":
                            self._decide(invocation, event, decided)
                        if event["type"] in TERMINAL:
                            watchdog.cancel()
                            record["outcome"] = event["type"]
                            record["answer"] = event.get("content")
                            record["error"] = event.get("error")
                            return
                raise httpx.HTTPError("the event stream ended before its invocation did")
            except httpx.HTTPError as exc:
                self._failed(record, f"{type(exc).__name__}: {exc}")
                failed = True
                time.sleep(self.rng.uniform(0.2, 1.0))

    def _decide(self, invocation: str, event: dict[str, Any], decided: set[str]) -> None:
        calls = [
            str(c["call_id"]) for c in event.get("approvals") or [] if str(c.get("call_id")) not in decided
        ]
        if not calls:
            return
        decisions = [
            {"call_id": c, "decision": "approve" if self.rng.random() < 0.8 else "reject"} for c in calls
        ]
        time.sleep(self.rng.uniform(0.0, 1.0))
        self._post_until(f"/v1/invocations/{invocation}/approvals", {"decisions": decisions})
        decided.update(calls)

    def _cancel(self, invocation: str) -> None:
        time.sleep(self.rng.uniform(0.3, 3.0))
        self._post_until(f"/v1/invocations/{invocation}/cancel", None)

    def _post_until(self, path: str, body: dict[str, Any] | None) -> None:
        failed = False
        for _ in range(20):
            try:
                response = self.http.post(self._replica(failed) + path, json=body)
                if response.status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            failed = True
            time.sleep(0.5)


def _closing_at(deadline: float, close: Any) -> threading.Timer:
    """A timer that closes a response at `deadline` (a monotonic time), ending a read that waits."""
    timer = threading.Timer(max(deadline - time.monotonic(), 0.0), close)
    timer.daemon = True
    timer.start()
    return timer


def main(argv: list[str]) -> int:
    with open(argv[0]) as file:
        config = json.loads(file.read())
    clients = [Client(number, config) for number in range(int(config["clients"]))]
    threads = [threading.Thread(target=c.run, name=f"client-{c.number}") for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
