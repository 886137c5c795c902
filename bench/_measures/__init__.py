"""The measures of `python -m bench`, one module each, numbered as the table shows them.

A measure is an `async def measure_<name>(b: Bench) -> Measure`: it warms up, repeats (sides of a
comparison interleaved), and fills the `Measure` with its sides, CPU, rounds, details, headline
result and whether the target was met. To add one: a module here, a line in `MEASURES`, a place in
`RUN_ORDER`, a row in bench/README.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bench._context import Bench
from bench._measures.adoption import measure_adoption
from bench._measures.anchors import measure_anchors
from bench._measures.artifacts import measure_artifacts
from bench._measures.batch import measure_batch
from bench._measures.dbos_peer import measure_dbos_peer
from bench._measures.deadline import measure_deadline
from bench._measures.fairness import measure_fairness
from bench._measures.in_flight import measure_in_flight
from bench._measures.mcp_call import measure_mcp_call
from bench._measures.otel_absent import measure_otel_absent
from bench._measures.progress import measure_progress
from bench._measures.serve_journal import measure_serve_journal
from bench._measures.serve_overhead import measure_serve_overhead
from bench._measures.single_call import measure_single
from bench._measures.sleeps import measure_async_sleeps, measure_sleeps
from bench._measures.slots import measure_slots
from bench._measures.tracing import measure_tracing
from bench._timing import Measure

__all__ = ["MEASURES", "RUN_ORDER", "Runner", "measure_anchors"]

Runner = Callable[[Bench], Awaitable[Measure]]

# In report order.
MEASURES: dict[str, Runner] = {
    "1": measure_single,
    "2": measure_batch,
    "3": measure_deadline,
    "4": measure_sleeps,
    "5": measure_in_flight,
    "6": measure_serve_overhead,
    "7": measure_serve_journal,
    "8": measure_async_sleeps,
    "9": measure_progress,
    "10": measure_tracing,
    "11": measure_otel_absent,
    "12": measure_adoption,
    "13": measure_slots,
    "14": measure_fairness,
    "15": measure_mcp_call,
    "16": measure_dbos_peer,
    "17": measure_artifacts,
}
# `deadline` runs last: its abandoned calls occupy worker threads for 5 s.
RUN_ORDER = ["1", "2", "4", "8", "5", "6", "7", "9", "10", "11", "12", "13", "14", "15", "16", "17", "3"]
