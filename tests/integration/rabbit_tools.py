"""Tools of the `rabbit` pool: served by a worker whose broker is RabbitMQ (results still in Redis).

`echo_rabbit` and `fail_rabbit` behave exactly as `echo` and `fail` of `tools.py`, so their outcomes
can be compared with the Redis-brokered ones.
"""

from __future__ import annotations

import time

from workers import tool


@tool("Echoes its text", pool="rabbit", timeout=10)
def echo_rabbit(text: str, times: int = 1) -> str:
    return " ".join([text] * times)


@tool("Fails with a ValueError", pool="rabbit", timeout=10)
def fail_rabbit(how: str) -> str:
    raise ValueError(f"broken: {how}")


@tool("Sleeps, then answers", pool="rabbit", timeout=5)
def slow_rabbit(seconds: float) -> str:
    time.sleep(seconds)
    return f"slept {seconds}"
