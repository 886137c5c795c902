"""`toolfleet demo`: the example tools as the model sees them, and calls run through an executor."""

from __future__ import annotations

import json
from typing import TextIO

from orchestrator.executors import LocalExecutor
from workers import ToolExecutionRequest, tool_specifications_from
from workers.examples import bank, math, travel, weather

_CALLS = [
    ToolExecutionRequest("call_1", "squareRoot", '{"x": 475695037565}'),
    ToolExecutionRequest("call_2", "add", '{"a": 2, "b": "3"}'),
    ToolExecutionRequest("call_3", "get_weather", '{"city": "London", "unit": "fahrenheit"}'),
    ToolExecutionRequest("call_4", "credit", '{"name": "Dmytro", "amount": 100}'),
    ToolExecutionRequest("call_5", "withdraw", '{"name": "Dmytro", "amount": 1000000}'),
    ToolExecutionRequest("call_6", "add", '{"a": 1.5, "b": 2}'),
    ToolExecutionRequest(
        "call_7", "book_flight", '{"origin": "Kyiv", "destination": "Rome", "day": "2026-12-24"}'
    ),
]


def run_demo(out: TextIO) -> int:
    """Print the example tools' specifications, then run a few calls in-process; returns an exit code."""
    sources: list[object] = [math.Calculator(), weather, bank.BankTools(), travel.TravelAgency()]
    out.write("== Tool specifications (what the model is shown)\n")
    for source in sources:
        for spec in tool_specifications_from(source):
            out.write(json.dumps(spec.to_dict(), ensure_ascii=False) + "\n")
    executor = LocalExecutor(tools=sources)
    out.write("\n== Calls run in-process by LocalExecutor\n")
    try:
        for request in _CALLS:
            outcome = executor.run(request)
            out.write(f"{request.name}({request.arguments}) -> [{outcome.kind.value}] {outcome.text}\n")
    finally:
        executor.close()
    return 0
