"""Tools for the Flower test, on pool `flowerpool`: one that succeeds, one that fails, one compensation."""

from __future__ import annotations

from workers import ToolErrorVisibleToLlm, compensate_for, tool


class Declined(ToolErrorVisibleToLlm, Exception):
    """The card was declined."""


class Payments:
    @tool("Charges a card", pool="flowerpool", timeout=10)
    def charge(self, card: str, amount: float) -> str:
        if card == "declined":
            raise Declined(f"card {card} declined for {amount:g}")
        return f"charged {amount:g} to {card}"

    @compensate_for("charge")
    def refund(self, card: str, amount: float) -> None:
        return None


payments = Payments()
