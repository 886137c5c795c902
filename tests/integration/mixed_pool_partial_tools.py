"""Part of pool `mixpool`'s tools (`mix_echo` only): a worker serving this module alone lacks `mix_shout`."""

from __future__ import annotations

from tests.integration.mixed_pool_tools import POOL, mix_echo

__all__ = ["POOL", "mix_echo"]
