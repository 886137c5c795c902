"""The journal's side of human approvals: a paused invocation and the calls waiting for a person.

Every transition is one conditional `UPDATE`, so that any number of processes may decide, expire,
claim or cancel at once and each transition happens once: a decision only moves a `pending` row
whose time has not run out; a claim only moves a `paused` invocation with no call left `pending`,
and only one claimer's `UPDATE` matches it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from orchestrator.finite_json import dumps_finite
from orchestrator.saga._journal_crypto import JournalCipher
from orchestrator.saga._journal_records import columns_of, utc_now
from orchestrator.saga._journal_tables import approvals, invocations
from orchestrator.saga.states import ApprovalState, InvocationState

__all__ = ["ApprovalRecord", "JournalApprovals", "WaitingCall", "arguments_hash"]


def arguments_hash(arguments: str) -> str:
    """What an approval is bound to: the SHA-256 of the arguments as canonical JSON (keys sorted, no
    spaces), so that the same arguments written differently hash the same; of the text itself when it
    is not JSON."""
    try:
        canonical = json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except ValueError:
        canonical = arguments
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class ApprovalRecord:
    """One call waiting for (or given) a person's decision."""

    id: int
    invocation_id: str
    call_id: str
    tool: str
    pool: str | None
    arguments: str  # as the model asked
    arguments_hash: str
    state: ApprovalState
    approved_arguments: str | None  # when approved with edited arguments
    reason: str | None  # of a rejection
    requested_by: str | None  # the agent and memory id that asked
    decided_by: str | None
    requested_at: datetime
    expires_at: datetime
    decided_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        """The call and its decision as JSON (arguments as the model wrote them, times in ISO 8601)."""
        return {
            "invocation_id": self.invocation_id,
            "call_id": self.call_id,
            "tool": self.tool,
            "pool": self.pool,
            "arguments": self.arguments,
            "arguments_hash": self.arguments_hash,
            "state": self.state.value,
            "approved_arguments": self.approved_arguments,
            "reason": self.reason,
            "requested_by": self.requested_by,
            "requested_at": self.requested_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "decided_by": self.decided_by,
            "decided_at": None if self.decided_at is None else self.decided_at.isoformat(),
        }

    @property
    def arguments_to_run(self) -> str:
        """The arguments the call runs with once approved: the edited ones, else the model's."""
        return self.approved_arguments if self.approved_arguments is not None else self.arguments


@dataclass(frozen=True)
class WaitingCall:
    """A call to pause on: its id, tool, pool and arguments (the model's)."""

    call_id: str
    tool: str
    pool: str | None
    arguments: str


def _approval_record(row: RowMapping) -> ApprovalRecord:
    values = columns_of(row)
    return ApprovalRecord(**(values | {"state": ApprovalState(values["state"])}))


class JournalApprovals:
    """The approvals methods of `Journal` (which provides the connections and the cipher)."""

    _tx: Callable[[], AbstractContextManager[Connection]]
    _read: Callable[[], AbstractContextManager[Connection]]
    _cipher: JournalCipher

    def pause(
        self,
        invocation_id: str,
        paused_state: dict[str, Any],
        waiting: Sequence[WaitingCall],
        *,
        expires_at: datetime,
        requested_by: str | None,
    ) -> list[ApprovalRecord]:
        """Pause a running invocation on `waiting`: its state (sealed) and one pending row per call."""
        now = utc_now()
        with self._tx() as tx:
            tx.execute(
                sa.update(invocations)
                .where(invocations.c.id == invocation_id)
                .values(
                    state=InvocationState.PAUSED.value,
                    heartbeat_at=now,
                    paused_state=self._cipher.seal(dumps_finite(paused_state, "the paused state")),
                )
            )
            for call in waiting:
                tx.execute(
                    sa.insert(approvals).values(
                        invocation_id=invocation_id,
                        call_id=call.call_id,
                        tool=call.tool,
                        pool=call.pool,
                        arguments=call.arguments,
                        arguments_hash=arguments_hash(call.arguments),
                        state=ApprovalState.PENDING.value,
                        requested_by=requested_by,
                        requested_at=now,
                        expires_at=expires_at,
                    )
                )
            return self._approvals_on(tx, invocation_id, None)

    def decide(
        self,
        invocation_id: str,
        call_id: str,
        *,
        approve: bool,
        arguments: str | None = None,
        reason: str | None = None,
        by: str | None = None,
    ) -> ApprovalRecord | None:
        """Decide one pending call (approve, with `arguments` edited or not, or reject with `reason`);
        the row as it stands afterwards, None when there is no such call. A row no longer pending
        (decided before, expired, cancelled) is left as it is: the caller compares."""
        self.expire_approvals()
        now = utc_now()
        values: dict[str, Any] = {
            "state": (ApprovalState.APPROVED if approve else ApprovalState.REJECTED).value,
            "decided_by": by,
            "decided_at": now,
            "reason": None if approve else reason,
            "approved_arguments": arguments if approve else None,
        }
        with self._tx() as tx:
            tx.execute(
                sa.update(approvals)
                .where(
                    approvals.c.invocation_id == invocation_id,
                    approvals.c.call_id == call_id,
                    approvals.c.state == ApprovalState.PENDING.value,
                    approvals.c.expires_at > now,
                )
                .values(**values)
            )
            found = self._approvals_on(tx, invocation_id, call_id)
        return found[0] if found else None

    def expire_approvals(self) -> list[str]:
        """Expire every pending call whose time ran out; the invocations that had one."""
        now = utc_now()
        with self._tx() as tx:
            due = sa.and_(approvals.c.state == ApprovalState.PENDING.value, approvals.c.expires_at <= now)
            ids = sorted(set(tx.execute(sa.select(approvals.c.invocation_id).where(due)).scalars()))
            if ids:
                tx.execute(
                    sa.update(approvals)
                    .where(due)
                    .values(state=ApprovalState.EXPIRED.value, decided_at=now, decided_by="expiry")
                )
        return ids

    def approvals(
        self, invocation_id: str | None = None, *, state: ApprovalState | str | None = None
    ) -> list[ApprovalRecord]:
        """The calls waiting or decided, oldest first: of one invocation, or in one state."""
        with self._read() as connection:
            return self._approvals_on(connection, invocation_id, None, state)

    def waiting_counts(self) -> dict[tuple[str, str | None], int]:
        """How many calls wait for a person, by tool and pool."""
        query = (
            sa.select(approvals.c.tool, approvals.c.pool, sa.func.count())
            .where(approvals.c.state == ApprovalState.PENDING.value)
            .group_by(approvals.c.tool, approvals.c.pool)
        )
        with self._read() as connection:
            return {(row[0], row[1]): int(row[2]) for row in connection.execute(query)}

    def ready_to_resume(self) -> list[str]:
        """The paused invocations with no call left pending: whoever may resume them should."""
        pending = sa.select(approvals.c.id).where(
            approvals.c.invocation_id == invocations.c.id, approvals.c.state == ApprovalState.PENDING.value
        )
        query = (
            sa.select(invocations.c.id)
            .where(invocations.c.state == InvocationState.PAUSED.value, ~sa.exists(pending))
            .order_by(invocations.c.started_at)
        )
        with self._read() as connection:
            return list(connection.execute(query).scalars())

    def claim_paused(self, invocation_id: str, owner: str) -> dict[str, Any] | None:
        """Take a paused invocation whose calls are all decided, to resume it: its paused state, or None
        when it is not paused, still waits for a decision, or another process took it first."""
        pending = sa.select(approvals.c.id).where(
            approvals.c.invocation_id == invocation_id, approvals.c.state == ApprovalState.PENDING.value
        )
        with self._tx() as tx:
            taken = tx.execute(
                sa.update(invocations)
                .where(
                    invocations.c.id == invocation_id,
                    invocations.c.state == InvocationState.PAUSED.value,
                    ~sa.exists(pending),
                )
                .values(state=InvocationState.RUNNING.value, owner=owner, heartbeat_at=utc_now())
            ).rowcount
            if not taken:
                return None
            sealed = tx.execute(
                sa.select(invocations.c.paused_state).where(invocations.c.id == invocation_id)
            ).scalar_one()
        opened: dict[str, Any] = json.loads(self._cipher.open(sealed or "{}", invocation_id=invocation_id))
        return opened

    def cancel_paused(self, invocation_id: str, owner: str) -> bool:
        """Take a paused invocation to cancel it (it becomes `compensating`, its waiting calls
        `cancelled`); False when it is not paused or another process took it first."""
        now = utc_now()
        with self._tx() as tx:
            taken = tx.execute(
                sa.update(invocations)
                .where(invocations.c.id == invocation_id, invocations.c.state == InvocationState.PAUSED.value)
                .values(state=InvocationState.COMPENSATING.value, owner=owner, heartbeat_at=now)
            ).rowcount
            if taken:
                tx.execute(
                    sa.update(approvals)
                    .where(
                        approvals.c.invocation_id == invocation_id,
                        approvals.c.state == ApprovalState.PENDING.value,
                    )
                    .values(state=ApprovalState.CANCELLED.value, decided_at=now, decided_by="cancel")
                )
        return bool(taken)

    def paused_call(self, service: str, tool: str, hashed: str, tenant: str) -> ApprovalRecord | None:
        """The latest call of `tool` with arguments of hash `hashed` that a paused invocation of
        `service` and `tenant` holds (waiting, or decided and not yet gone on with), if any."""
        query = (
            sa.select(approvals)
            .join(invocations, invocations.c.id == approvals.c.invocation_id)
            .where(
                invocations.c.state == InvocationState.PAUSED.value,
                invocations.c.service_name == service,
                invocations.c.tenant == tenant,
                approvals.c.tool == tool,
                approvals.c.arguments_hash == hashed,
            )
            .order_by(approvals.c.id.desc())
            .limit(1)
        )
        with self._read() as connection:
            row = connection.execute(query).mappings().first()
        return None if row is None else _approval_record(row)

    def cancel_approvals(self, invocation_id: str) -> int:
        """Cancel the approvals an invocation that ended (cancelled or failed as it paused) left
        pending; how many."""
        with self._tx() as tx:
            return int(
                tx.execute(
                    sa.update(approvals)
                    .where(
                        approvals.c.invocation_id == invocation_id,
                        approvals.c.state == ApprovalState.PENDING.value,
                    )
                    .values(state=ApprovalState.CANCELLED.value, decided_at=utc_now(), decided_by="cancel")
                ).rowcount
            )

    @staticmethod
    def _approvals_on(
        connection: Connection,
        invocation_id: str | None,
        call_id: str | None,
        state: ApprovalState | str | None = None,
    ) -> list[ApprovalRecord]:
        query = sa.select(approvals).order_by(approvals.c.id)
        if state is not None:
            query = query.where(approvals.c.state == ApprovalState(state).value)
        if invocation_id is not None:
            query = query.where(approvals.c.invocation_id == invocation_id)
        if call_id is not None:
            query = query.where(approvals.c.call_id == call_id)
        return [_approval_record(row) for row in connection.execute(query).mappings()]
