"""The soak's checkers can fail: each invariant, given evidence that breaks it, reports a violation,
and evidence of a run where nothing went wrong reports none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.soak.checks import check
from bench.soak.evidence import Evidence
from bench.soak.faults import Fault
from bench.soak.report import build, plot, table

INVOCATION = "11111111-1111-1111-1111-111111111111"
PLAN = 'plan p1 [[["book","p1.0.0"]]]'


def _clean() -> Evidence:
    """One conversation of one turn: a booking that stood, told to the model, streamed once."""
    key = f"{INVOCATION}:c0_0"
    return Evidence(
        ledger=[
            {
                "kind": "effect",
                "tool": "book",
                "ref": "p1.0.0",
                "key": key,
                "invocation": INVOCATION,
                "call": "c0_0",
            }
        ],
        requests=[
            {
                "mode": "openai",
                "plan": "p1",
                "text": PLAN,
                "conversation": "conv-1",
                "turn": 0,
                "invocation": INVOCATION,
                "answer": "done p1: ok p1.0.0",
                "error": None,
                "events": [],
                "started": 0.0,
                "ended": 1.0,
            }
        ],
        told_ok={"p1.0.0"},
        invocations={
            INVOCATION: {
                "id": INVOCATION,
                "state": "succeeded",
                "user_message": PLAN,
                "final_answer": "done p1: ok p1.0.0",
                "memory_id": "soak/conv-1",
                "error": None,
            }
        },
        calls=[
            {
                "id": 1,
                "invocation_id": INVOCATION,
                "call_id": "c0_0",
                "tool": "book",
                "state": "succeeded",
                "outcome": "success",
                "idempotency_key": key,
            }
        ],
        memory={"conv-1": [PLAN]},
        events={
            INVOCATION: [
                ("1-0", {"type": "invocation.started"}),
                ("2-0", {"type": "tool_call.queued", "call_id": "c0_0"}),
                ("3-0", {"type": "tool_call.finished", "call_id": "c0_0"}),
                ("4-0", {"type": "invocation.succeeded"}),
            ]
        },
    )


def _invariants(evidence: Evidence) -> list[str]:
    return [v.invariant for v in check(evidence)]


def test_a_run_where_nothing_went_wrong_has_no_violation() -> None:
    assert check(_clean()) == []


def test_an_effect_twice_is_a_violation() -> None:
    evidence = _clean()
    evidence.ledger.append(dict(evidence.ledger[0]))
    assert _invariants(evidence) == ["once"]


def test_an_effect_of_a_failed_invocation_never_undone_is_a_violation() -> None:
    evidence = _clean()
    evidence.invocations[INVOCATION].update(state="failed", final_answer=None)
    evidence.requests[0].update(answer=None, error="500: the invocation failed")
    evidence.events[INVOCATION][-1] = ("4-0", {"type": "invocation.failed"})
    assert _invariants(evidence) == ["compensated once"]
    evidence.ledger.append(
        {"kind": "undo", "tool": "book", "ref": "p1.0.0", "key": evidence.ledger[0]["key"]}
    )
    assert _invariants(evidence) == []


def test_what_the_model_was_told_succeeded_must_have_happened() -> None:
    evidence = _clean()
    evidence.ledger.clear()
    assert _invariants(evidence) == ["told"]


def test_a_request_without_its_answer_is_a_violation() -> None:
    evidence = _clean()
    evidence.requests[0].update(answer=None, error="APITimeoutError")
    assert "one answer" in _invariants(evidence)


def test_a_turn_held_twice_or_lost_is_a_violation() -> None:
    evidence = _clean()
    evidence.memory["conv-1"] = [PLAN, PLAN]
    assert _invariants(evidence) == ["conversation"]
    evidence.memory["conv-1"] = []
    assert _invariants(evidence) == ["conversation"]


def test_an_undecided_approval_and_a_stream_with_two_ends_are_violations() -> None:
    evidence = _clean()
    evidence.approvals.append(
        {"invocation_id": INVOCATION, "call_id": "c1_0", "tool": "wire", "state": "pending"}
    )
    evidence.events[INVOCATION].append(("5-0", {"type": "invocation.succeeded"}))
    assert sorted(_invariants(evidence)) == ["approvals", "stream"]


def test_an_invocation_left_running_is_a_violation() -> None:
    evidence = _clean()
    evidence.invocations[INVOCATION]["state"] = "running"
    evidence.calls[0]["state"] = "dispatched"
    found: list[Any] = _invariants(evidence)
    assert found.count("terminal") == 2


def test_an_effect_left_standing_after_a_failed_batch_is_a_violation() -> None:
    evidence = _clean()
    plan = 'plan p1 [[["book","p1.0.0"],["refuse","p1.0.1"]]]'
    evidence.requests[0]["text"] = plan
    evidence.invocations[INVOCATION]["user_message"] = plan
    evidence.memory["conv-1"] = [plan]
    evidence.calls.append(dict(evidence.calls[0], id=2, call_id="c0_1", tool="refuse", state="failed"))
    evidence.events[INVOCATION].insert(2, ("2-1", {"type": "tool_call.finished", "call_id": "c0_1"}))
    assert _invariants(evidence) == ["compensated once"]
    evidence.ledger.append(
        {"kind": "undo", "tool": "book", "ref": "p1.0.0", "key": evidence.ledger[0]["key"]}
    )
    evidence.calls[0]["state"] = "compensated"
    assert _invariants(evidence) == []


def test_an_undo_tried_again_is_a_violation_unless_its_call_was_in_doubt() -> None:
    # given: a booking its invocation's failure undid, and whose undo was then tried again (finding
    # nothing left: the first took it away)
    evidence = _clean()
    evidence.invocations[INVOCATION]["state"] = "failed"
    key = evidence.ledger[0]["key"]
    evidence.ledger.append({"kind": "undo", "tool": "book", "ref": "p1.0.0", "key": key})
    evidence.ledger.append({"kind": "undo_nothing", "tool": "book", "ref": "p1.0.0", "key": key})
    evidence.events[INVOCATION][-1] = ("3-0", {"type": "invocation.failed"})
    evidence.requests[0].update(answer=None, error="the invocation failed")
    evidence.told_ok = set()
    # then: a call whose outcome is known was undone twice
    evidence.calls[0].update(state="compensated")
    assert "compensated once" in _invariants(evidence)
    # ... but a call in doubt (its worker lost) is undone at once and again if it finishes after all
    evidence.calls[0].update(state="abandoned", outcome="worker_lost")
    assert "compensated once" not in _invariants(evidence)
    # ... once more, not twice
    evidence.ledger.append({"kind": "undo_nothing", "tool": "book", "ref": "p1.0.0", "key": key})
    assert "compensated once" in _invariants(evidence)


def test_the_report_tells_the_violations_with_the_faults_near_them(tmp_path: Path) -> None:
    evidence = _clean()
    evidence.ledger.append(dict(evidence.ledger[0]))
    faults = [Fault(5.0, "kill_worker", "threads-1", 1.0, started=0.5, ended=1.5)]
    report = build(
        seed=1,
        minutes=2,
        began=0.0,
        evidence=evidence,
        faults=faults,
        violations=check(evidence),
        network="loopback",
    )
    assert report["faults"]["kill_worker"] == 1 and report["invariants"]["once"] == 1
    assert report["violations"][0]["faults_near"] == ["kill_worker threads-1 at 0.5"]
    assert "violations: 1" in table(report)
    plot(report, evidence.requests, tmp_path / "soak.png")
    assert (tmp_path / "soak.png").stat().st_size > 1000
