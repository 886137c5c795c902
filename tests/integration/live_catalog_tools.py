"""Tools of two pools, `lc_first` and `lc_second`, served by the workers of `test_live_catalog.py`:
each worker serves one pool, so a pool's tools are in the catalog exactly while its worker lives."""

from __future__ import annotations

from workers import tool

FIRST = "lc_first"
SECOND = "lc_second"


@tool("Answers from the first pool", pool=FIRST, timeout=10)
def first_answer(question: str) -> str:
    return f"first: {question}"


@tool("Answers from the second pool", pool=SECOND, timeout=10)
def second_answer(question: str) -> str:
    return f"second: {question}"
