"""The demo's approval story, once its invocation has paused: the waiting call shown, then approved by a
second process — `toolfleet approve` with the teller agent, as a person would run it — which goes on
with the invocation; what it printed, and what the journal both processes share says of the call.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import TextIO

from orchestrator.approvals import ApprovalRecord
from orchestrator.cli.console import short_arguments
from orchestrator.errors import OrchestratorError
from orchestrator.result import Result
from orchestrator.saga.journal import Journal
from workers.examples.teller import APPROVAL_THRESHOLD
from workers.settings import ENVIRONMENT, Settings

__all__ = ["TELLER_AGENT", "approve_in_another_process", "shared_environment"]

# The agent the second process goes on with: the one that paused the invocation.
TELLER_AGENT = "bank=workers.examples.teller:teller"
APPROVER_TIMEOUT_S = 60.0


def shared_environment(
    settings: Settings, database_url: str, journal_keys: str, artifact_url: str
) -> dict[str, str]:
    """The environment of a second process that reaches what the demo reaches: its Redis, broker and
    result backend, its journal (the database and the keys that seal it) and its artifact store."""
    return {
        **os.environ,
        ENVIRONMENT["redis_url"]: settings.redis_url,
        ENVIRONMENT["broker_url"]: settings.broker_url,
        ENVIRONMENT["result_backend"]: settings.result_backend,
        ENVIRONMENT["database_url"]: database_url,
        ENVIRONMENT["journal_keys"]: journal_keys,
        ENVIRONMENT["artifact_url"]: artifact_url,
    }


def approve_in_another_process(
    out: TextIO, result: Result, journal: Journal, environment: Mapping[str, str]
) -> None:
    """Show the calls the paused invocation waits on, approve each with `toolfleet approve` in a
    second process (the last one goes on with the invocation there), and tell what it did."""
    invocation_id = result.invocation_id or ""
    out.write(
        f"  Paused (invocation {invocation_id}): the teller holds transfers above {APPROVAL_THRESHOLD} "
        "for a person's approval; waiting:\n"
    )
    for approval in result.pending_approvals:
        out.write(_waiting(approval))
    answer = "-"
    for approval in result.pending_approvals:
        command = ["toolfleet", "approve", invocation_id, approval.call_id or "", "--agent", TELLER_AGENT]
        out.write(f"  A second process approves it: {' '.join(command)}\n")
        out.flush()
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", *command[1:]],
            env=dict(environment),
            capture_output=True,
            text=True,
            timeout=APPROVER_TIMEOUT_S,
            check=False,
        )
        out.write(f"  Its output (exit code {done.returncode}, {time.monotonic() - began:.2f} s):\n")
        for line in done.stdout.splitlines():
            out.write(f"    | {line}\n")
            answer = line.removeprefix("answer: ") if line.startswith("answer: ") else answer
        if done.returncode != 0:
            raise OrchestratorError(f"toolfleet approve failed: {done.stderr.strip()[-2000:]}")
    _journaled(out, invocation_id, journal)
    out.write(f"  Answer (given in the second process): {answer}\n")


def _waiting(approval: ApprovalRecord) -> str:
    return (
        f"    {approval.tool} call {approval.call_id} on pool {approval.pool or '-'}: "
        f"{short_arguments(approval.arguments)} (asked by {approval.requested_by}, expires "
        f"{approval.expires_at:%H:%M:%S %Z})\n"
    )


def _journaled(out: TextIO, invocation_id: str, journal: Journal) -> None:
    """What the shared journal holds of the invocation: each call, how many times it ran and where."""
    invocation = journal.invocation(invocation_id)
    state = invocation.state.value if invocation is not None else "unknown"
    out.write(f"  The shared journal: invocation {state}\n")
    calls = journal.calls(invocation_id)
    for tool in dict.fromkeys(call.tool for call in calls):
        runs = [call for call in calls if call.tool == tool]
        where = ", ".join(sorted({f"pool {c.pool or '-'} (worker {c.worker or '-'})" for c in runs}))
        states = ", ".join(call.state.value for call in runs)
        out.write(f"    {tool} ran {len(runs)} time{'s' if len(runs) != 1 else ''} on {where}: {states}\n")
    for approval in journal.approvals(invocation_id):
        out.write(
            f"    {approval.tool} call {approval.call_id}: {approval.state.value} by {approval.decided_by}\n"
        )
