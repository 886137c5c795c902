"""The soak's invariants, checked at the end of a run from what `evidence.gather` read. Each broken
one is a `Violation`, with the invocation it concerns where there is one."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from bench.soak.agents import COMPENSABLE, IDEMPOTENT
from bench.soak.evidence import TERMINAL_STATES, Evidence

__all__ = ["INVARIANTS", "Violation", "check"]

TERMINAL_EVENTS = {
    "succeeded": "invocation.succeeded",
    "failed": "invocation.failed",
    "cancelled": "invocation.cancelled",
}
SETTLED_CALLS = ("succeeded", "failed", "compensated", "compensation_failed", "kept", "abandoned")
CALL_EVENTS = ("tool_call.queued", "tool_call.started", "tool_call.finished")


@dataclass(frozen=True)
class Violation:
    invariant: str
    invocation: str | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


Check = Callable[[Evidence], Iterator[Violation]]


def _end_told(row: dict[str, Any]) -> str | None:
    """The end an invocation's clients and stream are told: an invocation that answered, then owed a
    compensation that recovery finished, is journaled `failed` (never `succeeded` once it owed), yet
    it answered: its end told is its completion."""
    if row["state"] == "failed" and row.get("final_answer") is not None:
        return "invocation.succeeded"
    return TERMINAL_EVENTS.get(str(row["state"]))


def _answered(row: dict[str, Any]) -> bool:
    return _end_told(row) == "invocation.succeeded"


def terminal(evidence: Evidence) -> Iterator[Violation]:
    """Every invocation reached a terminal state; no call or compensation row is left standing."""
    for invocation_id, row in evidence.invocations.items():
        if row["state"] not in TERMINAL_STATES:
            yield Violation("terminal", invocation_id, f"invocation left {row['state']}")
    for call in evidence.calls:
        if call["state"] not in SETTLED_CALLS:
            yield Violation(
                "terminal",
                call["invocation_id"],
                f"{call['tool']} call {call['call_id']} left {call['state']}",
            )
    for row in evidence.compensations.values():
        if row["state"] not in ("succeeded", "failed"):
            yield Violation(
                "terminal", row["invocation_id"], f"compensation of {row['tool']} left {row['state']}"
            )


def once(evidence: Evidence) -> Iterator[Violation]:
    """No effect of a tool that is not idempotent happened twice; every run of an idempotent one
    carried one idempotency key."""
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in evidence.ledger:
        if entry["kind"] == "effect":
            runs[entry["ref"]].append(entry)
    for ref, entries in runs.items():
        tool, invocation = entries[0]["tool"], entries[0]["invocation"]
        if tool in IDEMPOTENT:
            keys = {e["key"] for e in entries}
            if len(keys) > 1:
                yield Violation("once", invocation, f"idempotent {tool} {ref} ran under {len(keys)} keys")
        elif len(entries) > 1:
            yield Violation("once", invocation, f"{tool} {ref} happened {len(entries)} times")


def compensated(evidence: Evidence) -> Iterator[Violation]:
    """Every effect is undone exactly once where its invocation failed or was cancelled, or its call
    did not end a kept success; an effect kept is never undone; what the model was told succeeded
    happened."""
    undos = Counter(e["key"] for e in evidence.ledger if e["kind"] == "undo")
    # an undo that found nothing: one more is allowed for a call in doubt (its worker lost), undone at
    # once and again if its worker, only stopped, finishes it after all
    tried_again = Counter(e["key"] for e in evidence.ledger if e["kind"] == "undo_nothing")
    calls = {(c["invocation_id"], c["call_id"]): c for c in evidence.calls}
    effects = {e["ref"]: e for e in evidence.ledger if e["kind"] == "effect"}
    for entry in effects.values():
        if entry["tool"] not in COMPENSABLE:
            continue
        invocation_id, ref, times = entry["invocation"], entry["ref"], undos[entry["key"]]
        state = (evidence.invocations.get(invocation_id) or {}).get("state")
        call = calls.get((invocation_id, entry["call"]))
        kept = call is not None and call["state"] in ("succeeded", "kept")
        in_doubt = call is not None and call["outcome"] == "worker_lost"
        if times > 1:
            yield Violation("compensated once", invocation_id, f"{entry['tool']} {ref} undone {times} times")
        elif tried_again[entry["key"]] > (1 if in_doubt else 0):
            yield Violation(
                "compensated once",
                invocation_id,
                f"{entry['tool']} {ref} undone, then tried {tried_again[entry['key']]} more times",
            )
        elif state in ("failed", "cancelled") and times != 1:
            yield Violation(
                "compensated once",
                invocation_id,
                f"{entry['tool']} {ref} of a {state} invocation never undone",
            )
        elif state == "succeeded" and kept and times:
            yield Violation("compensated once", invocation_id, f"{entry['tool']} {ref} kept, yet undone")
        elif state == "succeeded" and not kept and times != 1:
            called = "no call row" if call is None else f"call {call['state']} ({call['outcome']})"
            yield Violation(
                "compensated once", invocation_id, f"{entry['tool']} {ref} happened, {called}, never undone"
            )
    yield from _failed_batches_undone(evidence, undos, effects)
    for ref in sorted(evidence.told_ok - set(effects)):
        yield Violation("told", None, f"the model was told {ref} succeeded; it never happened")


def _failed_batches_undone(
    evidence: Evidence, undos: Counter[str], effects: dict[str, dict[str, Any]]
) -> Iterator[Violation]:
    """From the plans the clients sent: once a batch with a refusal ran (its call is in the journal),
    every effect of that batch and of the batches before it was undone."""
    ran = {(c["invocation_id"], c["call_id"]) for c in evidence.calls if c["tool"] == "refuse"}
    for request in evidence.requests:
        invocation_id = request.get("invocation")
        steps = json.loads(request["text"].split(" ", 2)[2])
        for failed, step in enumerate(steps):
            if not any(
                (invocation_id, f"c{failed}_{i}") in ran for i, c in enumerate(step) if c[0] == "refuse"
            ):
                continue
            for earlier in steps[: failed + 1]:
                for call in earlier:
                    entry = effects.get(call[1])
                    if entry is not None and entry["tool"] in COMPENSABLE and not undos[entry["key"]]:
                        yield Violation(
                            "compensated once",
                            invocation_id,
                            f"{entry['tool']} {call[1]} stood though a call of its batch or after it failed",
                        )


def answered(evidence: Evidence) -> Iterator[Violation]:
    """Every request got one answer or one error; a completed one got the answer its invocation
    ended with; a request started one invocation, whatever its retries."""
    started = Counter(row["user_message"] for row in evidence.invocations.values())
    for request in evidence.requests:
        invocation_id = request.get("invocation")
        row = evidence.invocations.get(invocation_id or "")
        label = f"{request['mode']} request of plan {request['plan']}"
        if started[request["text"]] > 1:
            yield Violation(
                "one answer", invocation_id, f"{label} started {started[request['text']]} invocations"
            )
        if row is None:
            yield Violation(
                "one answer", invocation_id, f"{label} got no invocation ({request.get('error')})"
            )
            continue
        if request["mode"] in ("openai", "stream"):
            got = request.get("answer") is not None and not request.get("error")
            if _answered(row) and not got:
                yield Violation("one answer", invocation_id, f"{label}: no answer ({request.get('error')})")
            elif _answered(row) and request["answer"] != row["final_answer"]:
                yield Violation(
                    "one answer", invocation_id, f"{label} got {request['answer']!r}, not its invocation's"
                )
            elif not _answered(row) and got:
                yield Violation(
                    "one answer", invocation_id, f"{label} got an answer; the invocation is {row['state']}"
                )
            continue
        outcome = request.get("outcome")
        if outcome is None:
            yield Violation(
                "one answer",
                invocation_id,
                f"{label}: its stream never told its end ({request.get('error')})",
            )
        elif outcome != _end_told(row):
            yield Violation(
                "one answer", invocation_id, f"{label} was told {outcome}; the invocation is {row['state']}"
            )
        elif outcome == "invocation.succeeded" and request.get("answer") != row["final_answer"]:
            yield Violation(
                "one answer", invocation_id, f"{label} got {request.get('answer')!r}, not its invocation's"
            )


def conversations(evidence: Evidence) -> Iterator[Violation]:
    """Every conversation holds each of its turns once, in order; every answered turn is in it."""
    turns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for request in evidence.requests:
        turns[request["conversation"]].append(request)
    for conversation, requests in turns.items():
        requests.sort(key=lambda r: r["turn"])
        held = evidence.memory.get(conversation, [])
        sent = [r["text"] for r in requests]
        owner = next((r.get("invocation") for r in requests), None)
        for times in Counter(held).values():
            if times > 1:
                yield Violation("conversation", owner, f"{conversation} holds a turn {times} times")
        order = [sent.index(text) for text in held if text in sent]
        if order != sorted(order) or len(order) != len(held):
            yield Violation(
                "conversation", owner, f"{conversation} holds its turns out of order or foreign ones"
            )
        for request in requests:
            answered_turn = request.get("answer") is not None and request.get("outcome") in (
                None,
                "invocation.succeeded",
            )
            if answered_turn and request["text"] not in held:
                yield Violation(
                    "conversation", request.get("invocation"), f"{conversation} lost turn {request['turn']}"
                )


def approvals(evidence: Evidence) -> Iterator[Violation]:
    """Every approval is decided, expired or cancelled; a call not approved never ran."""
    ran = {(e["invocation"], e["call"]) for e in evidence.ledger if e["kind"] == "effect"}
    for approval in evidence.approvals:
        key = (approval["invocation_id"], approval["call_id"])
        if approval["state"] == "pending":
            yield Violation("approvals", key[0], f"approval of {approval['tool']} {key[1]} left pending")
        elif approval["state"] != "approved" and key in ran:
            yield Violation(
                "approvals", key[0], f"{approval['tool']} {key[1]} ran though {approval['state']}"
            )


def _attempt(event: dict[str, Any]) -> str:
    """What one call event is told once for: its call, and for a start the worker it started on (a call
    its worker lost is delivered again, and starts again on another: a second attempt, not a repeat)."""
    call_id = str(event.get("call_id"))
    if event.get("type") == "tool_call.started":
        return f"{call_id} on {event.get('worker')}"
    return call_id


def streams(evidence: Evidence) -> Iterator[Violation]:
    """Every invocation's event stream starts once, ends once with its journaled state, tells each
    call's steps at most once and every settled call's end; a client read a prefix of it, once."""
    for invocation_id, row in evidence.invocations.items():
        events = evidence.events.get(invocation_id, [])
        types = [str(e["type"]) for _, e in events]
        ends = [t for t in types if t in TERMINAL_EVENTS.values()]
        if types.count("invocation.started") != 1 or (types and types[0] != "invocation.started"):
            yield Violation("stream", invocation_id, f"started {types.count('invocation.started')} times")
        if row["state"] in TERMINAL_STATES and (ends != [_end_told(row)] or types[-1] != ends[-1]):
            yield Violation("stream", invocation_id, f"ends {ends} for a {row['state']} invocation")
        told = Counter((str(e["type"]), _attempt(e)) for _, e in events if e.get("type") in CALL_EVENTS)
        for (kind, call_id), times in told.items():
            if times > 1:
                yield Violation("stream", invocation_id, f"{kind} of call {call_id} told {times} times")
        finished = {call_id for kind, call_id in told if kind == "tool_call.finished"}
        for call in evidence.calls:
            known = call["state"] in ("succeeded", "failed", "compensated", "kept") and call["outcome"]
            if call["invocation_id"] == invocation_id and known and call["call_id"] not in finished:
                yield Violation(
                    "stream", invocation_id, f"the end of call {call['call_id']} ({call['tool']}) never told"
                )
    for request in evidence.requests:
        read = request.get("events") or []
        stored = [event_id for event_id, _ in evidence.events.get(request.get("invocation") or "", [])]
        if read and read != stored[: len(read)]:
            yield Violation(
                "stream", request.get("invocation"), "a client read events missing, repeated or out of order"
            )


INVARIANTS: dict[str, Check] = {
    "terminal": terminal,
    "once": once,
    "compensated once": compensated,
    "one answer": answered,
    "conversation": conversations,
    "approvals": approvals,
    "stream": streams,
}


def check(evidence: Evidence) -> list[Violation]:
    """Every violation of every invariant."""
    return [violation for invariant in INVARIANTS.values() for violation in invariant(evidence)]
