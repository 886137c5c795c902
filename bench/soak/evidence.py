"""What the soak reads once its load and faults are over, to check it: the ledger, the clients'
records, the model's record, and — as any operator could read them — the journal's rows, the
conversations' memory and every invocation's event stream."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa

from bench.soak import ledger
from orchestrator.messages import UserMessage, messages_from_json

__all__ = ["Evidence", "gather", "read_requests"]

TERMINAL_STATES = ("succeeded", "failed", "cancelled")


@dataclass
class Evidence:
    ledger: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    told_ok: set[str] = field(default_factory=set)
    invocations: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[dict[str, Any]] = field(default_factory=list)
    compensations: dict[int, dict[str, Any]] = field(default_factory=dict)
    approvals: list[dict[str, Any]] = field(default_factory=list)
    memory: dict[str, list[str]] = field(default_factory=dict)  # conversation id -> its user messages
    events: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)


def read_requests(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def unsettled(database_url: str) -> int:
    """How many invocations are not in a terminal state yet."""
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            query = (
                "SELECT count(*) FROM toolfleet_invocations"
                " WHERE state NOT IN ('succeeded', 'failed', 'cancelled')"
            )
            return int(connection.execute(sa.text(query)).scalar_one())
    finally:
        engine.dispose()


def gather(
    database_url: str, redis_client: redis.Redis, ledger_path: Path, requests_path: Path, told_ok: set[str]
) -> Evidence:
    evidence = Evidence(ledger.read(ledger_path), read_requests(requests_path), set(told_ok))
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:

            def rows(query: str) -> list[dict[str, Any]]:
                return [dict(row._mapping) for row in connection.execute(sa.text(query))]

            for row in rows(
                "SELECT id, memory_id, user_message, state, error, final_answer FROM toolfleet_invocations"
            ):
                evidence.invocations[row["id"]] = row
            evidence.calls = rows(
                "SELECT id, invocation_id, call_id, tool, state, outcome, idempotency_key, worker"
                " FROM toolfleet_tool_calls"
            )
            for row in rows("SELECT tool_call_id, invocation_id, tool, state FROM toolfleet_compensations"):
                evidence.compensations[row["tool_call_id"]] = row
            evidence.approvals = rows("SELECT invocation_id, call_id, tool, state FROM toolfleet_approvals")
            for row in rows("SELECT memory_id, messages FROM toolfleet_chat_memory"):
                messages = messages_from_json(json.loads(row["messages"]))
                conversation = str(row["memory_id"]).split("/", 1)[-1]
                evidence.memory[conversation] = [
                    m.single_text for m in messages if isinstance(m, UserMessage)
                ]
    finally:
        engine.dispose()
    for invocation_id in evidence.invocations:
        entries: Any = redis_client.xrange(f"toolfleet:events:{invocation_id}")
        evidence.events[invocation_id] = [
            (entry_id.decode(), json.loads(fields[b"event"])) for entry_id, fields in entries
        ]
    return evidence
