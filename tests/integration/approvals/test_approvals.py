"""Human approvals across processes, on a real worker pool and PostgreSQL: an invocation pauses in the
journal and its orchestrator exits; another process decides (`toolfleet approve` / `reject`) and goes
on with it; the approved call runs exactly once on its pool, with the arguments approved; a rejection
and an expiry reach the model; two processes resuming at once run the call once; a paused invocation
cancelled compensates what it did."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import redis

from orchestrator import ApprovalState, InvocationState, Journal
from tests.integration.approvals import tools
from tests.integration.approvals.agent import APPROVAL_TIMEOUT_VARIABLE
from tests.integration.approvals.harness import AGENT, DRIVER, cli, count, env, resume, start, transfers
from tests.integration.worker_processes import REPO_ROOT
from workers.protocol import CANCELLED_KEY

pytestmark = pytest.mark.integration


def test_a_call_approved_by_a_new_process_runs_once_on_its_pool_and_the_model_reads_its_result(
    pool: None, redis_url: str, postgres: str, journal: Journal, key: str
) -> None:
    variables = env(redis_url, postgres)
    # given: an invocation paused on its transfer, its orchestrator process gone
    invocation, pending = start(variables, key)
    assert pending == ["transfer-1"]
    assert count(key, "reserved") == 1 and transfers(key) == []
    record = journal.invocation(invocation)
    assert record is not None and record.state is InvocationState.PAUSED
    listed = cli(variables, "approvals", "--invocation", invocation, "--json")
    [waiting] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert waiting["tool"] == "approval_transfer" and waiting["pool"] == tools.POOL
    assert waiting["arguments"] == {"to": "Dmytro", "amount": 2500, "key": key}
    assert waiting["state"] == "pending" and waiting["requested_by"] == "bank/default"
    # when: a new process approves, with the agent to go on with it
    approved = cli(variables, "approve", invocation, "transfer-1", "--agent", AGENT, "--by", "alice")
    # then: the call ran once, on its pool, and the model read its result
    assert approved.returncode == 0, approved.stderr
    assert "answer: answer after approval_transfer: transferred 2500 to Dmytro" in approved.stdout
    assert transfers(key) == [{"to": "Dmytro", "amount": 2500}]
    record = journal.invocation(invocation)
    assert record is not None and record.state is InvocationState.SUCCEEDED
    [call] = [c for c in journal.calls(invocation) if c.tool == "approval_transfer"]
    assert call.pool == tools.POOL and call.worker is not None and "approvals@integration" in call.worker
    [approval] = journal.approvals(invocation)
    assert approval.state is ApprovalState.APPROVED and approval.decided_by == "alice"
    # and: deciding again changes nothing and runs nothing
    again = cli(variables, "approve", invocation, "transfer-1", "--agent", AGENT)
    assert again.returncode == 0, again.stderr
    assert len(transfers(key)) == 1


def test_edited_arguments_run_as_edited_and_a_stale_hash_is_refused(
    pool: None, redis_url: str, postgres: str, key: str
) -> None:
    variables = env(redis_url, postgres)
    invocation, _ = start(variables, key)
    stale = cli(variables, "approve", invocation, "transfer-1", "--hash", "0" * 64, "--agent", AGENT)
    assert stale.returncode == 1 and "other arguments" in stale.stderr
    edited = json.dumps({"to": "Dmytro", "amount": 100, "key": key})
    approved = cli(variables, "approve", invocation, "transfer-1", "--arguments", edited, "--agent", AGENT)
    assert approved.returncode == 0, approved.stderr
    assert transfers(key) == [{"to": "Dmytro", "amount": 100}]
    assert "transferred 100 to Dmytro" in approved.stdout


def test_a_rejection_reaches_the_model_with_its_reason_and_nothing_runs(
    pool: None, redis_url: str, postgres: str, journal: Journal, key: str
) -> None:
    variables = env(redis_url, postgres)
    invocation, _ = start(variables, key)
    rejected = cli(variables, "reject", invocation, "transfer-1", "--reason", "too risky", "--agent", AGENT)
    assert rejected.returncode == 0, rejected.stderr
    assert "The user rejected the call to 'approval_transfer': too risky" in rejected.stdout
    assert transfers(key) == []
    # a rejection undoes nothing unless the service says so: the reservation stands
    assert count(key, "released") == 0
    record = journal.invocation(invocation)
    assert record is not None and record.state is InvocationState.SUCCEEDED


def test_two_processes_resuming_at_once_run_the_approved_call_once(
    pool: None, redis_url: str, postgres: str, key: str
) -> None:
    variables = env(redis_url, postgres)
    invocation, _ = start(variables, key)
    decided = cli(variables, "approve", invocation, "transfer-1")  # no agent here: nobody goes on yet
    assert decided.returncode == 0 and "no call waits" in decided.stdout
    assert transfers(key) == []
    racers = [
        subprocess.Popen(
            [*DRIVER, "resume", invocation], env=variables, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outcomes = sorted(
        json.loads(p.communicate(timeout=90)[0].strip().splitlines()[-1])["outcome"] for p in racers
    )
    assert outcomes == ["elsewhere", "ran"]
    assert transfers(key) == [{"to": "Dmytro", "amount": 2500}]


def test_an_expired_approval_is_rejected_and_its_call_never_runs(
    pool: None, redis_url: str, postgres: str, journal: Journal, key: str
) -> None:
    variables = env(redis_url, postgres, **{APPROVAL_TIMEOUT_VARIABLE: "1"})
    invocation, _ = start(variables, key)
    time.sleep(1.5)
    late = cli(variables, "approve", invocation, "transfer-1")
    assert late.returncode == 1 and "expired" in late.stderr
    [approval] = journal.approvals(invocation)
    assert approval.state is ApprovalState.EXPIRED
    printed = resume(variables, invocation)
    assert printed["outcome"] == "ran"
    assert (
        "The call to 'approval_transfer' was not approved within 1 s, so it did not run" in printed["content"]
    )
    assert transfers(key) == []


def test_a_paused_invocation_cancelled_compensates_what_it_did(
    pool: None, redis_url: str, postgres: str, journal: Journal, key: str
) -> None:
    variables = env(redis_url, postgres)
    invocation, _ = start(variables, key)
    cancelled = cli(variables, "cancel", invocation)
    assert cancelled.returncode == 0, cancelled.stderr
    assert "compensated: approval_reserve (reserve-1)" in cancelled.stdout
    assert count(key, "released") == 1 and transfers(key) == []
    record = journal.invocation(invocation)
    assert record is not None and record.state is InvocationState.CANCELLED
    [approval] = journal.approvals(invocation)
    assert approval.state is ApprovalState.CANCELLED
    late = cli(variables, "approve", invocation, "transfer-1")
    assert late.returncode == 1 and "cancelled" in late.stderr


def test_a_decided_invocation_cancelled_before_it_goes_on_ends_cancelled_and_undone(
    pool: None, redis_url: str, postgres: str, journal: Journal, key: str
) -> None:
    variables = env(redis_url, postgres)
    # given: a paused invocation whose call was approved, and a cancel requested before any process
    # went on with it (a replica cancelled as it was about to resume it)
    invocation, _ = start(variables, key)
    decided = cli(variables, "approve", invocation, "transfer-1")
    assert decided.returncode == 0, decided.stderr
    redis.Redis.from_url(redis_url).set(CANCELLED_KEY.format(invocation), b"1", ex=60)

    # when: a process goes on with it
    cli(variables, "approve", invocation, "transfer-1", "--agent", AGENT)

    # then: it is cancelled where it is journaled, not left paused; what it did is undone, the
    # approved call never ran
    record = journal.invocation(invocation)
    assert record is not None and record.state is InvocationState.CANCELLED
    assert count(key, "released") == 1 and transfers(key) == []
