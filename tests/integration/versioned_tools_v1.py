"""Version 1 of tool `vt_lookup` on pool `versioned`: served by the old build of `test_versioned_tools.py`."""

from __future__ import annotations

from workers import tool

POOL = "versioned"


@tool("Looks up a key", pool=POOL, timeout=10)
def vt_lookup(key: str) -> str:
    return f"v1:{key}"
