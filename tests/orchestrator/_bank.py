"""A bank of undoable tools for the saga tests, and one invocation that compensates on tool errors."""

from __future__ import annotations

from orchestrator import AiMessage, AiService, LocalExecutor, Result, ScriptedChatModel
from orchestrator.saga.journal import Journal
from tests.orchestrator._service import call
from workers import ToolErrorVisibleToLlm, compensate_for, tool

CLOSED = "the deposit desk is closed"


class Bank:
    """Deposits and credits that can be undone, and a payment that is always declined.

    `balance` follows them and their undoing; deposits are undone only while the desk is `open`.
    """

    def __init__(self, *, open: bool = True) -> None:
        self.balance = 0
        self.open = open
        self.undone: list[str] = []

    @tool("Deposits money")
    def deposit(self, amount: int, memo: str = "") -> str:
        self.balance += amount
        return f"Deposited {amount}"

    @compensate_for("deposit")
    def undeposit(self, amount: int, memo: str = "") -> None:
        if not self.open:
            raise RuntimeError(CLOSED)
        self.balance -= amount
        self.undone.append(f"deposit {amount}")

    @tool("Credits money")
    def credit(self, amount: int) -> str:
        self.balance += amount
        return f"Credited {amount}"

    @compensate_for("credit")
    def uncredit(self, amount: int) -> None:
        self.balance -= amount
        self.undone.append(f"credit {amount}")

    @tool("A payment that is always declined")
    def pay(self) -> str:
        raise ToolErrorVisibleToLlm.from_message("declined")


def compensating_service(
    tools: object, executor: LocalExecutor, journal: Journal, script: list[AiMessage | str]
) -> AiService:
    """A service of `tools` (an object's, like a `Bank`), the model following `script`, compensating on
    tool errors and journaled in `journal`."""
    return AiService(
        chat_model=ScriptedChatModel(script),
        tools=[tools],
        executor=executor,
        compensate_on_tool_errors=True,
        journal=journal,
    )


def chat_compensating(
    bank: Bank, executor: LocalExecutor, journal: Journal, script: list[AiMessage | str], message: str
) -> Result:
    """One invocation of `message` on `bank`'s tools (`compensating_service`)."""
    return compensating_service(bank, executor, journal, script).chat(message)


def invocation_of(journal: Journal, script: list[AiMessage | str], message: str) -> str:
    """The id of one such invocation on a fresh `Bank`, without retrying a compensation."""
    executor = LocalExecutor(compensation_retries=0)
    try:
        result = chat_compensating(Bank(), executor, journal, script, message)
    finally:
        executor.close()
    assert result.invocation_id is not None
    return result.invocation_id


ROLLED_BACK: list[AiMessage | str] = [
    AiMessage(tool_execution_requests=[call("deposit", "d1", amount=40)]),
    AiMessage(tool_execution_requests=[call("credit", "c1", amount=5), call("pay", "p1")]),
    "The payment was declined; nothing was kept.",
]
"""The model's script of a saga rolled back: turn 1 deposits, turn 2 credits and pays (declined)."""
