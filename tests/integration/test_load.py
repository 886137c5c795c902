"""Load: 1,000 tool calls across 50 concurrent invocations on two worker pools, with sagas, one journal.

Real Redis (the shared test Redis), two real worker processes (`loadA`: threads x32, `loadB`: prefork
x2), one `CeleryExecutor` and one `Journal` for all invocations (the running PostgreSQL when it answers,
else a SQLite file). Each invocation is a `ScriptedChatModel` of 4 rounds x 5 calls; every 10th has a
failing call in its last round (on one pool or the other), so its earlier successes are compensated.
The tools count every run and every compensation in Redis by idempotency key (`load_tools.py`), so
"exactly once" is read back from counters the workers wrote, and compared with the journal, call by
call.

The failing calls run on the threads pool `loadA`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from orchestrator import AiMessage, AiService, CeleryExecutor, Result, ScriptedChatModel, ToolExecutionRequest
from orchestrator.handlers import RemoteToolError
from orchestrator.saga import rolled_back_text
from orchestrator.saga._journal_tables import turns as turns_table
from orchestrator.saga.journal import Journal
from orchestrator.saga.journal import compensations as compensations_table
from orchestrator.saga.journal import invocations as invocations_table
from orchestrator.saga.journal import tool_calls as tool_calls_table
from tests._postgres import in_ci, postgres_error, postgres_unreachable, postgres_url
from tests.integration import load_tools
from tests.integration.worker_processes import all_running, tool_worker
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOOLS_MODULE = "tests.integration.load_tools"

INVOCATIONS = 50
ROUNDS = 4
CALLS_PER_ROUND = 5
TOTAL_CALLS = INVOCATIONS * ROUNDS * CALLS_PER_ROUND
ACCOUNTS = 7
WALL_BUDGET_S = 45.0


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def load_pools(
    redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, WorkerProcess]]:
    """`loadA` (threads x32) and `loadB` (prefork x2), both serving `load_tools`."""
    logs = tmp_path_factory.mktemp("load-workers")
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"

    def start(pool: str, kind: str, concurrency: int) -> WorkerProcess:
        log_path, hostname = logs / f"{pool}.log", f"{pool}-{tag}@load"
        return tool_worker(
            redis_url,
            [pool],
            [TOOLS_MODULE],
            log_path,
            hostname,
            kind=kind,
            concurrency=concurrency,
            loglevel="WARNING",
        )

    starts = {
        load_tools.POOL_A: lambda: start(load_tools.POOL_A, "threads", 32),
        load_tools.POOL_B: lambda: start(load_tools.POOL_B, "prefork", 2),
    }
    with all_running(starts) as workers:
        yield workers


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[tuple[Journal, str]]:
    """One journal for every invocation: PostgreSQL if it answers (SQLite serialises writers), else SQLite;
    in CI PostgreSQL must answer (the test fails otherwise), so the figures CI shows are PostgreSQL's.

    Rows of this run are found (and deleted afterwards) by the unique service name the test gives.
    """
    name = f"load-{uuid.uuid4().hex[:12]}"
    postgres = postgres_url()
    error = postgres_error(postgres)
    if error is not None and in_ci():
        postgres_unreachable(postgres, error)
    url = postgres if error is None else f"sqlite:///{tmp_path / 'journal.db'}"
    chosen = Journal(url)
    try:
        yield chosen, name
    finally:
        with chosen.engine.begin() as tx:
            ids = sa.select(invocations_table.c.id).where(invocations_table.c.service_name == name)
            tx.execute(sa.delete(compensations_table).where(compensations_table.c.invocation_id.in_(ids)))
            tx.execute(sa.delete(tool_calls_table).where(tool_calls_table.c.invocation_id.in_(ids)))
            tx.execute(sa.delete(turns_table).where(turns_table.c.invocation_id.in_(ids)))
            tx.execute(sa.delete(invocations_table).where(invocations_table.c.service_name == name))
        chosen.engine.dispose()


# -- the plan of one invocation ---------------------------------------------------------------------


@dataclass
class Plan:
    """What invocation `index` asks for, and the side effects it should leave."""

    index: int
    ns: str
    rounds: list[list[ToolExecutionRequest]] = field(default_factory=list)
    failure: str = ""  # "", "visible" or "fatal": how the failing call of its last round fails
    failing_tool: str = "load_deposit"  # its second deposit (loadA), or its second hold (loadB)

    @property
    def message(self) -> str:
        return f"invocation {self.index}"

    @property
    def fails(self) -> bool:
        return bool(self.failure)

    @property
    def failing_call(self) -> ToolExecutionRequest:
        return self.rounds[-1][1 if self.failing_tool == "load_deposit" else 4]

    def error_text(self) -> str:
        """What the failing call's tool raised."""
        arguments = json.loads(self.failing_call.arguments)
        what, subject = (
            ("the bank", arguments["account"])
            if self.failing_tool == "load_deposit"
            else ("the warehouse", arguments["item"])
        )
        text = load_tools.REFUSED if self.failure == "visible" else load_tools.BROKEN
        return text.format(what=what, subject=subject)

    def calls(self) -> list[ToolExecutionRequest]:
        return [request for batch in self.rounds for request in batch]

    def owed(self) -> list[ToolExecutionRequest]:
        """The calls to compensate: every compensable success of a failing invocation."""
        if not self.fails:
            return []
        return [r for r in self.calls() if r.name != "load_lookup" and r is not self.failing_call]

    def script(self) -> list[AiMessage | str]:
        return [AiMessage(tool_execution_requests=batch) for batch in self.rounds] + [f"done {self.index}"]


def _request(call_id: str, name: str, **arguments: Any) -> ToolExecutionRequest:
    return ToolExecutionRequest(id=call_id, name=name, arguments=json.dumps({"call": call_id, **arguments}))


def plan(index: int, ns: str, failure: str | None = None, failing_tool: str | None = None) -> Plan:
    """4 rounds of 2 deposits and 1 lookup (loadA) and 2 holds (loadB). Unless told otherwise, every
    10th invocation has a call of its last round fail visibly — its second hold (prefork pool) or its
    second deposit (threads pool), alternately: the model is told, the saga compensates the
    invocation's 15 compensable successes, the invocation goes on to its answer."""
    if failure is None:
        failure = "visible" if index % 10 == 9 else ""
    if failing_tool is None:
        failing_tool = "load_hold" if (index // 10) % 2 == 0 else "load_deposit"
    result = Plan(index, ns, failure=failure, failing_tool=failing_tool)
    for r in range(ROUNDS):
        prefix = f"i{index}r{r}c"
        last = failure and r == ROUNDS - 1
        deposit_fails = {"fail": failure} if last and failing_tool == "load_deposit" else {}
        hold_fails = {"fail": failure} if last and failing_tool == "load_hold" else {}
        result.rounds.append(
            [
                _request(
                    f"{prefix}0",
                    "load_deposit",
                    ns=ns,
                    account=f"acct-{index % ACCOUNTS}",
                    amount=1 + (index + r) % 9,
                ),
                _request(
                    f"{prefix}1",
                    "load_deposit",
                    ns=ns,
                    account=f"acct-{(index + r + 1) % ACCOUNTS}",
                    amount=10 + (3 * index + r) % 17,
                    **deposit_fails,
                ),
                _request(f"{prefix}2", "load_lookup", ns=ns, account=f"acct-{(index + 2) % ACCOUNTS}"),
                _request(f"{prefix}3", "load_hold", ns=ns, item=f"item-{index}-{r}-a"),
                _request(f"{prefix}4", "load_hold", ns=ns, item=f"item-{index}-{r}-b", **hold_fails),
            ]
        )
    return result


# -- running and checking ---------------------------------------------------------------------------


def run_concurrently(
    plans: list[Plan], settings: Settings, log: Journal, name: str
) -> tuple[list[Result | BaseException], float]:
    """Every plan as one `achat` of its own service (own model), all at once; one executor, one journal."""
    executor = CeleryExecutor(settings=settings)
    services = [
        AiService(
            chat_model=ScriptedChatModel(p.script()),
            tools=[load_tools.tools],
            executor=executor,
            compensate_on_tool_errors=True,
            journal=log,
            name=name,
        )
        for p in plans
    ]

    async def run_all() -> list[Result | BaseException]:
        return await asyncio.gather(
            *(service.achat(p.message) for service, p in zip(services, plans, strict=True)),
            return_exceptions=True,
        )

    started = time.monotonic()
    try:
        outcomes = asyncio.run(run_all())
    finally:
        executor.close()
    return outcomes, time.monotonic() - started


def check_answers(plans: list[Plan], outcomes: list[Result | BaseException]) -> None:
    """Plain and visibly failing invocations answered (the latter rolled back); fatal ones raised."""
    for p, outcome in zip(plans, outcomes, strict=True):
        if p.failure == "fatal":
            assert isinstance(outcome, RemoteToolError), (p.index, outcome)
            assert p.error_text() in str(outcome)
            continue
        assert isinstance(outcome, Result), (p.index, repr(outcome))
        assert outcome.content == f"done {p.index}"
        executions = {e.request.id: e for e in outcome.tool_executions}
        assert [e.request.id for e in outcome.tool_executions] == [r.id for r in p.calls()]
        owed = {r.id for r in p.owed()}
        for request in p.calls():
            execution = executions[request.id]
            if p.fails and request is p.failing_call:
                expected = (p.error_text(), True, "execution_error")
            elif request.id in owed:
                expected = (rolled_back_text(request.name, p.failing_tool), False, "rolled_back")
            else:
                expected = (execution.result, False, "success")
            assert (execution.result, execution.has_failed, execution.status) == expected, (
                p.index,
                request.id,
            )


@dataclass
class Logged:
    """This run's rows of the journal."""

    invocations: list[Any]
    calls: list[Any]
    compensations: list[Any]


def read_journal(log: Journal, name: str) -> Logged:
    with log.engine.connect() as connection:
        invocations = (
            connection.execute(sa.select(invocations_table).where(invocations_table.c.service_name == name))
            .mappings()
            .all()
        )
        ids = [row["id"] for row in invocations]
        calls = (
            connection.execute(sa.select(tool_calls_table).where(tool_calls_table.c.invocation_id.in_(ids)))
            .mappings()
            .all()
        )
        compensations = (
            connection.execute(
                sa.select(compensations_table).where(compensations_table.c.invocation_id.in_(ids))
            )
            .mappings()
            .all()
        )
    return Logged(list(invocations), list(calls), list(compensations))


def check_journal(plans: list[Plan], logged: Logged) -> set[str]:
    """Every call logged once, in the state its plan says, every compensation recorded and succeeded;
    returns the idempotency keys of the calls that were compensated."""
    assert len(logged.invocations) == len(plans)
    total = sum(len(p.calls()) for p in plans)
    assert len(logged.calls) == total, f"{len(logged.calls)} tool_calls rows for {total} calls"
    by_message = {row["user_message"]: row for row in logged.invocations}
    by_invocation: dict[str, dict[str, Any]] = {}
    for row in logged.calls:
        by_invocation.setdefault(row["invocation_id"], {})[row["call_id"]] = row
    compensated: set[str] = set()
    for p in plans:
        record = by_message[p.message]
        assert record["state"] == ("failed" if p.failure == "fatal" else "succeeded"), (p.index, dict(record))
        rows = by_invocation[record["id"]]
        assert sorted(rows) == sorted(r.id for r in p.calls()), p.index
        owed = {r.id for r in p.owed()}
        for request in p.calls():
            row = rows[request.id]
            assert row["idempotency_key"] == f"{record['id']}:{request.id}"
            if p.fails and request is p.failing_call:
                expected = ("failed", "execution_error")
            elif request.id in owed:
                expected = ("compensated", "success")
                compensated.add(row["idempotency_key"])
            else:
                expected = ("succeeded", "success")
            assert (row["state"], row["outcome"]) == expected, (p.index, request.id, dict(row))
    calls_by_row = {row["id"]: row for row in logged.calls}
    assert len(logged.compensations) == len(compensated) == sum(len(p.owed()) for p in plans)
    for row in logged.compensations:
        assert (row["state"], row["attempts"], row["error"]) == ("succeeded", 1, None), dict(row)
    assert {calls_by_row[row["tool_call_id"]]["idempotency_key"] for row in logged.compensations} == (
        compensated
    )
    return compensated


def check_side_effects(
    plans: list[Plan], logged: Logged, compensated: set[str], text_client: redis.Redis, ns: str
) -> None:
    """The workers' counters: each call ran once, each compensated call was undone once; the balances
    and holdings are those of the invocations that were not rolled back."""

    def counts(what: str) -> dict[str, int]:
        return {key: int(value) for key, value in text_client.hgetall(load_tools.ns_key(ns, what)).items()}

    runs = counts("runs")
    comps = counts("comps")
    assert set(runs) == {row["idempotency_key"] for row in logged.calls}
    assert [key for key, value in runs.items() if value != 1] == [], "calls that ran more than once"
    assert set(comps) == compensated
    assert [key for key, value in comps.items() if value != 1] == [], "calls undone more than once"
    balances: Counter[str] = Counter()
    held: set[str] = set()
    for p in plans:
        if p.fails:
            continue
        for request in p.calls():
            arguments = json.loads(request.arguments)
            if request.name == "load_deposit":
                balances[arguments["account"]] += arguments["amount"]
            elif request.name == "load_hold":
                held.add(arguments["item"])
    actual = counts("balances")
    assert {k: v for k, v in actual.items() if v} == dict(balances)
    assert set(text_client.smembers(load_tools.ns_key(ns, "held"))) == held


@dataclass
class LoadRun:
    """What one test runs its invocations with: the settings of its one executor, the journal every
    invocation writes to under the service name `name`, and the namespace of the tools' counters."""

    settings: Settings
    journal: Journal
    name: str
    client: redis.Redis
    ns: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def run(self, plans: list[Plan]) -> tuple[list[Result | BaseException], float]:
        return run_concurrently(plans, self.settings, self.journal, self.name)

    def logged(self) -> Logged:
        return read_journal(self.journal, self.name)


@pytest.fixture
def load_run(
    load_pools: dict[str, WorkerProcess],
    settings: Settings,
    journal: tuple[Journal, str],
    text_client: redis.Redis,
) -> LoadRun:
    """A test's run on the load pools."""
    log, name = journal
    return LoadRun(settings, log, name, text_client)


# -- the tests -------------------------------------------------------------------------------------


def test_thousand_calls_across_fifty_concurrent_invocations_are_each_run_and_undone_exactly_once(
    load_run: LoadRun,
) -> None:
    # Given: 50 invocations of 4 rounds x 5 calls on pools loadA and loadB, sharing one executor and
    # one journal; invocations 9, 29, 49 have a hold (prefork pool) fail in their last round, 19 and
    # 39 a deposit (threads pool), so each of those 5 owes 15 compensations (lookups are not
    # compensable)
    plans = [plan(index, load_run.ns) for index in range(INVOCATIONS)]
    assert sum(len(p.calls()) for p in plans) == TOTAL_CALLS
    owed = sum(len(p.owed()) for p in plans)
    assert owed == 75

    # When: all 50 run at once
    outcomes, wall_s = load_run.run(plans)
    backend = load_run.journal.engine.url.get_backend_name()
    print(
        f"\nload: {TOTAL_CALLS} tool calls + {owed} compensations, {INVOCATIONS} concurrent invocations, "
        f"in {wall_s:.2f} s: {TOTAL_CALLS / wall_s:.0f} calls/s "
        f"({(TOTAL_CALLS + owed) / wall_s:.0f} tasks/s); journal {backend}"
    )

    # Then: every invocation answered, the 5 failing ones with their successes rolled back
    check_answers(plans, outcomes)
    assert wall_s < WALL_BUDGET_S, f"1,000 calls took {wall_s:.1f} s"

    # ... every call is in the journal, in the state its plan says: none lost, none left dispatched;
    # every compensation is recorded and succeeded at its first attempt
    logged = load_run.logged()
    compensated = check_journal(plans, logged)
    print(f"load: journal states {dict(Counter(row['state'] for row in logged.calls))}")

    # ... and the workers' own counters agree: none lost, none run twice, none undone twice
    check_side_effects(plans, logged, compensated, load_run.client, load_run.ns)


def test_a_call_whose_error_ends_the_invocation_is_logged_failed_and_its_saga_compensated(
    load_run: LoadRun,
) -> None:
    # Given: 3 concurrent invocations whose last round has a hold or a deposit failing with an error
    # the model is not shown (achat's default handler ends the invocation), and 2 plain ones
    plans = [
        plan(
            index,
            load_run.ns,
            failure="fatal" if index < 3 else "",
            failing_tool=("load_hold", "load_deposit")[index % 2],
        )
        for index in range(5)
    ]

    # When: they run at once
    outcomes, _ = load_run.run(plans)

    # Then: the failing ones raised the tool's error, their 15 successes each were undone once
    check_answers(plans, outcomes)
    logged = load_run.logged()
    check_side_effects(
        plans,
        logged,
        {r["idempotency_key"] for r in logged.calls if r["state"] == "compensated"},
        load_run.client,
        load_run.ns,
    )

    # ... and the journal holds every call in its state: the failed call as failed, not dispatched
    compensated = check_journal(plans, logged)
    assert len(compensated) == 45
