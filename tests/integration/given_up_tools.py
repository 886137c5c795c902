"""Tools of the given-up-call tests: one keeps its worker (one thread, or one prefork child) busy, the
others wait behind it. What ran is in the test Redis under `givenup:<ns>:*`, `ns` an argument:
`busy` set when the busy call starts, `free` when it ends, `ran` the names of the waiting calls that ran.
"""

from __future__ import annotations

import time

from tests.integration.side_effects import process_client
from workers import tool

THREADS = "givenup-threads"
PREFORK = "givenup-prefork"


def _occupy(ns: str, seconds: float) -> str:
    client = process_client()
    client.set(f"givenup:{ns}:busy", 1)
    time.sleep(seconds)
    client.set(f"givenup:{ns}:free", 1)
    return "done"


def _waited(ns: str, name: str) -> str:
    process_client().rpush(f"givenup:{ns}:ran", name)
    return f"ran {name}"


@tool("Keeps the threads worker busy", pool=THREADS, timeout=30)
def occupy_threads(ns: str, seconds: float) -> str:
    return _occupy(ns, seconds)


@tool("Waits behind the busy threads call", pool=THREADS, timeout=30)
def wait_threads(ns: str, name: str) -> str:
    return _waited(ns, name)


@tool("Keeps the prefork worker busy", pool=PREFORK, timeout=30)
def occupy_prefork(ns: str, seconds: float) -> str:
    return _occupy(ns, seconds)


@tool("Waits behind the busy prefork call", pool=PREFORK, timeout=30)
def wait_prefork(ns: str, name: str) -> str:
    return _waited(ns, name)
