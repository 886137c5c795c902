"""What `toolfleet approve` and `toolfleet reject` share: the decision written, then the invocation
resumed here when an agent to run it is given and no call of it waits any more."""

from __future__ import annotations

import argparse
import getpass
import os
import socket
import sys
from typing import TYPE_CHECKING

from orchestrator.cli.commands._command import refuse
from workers.errors import ToolfleetError
from workers.settings import Settings

if TYPE_CHECKING:
    from orchestrator.approvals import ApprovalDecision
    from orchestrator.service import AiService

__all__ = ["add_decision_arguments", "decide"]

AGENTS_VARIABLE = "TOOLFLEET_AGENTS"


def add_decision_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("invocation", help="the paused invocation's id (see `toolfleet approvals`)")
    parser.add_argument("call", help="the waiting call's id (see `toolfleet approvals`)")
    parser.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="NAME=MODULE:ATTRIBUTE",
        help="the agent that goes on with the invocation here once no call waits (repeatable; also "
        f"{AGENTS_VARIABLE}); without one, a `toolfleet serve` replica serving it goes on with it",
    )
    parser.add_argument("--by", default=None, help="who decides (default: user@host)")


def decide(command: str, args: argparse.Namespace, settings: Settings, decision: ApprovalDecision) -> int:
    """Write the decision; resume the invocation here when it waits no more and an agent runs it."""
    import asyncio

    from orchestrator.approvals import ApprovalState, record_decisions
    from orchestrator.cli.commands._journal_source import open_journal
    from orchestrator.errors import ApprovalError

    journal = open_journal(settings, command)
    by = args.by or f"{getpass.getuser()}@{socket.gethostname()}"
    try:
        [record] = record_decisions(journal, args.invocation, {args.call: decision}, by)
    except ApprovalError as exc:
        print(f"toolfleet {command}: {exc}", file=sys.stderr)
        return 1
    if record.state is ApprovalState.EXPIRED:
        print(
            f"toolfleet {command}: call {record.call_id} of tool '{record.tool}' expired at "
            f"{record.expires_at:%Y-%m-%d %H:%M:%S %Z} and will never run",
            file=sys.stderr,
        )
        return 1
    print(f"{record.state.value}: {record.tool} call {record.call_id} of invocation {record.invocation_id}")
    waiting = journal.approvals(args.invocation, state=ApprovalState.PENDING)
    if waiting:
        print(f"still waiting: {', '.join(f'{a.tool} call {a.call_id}' for a in waiting)}")
        return 0
    invocation = journal.invocation(args.invocation)
    try:
        service = _agent_for(args.agent, invocation.service_name if invocation is not None else None)
    except (ValueError, ToolfleetError) as exc:
        return refuse(command, exc)
    if service is None:
        print(
            "no call waits: the invocation goes on in the first process that resumes it (a `toolfleet "
            f"serve` replica serving its agent, or this command with --agent or {AGENTS_VARIABLE})"
        )
        return 0
    result = asyncio.run(service.aresume(args.invocation, by=by))
    if result is None:
        print("another process goes on with the invocation")
    elif result.pending_approvals:
        waits = ", ".join(f"{a.tool} call {a.call_id}" for a in result.pending_approvals)
        print(f"the invocation went on and paused again: waiting for {waits}")
    else:
        print(f"answer: {result.content}")
    return 0


def _agent_for(given: list[str], service_name: str | None) -> AiService | None:
    """The agent that goes on with the invocation: the one named like its service, or the only one."""
    from orchestrator.server.agents import load_agent
    from orchestrator.server.settings import parse_agents

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # agent modules are found from where the command runs
    specs = parse_agents(
        given or [os.environ.get(AGENTS_VARIABLE, "")] if given or os.environ.get(AGENTS_VARIABLE) else []
    )
    if not specs:
        return None
    named = [spec for spec in specs if spec.name == service_name]
    if named:
        return load_agent(named[0])
    services = [load_agent(spec) for spec in specs]
    matching = [s for s in services if s.name is not None and s.name == service_name]
    if matching:
        return matching[0]
    return services[0] if len(services) == 1 else None
