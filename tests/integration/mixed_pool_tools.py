"""The tools of pool `mixpool`, served whole by one worker of `test_mixed_pools.py`."""

from __future__ import annotations

from workers import tool

POOL = "mixpool"


@tool("Echoes its text", pool=POOL, timeout=10)
def mix_echo(text: str) -> str:
    return text


@tool("Shouts its text", pool=POOL, timeout=10)
def mix_shout(text: str) -> str:
    return text.upper()
