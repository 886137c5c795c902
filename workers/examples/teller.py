"""A bank teller agent whose large transfers wait for a person's approval: serve it with
`toolfleet serve --agent bank=workers.examples.teller:teller`, or let `toolfleet approve ... --agent
bank=workers.examples.teller:teller` go on with an invocation it paused.

Its policy, `large_transfer`, holds every `transfer` of more than `APPROVAL_THRESHOLD` until someone
approves it (`toolfleet approvals` lists it); smaller ones run at once. The transfer runs on the `io`
pool (`workers.examples.bank`), and the invocation is journaled at `TOOLFLEET_DATABASE_URL`, where it
waits, so whichever process approves the call goes on with it. Its scripted model reads
"Transfer <amount> from <payer> to <payee>", asks for that transfer, and says how it went.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from orchestrator import (
    AiMessage,
    AiService,
    CeleryExecutor,
    Journal,
    ScriptedChatModel,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolExecutor,
    UserMessage,
    fail_invocation_unless_visible_to_llm,
    send_exception_message_to_llm,
)
from orchestrator.models import ChatModel, ChatRequest
from orchestrator.providers import ToolRunContext

__all__ = [
    "APPROVAL_THRESHOLD",
    "APPROVAL_TIMEOUT_S",
    "large_transfer",
    "teller",
    "teller_script",
    "transfer_asked",
]

APPROVAL_THRESHOLD = 1000
APPROVAL_TIMEOUT_S = 3600.0  # a transfer nobody approves within the hour does not run
HELP = "This teller makes transfers: ask it e.g. 'Transfer 1500 from Olena to Dmytro.'"
_TRANSFER = re.compile(r"Transfer (\d[\d,]*(?:\.\d+)?) from (\w+) to (\w+)")


def large_transfer(request: ToolExecutionRequest, context: ToolRunContext) -> bool:
    """The approval policy: a transfer of more than `APPROVAL_THRESHOLD` waits for a person (one whose
    amount cannot be read does too)."""
    if request.name != "transfer":
        return False
    try:
        amount = float(json.loads(request.arguments)["amount"])
    except (ValueError, TypeError, KeyError):
        return True
    return amount > APPROVAL_THRESHOLD


def transfer_asked(text: str) -> tuple[float, str, str] | None:
    """Amount, payer and payee of "Transfer <amount> from <payer> to <payee>" (None if it asks none)."""
    found = _TRANSFER.search(text)
    if found is None:
        return None
    amount = float(found[1].replace(",", ""))
    return (int(amount) if amount.is_integer() else amount), found[2], found[3]


def teller_script(request: ChatRequest) -> AiMessage | str:
    """The scripted model: the transfer the user asked for, then how it went."""
    last = request.messages[-1]
    if isinstance(last, ToolExecutionResultMessage):
        if last.is_error:
            return f"The transfer did not happen: {last.text}."
        return f"Done: {last.text}."
    asked = transfer_asked(last.text or "") if isinstance(last, UserMessage) else None
    if asked is None:
        return HELP
    amount, payer, payee = asked
    arguments = json.dumps({"payer": payer, "payee": payee, "amount": amount})
    return AiMessage(tool_execution_requests=[ToolExecutionRequest("call_transfer", "transfer", arguments)])


def teller(
    *,
    chat_model: ChatModel | None = None,
    executor: ToolExecutor | None = None,
    tools: Iterable[Any] | None = None,
    journal: Journal | None = None,
) -> AiService:
    """The teller: by default the scripted model, the live catalog's tools on the worker pools, and the
    journal at `TOOLFLEET_DATABASE_URL`; large transfers wait for approval, a failed batch is undone."""
    if chat_model is None:

        def script(request: ChatRequest) -> AiMessage | str:
            scripted.requests.clear()  # a long-running service keeps no record of every request
            return teller_script(request)

        scripted = ScriptedChatModel(script)
        chat_model = scripted
    return AiService(
        chat_model=chat_model,
        tools=tools,
        executor=executor or CeleryExecutor(),
        tool_arguments_error_handler=send_exception_message_to_llm(),
        tool_execution_error_handler=fail_invocation_unless_visible_to_llm(),
        compensate_on_tool_errors=True,
        journal=journal,
        approval_policy=large_transfer,
        approval_timeout_s=APPROVAL_TIMEOUT_S,
        name="bank",
    )
