"""A paused invocation stays one trace, whichever processes go on with it: the orchestrator that
paused it exits, another decides, a third resumes (or cancels) it, each exporting its spans over
OTLP/HTTP to a receiver this test runs. The wait for the person is a span of its own, from the pause
to the decision, under the paused invocation's span; so is what the resuming process runs."""

from __future__ import annotations

import time

import pytest

from orchestrator import Journal
from tests.integration.approvals.harness import cli, count, env, resume, start, transfers
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan

pytestmark = pytest.mark.integration

INVOKE = "invoke_agent bank"


def traced(redis_url: str, postgres: str, receiver: OtlpReceiver) -> dict[str, str]:
    return env(
        redis_url,
        postgres,
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_SERVICE_NAME=None,
        OTEL_BSP_SCHEDULE_DELAY="50",
        OTEL_SDK_DISABLED=None,
        TOOLFLEET_TRACE_CONTENT=None,
    )


def of_invocation(receiver: OtlpReceiver, invocation: str, names: set[str]) -> list[ReceivedSpan]:
    """The spans of the trace of `invocation` once every name of `names` arrived in it."""
    deadline = time.monotonic() + 15
    while True:
        roots = [
            s
            for s in receiver.spans
            if s.attributes.get("toolfleet.invocation.id") == invocation and not s.parent_id
        ]
        spans = [s for s in receiver.spans if roots and s.trace_id == roots[0].trace_id]
        if names <= {s.name for s in spans}:
            return spans
        if time.monotonic() > deadline:
            raise TimeoutError(f"spans missing: {sorted(names - {s.name for s in spans})}")
        time.sleep(0.05)


def one(spans: list[ReceivedSpan], name: str, **attributes: object) -> ReceivedSpan:
    [found] = [
        s for s in spans if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())
    ]
    return found


def test_a_call_approved_and_resumed_by_other_processes_is_one_trace_with_its_wait(
    pool: None, redis_url: str, postgres: str, journal: Journal, key: str, receiver: OtlpReceiver
) -> None:
    variables = traced(redis_url, postgres, receiver)
    # given: an invocation paused on its transfer by a process that exited
    invocation, pending = start(variables, key)
    assert pending == ["transfer-1"]
    time.sleep(0.3)
    # when: a second process approves it, and a third goes on with it
    approved_at = time.time_ns()
    decided = cli(variables, "approve", invocation, "transfer-1", "--by", "alice")
    assert decided.returncode == 0, decided.stderr
    assert resume(variables, invocation)["outcome"] == "ran"
    assert transfers(key) == [{"to": "Dmytro", "amount": 2500}]
    # then: one trace holds the pause, the wait and the resumption
    spans = of_invocation(
        receiver, invocation, {INVOKE, "await_approval approval_transfer", "execute_tool approval_transfer"}
    )
    paused = one(spans, INVOKE, **{"gen_ai.response.finish_reasons": ["approval_required"]})
    assert paused.parent_id == "" and "approval requested" in paused.events
    assert one(spans, "execute_tool approval_reserve").parent_id == paused.span_id
    wait = one(spans, "await_approval approval_transfer")
    assert wait.parent_id == paused.span_id
    assert wait.attributes["gen_ai.tool.call.id"] == "transfer-1"
    assert wait.attributes["toolfleet.approval.decision"] == "approved"
    assert wait.attributes["toolfleet.approval.decided_by"] == "alice"
    assert wait.attributes["toolfleet.pool"] == "approvals"
    assert wait.start_ns <= paused.end_ns and wait.start_ns < approved_at < wait.end_ns
    resumed = one(spans, INVOKE, **{"gen_ai.response.finish_reasons": ["stop"]})
    assert resumed.parent_id == paused.span_id and resumed.span_id != paused.span_id
    transfer = one(spans, "execute_tool approval_transfer")
    assert transfer.parent_id == resumed.span_id
    assert transfer.attributes["toolfleet.outcome.kind"] == "success"
    # and: arguments are not recorded without the operator's opt-in
    assert all("gen_ai.tool.call.arguments" not in s.attributes for s in spans)
    assert all("Dmytro" not in str(s.attributes) for s in spans)


def test_a_paused_invocation_cancelled_elsewhere_ends_its_trace_with_the_wait_and_compensation(
    pool: None, redis_url: str, postgres: str, key: str, receiver: OtlpReceiver
) -> None:
    variables = traced(redis_url, postgres, receiver)
    invocation, _ = start(variables, key)
    cancelled = cli(variables, "cancel", invocation)
    assert cancelled.returncode == 0, cancelled.stderr
    assert count(key, "released") == 1
    spans = of_invocation(
        receiver, invocation, {INVOKE, "await_approval approval_transfer", "compensate approval_reserve"}
    )
    paused = one(spans, INVOKE)
    wait = one(spans, "await_approval approval_transfer")
    assert wait.parent_id == paused.span_id
    assert wait.attributes["toolfleet.approval.decision"] == "cancelled"
    compensation = one(spans, "compensate approval_reserve", **{"toolfleet.side": "orchestrator"})
    assert compensation.parent_id == paused.span_id
    assert compensation.attributes["toolfleet.compensation.result"] == "succeeded"
