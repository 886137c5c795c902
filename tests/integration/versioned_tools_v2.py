"""Version 2 of tool `vt_lookup` on pool `versioned` (a parameter added, a longer timeout): served by the
new build of `test_versioned_tools.py`, side by side with version 1."""

from __future__ import annotations

from workers import tool

POOL = "versioned"


@tool("Looks up a key, in a namespace", pool=POOL, timeout=20)
def vt_lookup(key: str, namespace: str = "main") -> str:
    return f"v2:{namespace}:{key}"
