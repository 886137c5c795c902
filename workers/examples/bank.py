"""A bank with compensable operations: the saga example, and the approval one (a `transfer` that
`workers.examples.teller` has a person approve when it is large)."""

from __future__ import annotations

import threading
from typing import Annotated

from workers import Param, ToolErrorVisibleToLlm, compensate_for, tool


class InsufficientFunds(ToolErrorVisibleToLlm, Exception):
    """The account holds less than the amount to withdraw."""


class BankTools:
    """Accounts held in memory; `credit` and `withdraw` can be undone."""

    def __init__(self, balances: dict[str, float] | None = None) -> None:
        self.balances: dict[str, float] = dict(
            balances if balances is not None else {"Mario": 1000.0, "Dmytro": 50.0, "Olena": 250000.0}
        )
        self._lock = threading.Lock()

    @tool("Credits money to a bank account", pool="io", timeout=10)
    def credit(self, name: Annotated[str, Param("account owner")], amount: float) -> str:
        with self._lock:
            self._account(name)
            self.balances[name] += amount
            return f"Credited {amount:g} to {name}; balance {self.balances[name]:g}"

    @compensate_for("credit")
    def uncredit(self, name: str, amount: float) -> None:
        with self._lock:
            self.balances[name] -= amount

    @tool("Withdraws money from a bank account", pool="io", timeout=10)
    def withdraw(self, name: Annotated[str, Param("account owner")], amount: float) -> str:
        with self._lock:
            self._account(name)
            if self.balances[name] < amount:
                raise InsufficientFunds(f"{name} has insufficient funds to withdraw {amount:g}")
            self.balances[name] -= amount
            return f"Withdrew {amount:g} from {name}; balance {self.balances[name]:g}"

    @compensate_for("withdraw")
    def unwithdraw(self, name: str, amount: float) -> None:
        with self._lock:
            self.balances[name] += amount

    @tool("Transfers money from one bank account to another", pool="io", timeout=10)
    def transfer(
        self,
        payer: Annotated[str, Param("the account the money leaves")],
        payee: Annotated[str, Param("the account the money goes to")],
        amount: float,
    ) -> str:
        with self._lock:
            self._account(payee)
            if self._account(payer) < amount:
                raise InsufficientFunds(f"{payer} has insufficient funds to transfer {amount:g}")
            self.balances[payer] -= amount
            self.balances[payee] += amount
            return (
                f"Transferred {amount:g} from {payer} to {payee}; balances {payer} "
                f"{self.balances[payer]:g}, {payee} {self.balances[payee]:g}"
            )

    @compensate_for("transfer")
    def untransfer(self, payer: str, payee: str, amount: float) -> None:
        with self._lock:
            self.balances[payee] -= amount
            self.balances[payer] += amount

    @tool("Returns the balance of a bank account", pool="io")
    def balance(self, name: str) -> float:
        with self._lock:
            return self._account(name)

    def _account(self, name: str) -> float:
        if name not in self.balances:
            raise ToolErrorVisibleToLlm.from_message(f"No account belongs to {name}")
        return self.balances[name]


bank = BankTools()
