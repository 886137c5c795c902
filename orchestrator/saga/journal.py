"""The SQL log of invocations, tool calls and compensations (SQLAlchemy 2; SQLite by default).

Every saga step is written here before and after it happens, so an orchestrator that dies mid-saga
leaves enough for `toolfleet recover` to finish its work, and operators can read what ran where.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, RowMapping

from orchestrator._database_url import database_engine
from orchestrator.saga._journal_approvals import ApprovalRecord, JournalApprovals, WaitingCall, arguments_hash
from orchestrator.saga._journal_checkpoints import Checkpoint, JournalCheckpoints
from orchestrator.saga._journal_crypto import JournalCipher
from orchestrator.saga._journal_records import (
    CallRecord,
    CompensationRecord,
    InvocationRecord,
    call_record,
    compensation_record,
    invocation_record,
    utc_now,
)
from orchestrator.saga._journal_tables import compensations as compensations
from orchestrator.saga._journal_tables import invocations as invocations
from orchestrator.saga._journal_tables import owner_id
from orchestrator.saga._journal_tables import tool_calls as tool_calls
from orchestrator.saga._journal_writes import Intent as Intent
from orchestrator.saga._journal_writes import (
    Write,
    Written,
    heartbeat_write,
    outcome_write,
    start_write,
    state_write,
    written,
)
from orchestrator.saga.states import ApprovalState, CallState, CompensationState, InvocationState
from workers.calls.invocation import InvocationContext
from workers.protocol import ToolOutcome
from workers.settings import Settings

__all__ = [
    "ApprovalRecord",
    "ApprovalState",
    "CallRecord",
    "CallState",
    "Checkpoint",
    "CompensationRecord",
    "CompensationState",
    "Intent",
    "InvocationRecord",
    "InvocationState",
    "Journal",
    "WaitingCall",
    "arguments_hash",
    "owner_id",
]

# The states of an invocation whose owner may have stopped: recovery may take it over.
_UNFINISHED = (InvocationState.RUNNING.value, InvocationState.COMPENSATING.value)
_T = TypeVar("_T")


class Journal(JournalApprovals, JournalCheckpoints):
    """Reads and writes the saga log (and, through `JournalApprovals` and `JournalCheckpoints`, the
    approvals and the checkpoints an invocation is carried on from).
    `Journal(url)` brings its schema up to date (`ensure_schema`)."""

    def __init__(
        self,
        url_or_engine: str | Engine = "sqlite:///toolfleet.db",
        *,
        keys: str | Sequence[str] | None = None,
    ) -> None:
        """`keys`: Fernet keys sealing the invocation parameters; callers holding a `Settings` pass its
        `journal_keys`, and without them the settings are read from the environment once, here."""
        self._cipher = JournalCipher(Settings.from_env().journal_keys if keys is None else keys)
        self.engine = database_engine(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
        self._connection: Connection | None = None
        from orchestrator.saga.migrations import ensure_schema  # Alembic loads only for a SQL journal

        ensure_schema(self.engine)

    @classmethod
    def on_connection(cls, connection: Connection, cipher: JournalCipher) -> Journal:
        """A journal whose every read and write goes through `connection`, inside the transaction its
        owner opened (and commits or rolls back): what `run` and `AsyncJournal.run` hand their
        function. The schema is taken as ensured by whoever built the connection's journal."""
        journal = cls.__new__(cls)  # no engine of its own to open, no schema to ensure
        journal._cipher = cipher
        journal.engine = connection.engine
        journal._connection = connection
        return journal

    @property
    def cipher(self) -> JournalCipher:
        """What seals and opens the invocation parameters (an `AsyncJournal` over this one shares it)."""
        return self._cipher

    async def run(self, fn: Callable[[Journal], _T]) -> _T:
        """`fn(journal)` in one transaction, on this journal's engine, inline: the `JournalRunner`
        interface of `AsyncJournal`, for callers (the CLI, scripts, tests) that may block."""
        if self._connection is not None:
            return fn(self)
        with self.engine.begin() as connection:
            return fn(Journal.on_connection(connection, self._cipher))

    async def execute(self, write: Write) -> Written:
        """One statement of the journal's hot path (`_journal_writes`), in autocommit (in the owner's
        transaction when bound to a connection): the `JournalRunner` interface of `AsyncJournal`."""
        return self.execute_now(write)

    def execute_now(self, write: Write) -> Written:
        """`execute`, blocking."""
        if self._connection is not None:
            return written(self._connection.execute(write.statement, write.params))
        with self.engine.connect() as connection:
            autocommit = connection.execution_options(isolation_level="AUTOCOMMIT")
            return written(autocommit.execute(write.statement, write.params))

    @property
    def backend(self) -> str:
        """The database's kind, as SQLAlchemy names it: `postgresql`, `sqlite`."""
        return self.engine.url.get_backend_name()

    def ping(self) -> None:
        """One round trip to the database (readiness checks)."""
        with self._read() as connection:
            connection.execute(sa.text("SELECT 1"))

    def select(self, query: sa.Select[Any]) -> list[RowMapping]:
        """The rows of `query`, a SELECT over the journal's tables (views that read across them)."""
        with self._read() as connection:
            return list(connection.execute(query).mappings())

    def _tx(self) -> AbstractContextManager[Connection]:
        return self._on(self.engine.begin)  # committed at the end of the block

    def _read(self) -> AbstractContextManager[Connection]:
        return self._on(self.engine.connect)

    @contextmanager
    def _on(self, opened: Callable[[], AbstractContextManager[Connection]]) -> Iterator[Connection]:
        """The connection this journal is bound to (its owner ends the transaction), else `opened()`."""
        if self._connection is not None:
            yield self._connection
            return
        with opened() as connection:
            yield connection

    # -- invocations ------------------------------------------------------------------------------

    def start_invocation(
        self,
        context: InvocationContext,
        invocation_json: dict[str, Any],
        *,
        opening: dict[str, Any] | None = None,
    ) -> None:
        """The invocation's row; with `opening` (the conversation it starts from, JSON), its
        checkpoint begins: another process may carry it on if this one dies."""
        self.execute_now(start_write(self._cipher, context, invocation_json, opening))

    def set_invocation_state(
        self,
        invocation_id: str,
        state: InvocationState | str,
        error: str | None = None,
        *,
        final_answer: str | None = None,
        owner: str | None = None,
        expected: InvocationState | None = None,
    ) -> bool:
        """Write the invocation's state (at its end, its error or final answer), only while `owner`
        owns it (no recoverer took it over) and it is in state `expected`, if given; whether written."""
        write = state_write(invocation_id, InvocationState(state), error, final_answer, owner, expected)
        return bool(self.execute_now(write).rowcount)

    def heartbeat(self, invocation_id: str, *, owner: str | None = None) -> None:
        """The invocation's owner is alive; with `owner`, only while the invocation is still its."""
        self.execute_now(heartbeat_write(invocation_id, owner))

    def claim(self, invocation_id: str, stale_before: datetime) -> bool:
        """Take over an unfinished invocation whose owner stopped beating; atomic across recoverers."""
        with self._tx() as tx:
            claimed = tx.execute(
                sa.update(invocations)
                .where(
                    invocations.c.id == invocation_id,
                    invocations.c.state.in_(_UNFINISHED),
                    invocations.c.heartbeat_at <= stale_before,
                )
                # undone from now on: its checkpoint is dropped, so that nobody carries it on
                .values(
                    owner=owner_id(),
                    heartbeat_at=utc_now(),
                    state=InvocationState.COMPENSATING.value,
                    opening=None,
                )
            ).rowcount
        return bool(claimed)

    # -- tool calls -------------------------------------------------------------------------------

    def record_outcome(
        self,
        call_row: int,
        outcome: ToolOutcome,
        result_text: str,
        *,
        progress: dict[str, Any] | None = None,
    ) -> None:
        """Write a call's outcome, with the last progress its tool reported (JSON), if any."""
        self.execute_now(outcome_write(call_row, outcome, result_text, progress))

    def set_call_state(self, call_row: int, state: CallState | str) -> None:
        value = CallState(state).value
        with self._tx() as tx:
            tx.execute(sa.update(tool_calls).where(tool_calls.c.id == call_row).values(state=value))

    def abandon_in_flight(self, call_rows: Sequence[int]) -> None:
        """Mark abandoned those of `call_rows` still `dispatched` (their outcome never journaled). The
        rows are locked in their order, as the outcomes written together meanwhile lock them (one
        commit of several, `_fast_writes`): neither waits for the other while holding what it needs."""
        in_flight = (
            sa.select(tool_calls.c.id)
            .where(tool_calls.c.id.in_(list(call_rows)), tool_calls.c.state == CallState.DISPATCHED.value)
            .order_by(tool_calls.c.id)
            .with_for_update()
        )
        with self._tx() as tx:
            tx.execute(
                sa.update(tool_calls)
                .where(tool_calls.c.id.in_(in_flight.scalar_subquery()))
                .values(state=CallState.ABANDONED.value)
            )

    def calls(self, invocation_id: str) -> list[CallRecord]:
        with self._read() as connection:
            rows = connection.execute(
                sa.select(tool_calls)
                .where(tool_calls.c.invocation_id == invocation_id)
                .order_by(tool_calls.c.sequence)
            ).mappings()
            return [call_record(row) for row in rows]

    def abandoned_calls(self, invocation_id: str | None = None) -> list[CallRecord]:
        """Compensable calls abandoned at their deadline: if they finished later, their worker undid them."""
        query = sa.select(tool_calls).where(
            tool_calls.c.state == CallState.ABANDONED.value, tool_calls.c.compensable
        )
        if invocation_id is not None:
            query = query.where(tool_calls.c.invocation_id == invocation_id)
        with self._read() as connection:
            rows = connection.execute(query.order_by(tool_calls.c.id)).mappings()
            return [call_record(row) for row in rows]

    # -- compensations ----------------------------------------------------------------------------

    def plan_compensations(self, invocation_id: str, calls: Sequence[CallRecord], reason: str) -> None:
        """Write one pending compensation per call (idempotent: a planned one is kept)."""
        now = utc_now()
        with self._tx() as tx:
            planned = set(
                tx.execute(
                    sa.select(compensations.c.tool_call_id).where(
                        compensations.c.invocation_id == invocation_id
                    )
                ).scalars()
            )
            for call in calls:
                if call.id in planned:
                    continue
                tx.execute(
                    sa.insert(compensations).values(
                        invocation_id=invocation_id,
                        tool_call_id=call.id,
                        tool=call.tool,
                        state=CompensationState.PENDING.value,
                        attempts=0,
                        reason=reason,
                        created_at=now,
                        updated_at=now,
                    )
                )

    def compensation_running(self, call_row: int, task_id: str | None) -> None:
        with self._tx() as tx:
            tx.execute(
                sa.update(compensations)
                .where(compensations.c.tool_call_id == call_row)
                .values(
                    state=CompensationState.RUNNING.value,
                    task_id=task_id,
                    attempts=compensations.c.attempts + 1,
                    updated_at=utc_now(),
                )
            )

    def compensation_finished(self, call_row: int, ok: bool, error: str | None = None) -> None:
        with self._tx() as tx:
            tx.execute(
                sa.update(compensations)
                .where(compensations.c.tool_call_id == call_row)
                .values(
                    state=(CompensationState.SUCCEEDED if ok else CompensationState.FAILED).value,
                    error=error,
                    updated_at=utc_now(),
                )
            )
            tx.execute(
                sa.update(tool_calls)
                .where(tool_calls.c.id == call_row)
                .values(state=(CallState.COMPENSATED if ok else CallState.COMPENSATION_FAILED).value)
            )

    def compensations(
        self, invocation_id: str | None = None, *, state: CompensationState | str | None = None
    ) -> list[CompensationRecord]:
        query = sa.select(compensations).order_by(compensations.c.id)
        if invocation_id is not None:
            query = query.where(compensations.c.invocation_id == invocation_id)
        if state is not None:
            query = query.where(compensations.c.state == CompensationState(state).value)
        with self._read() as connection:
            return [compensation_record(row) for row in connection.execute(query).mappings()]

    # -- reading ----------------------------------------------------------------------------------

    def invocation(self, invocation_id: str) -> InvocationRecord | None:
        with self._read() as connection:
            row = (
                connection.execute(sa.select(invocations).where(invocations.c.id == invocation_id))
                .mappings()
                .first()
            )
        return invocation_record(row, self._cipher) if row is not None else None

    def invocation_ids(self, prefix: str, *, limit: int = 10) -> list[str]:
        """The ids that start with `prefix`, at most `limit` of them, in order."""
        query = (
            sa.select(invocations.c.id)
            .where(invocations.c.id.startswith(prefix, autoescape=True))
            .order_by(invocations.c.id)
            .limit(limit)
        )
        with self._read() as connection:
            return list(connection.execute(query).scalars())

    def invocations(
        self, *, limit: int = 50, state: InvocationState | str | None = None, tenant: str | None = None
    ) -> list[InvocationRecord]:
        """The latest invocations, newest first: in one state, of one tenant, if given."""
        query = sa.select(invocations).order_by(invocations.c.started_at.desc()).limit(limit)
        if state is not None:
            query = query.where(invocations.c.state == InvocationState(state).value)
        if tenant is not None:
            query = query.where(invocations.c.tenant == tenant)
        with self._read() as connection:
            return [invocation_record(row, self._cipher) for row in connection.execute(query).mappings()]

    def unfinished(self, stale_after_s: float) -> list[InvocationRecord]:
        """Invocations left running or compensating whose owner has not beaten for `stale_after_s`;
        their parameters stay sealed until recovery reads each one's `invocation_json`."""
        stale_before = utc_now() - timedelta(seconds=stale_after_s)
        with self._read() as connection:
            rows = connection.execute(
                sa.select(invocations)
                .where(
                    invocations.c.state.in_(_UNFINISHED),
                    invocations.c.heartbeat_at <= stale_before,
                )
                .order_by(invocations.c.started_at)
            ).mappings()
            return [invocation_record(row, self._cipher) for row in rows]

    def ended_since(self, owner: str, since: datetime) -> list[InvocationRecord]:
        """The invocations of `owner` that ended (succeeded, failed or cancelled) at `since` or later."""
        ended = (InvocationState.SUCCEEDED, InvocationState.FAILED, InvocationState.CANCELLED)
        with self._read() as connection:
            rows = connection.execute(
                sa.select(invocations)
                .where(
                    invocations.c.owner == owner,
                    invocations.c.finished_at >= since,
                    invocations.c.state.in_([state.value for state in ended]),
                )
                .order_by(invocations.c.finished_at)
            ).mappings()
            return [invocation_record(row, self._cipher) for row in rows]
