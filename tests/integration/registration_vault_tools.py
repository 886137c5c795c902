"""A module holding only a tool class whose constructor needs arguments: nothing a worker can serve."""

from __future__ import annotations

from workers import tool


class OnlyVault:
    def __init__(self, secret: str) -> None:
        self.secret = secret

    @tool("Opens the vault", pool="regvault", timeout=10)
    def only_open_vault(self) -> str:
        return self.secret
