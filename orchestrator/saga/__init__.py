"""Sagas: undo the successful calls of an invocation when one fails, and keep a log that outlives it.

- `coordinator`: `Saga`, the compensations one invocation owes, run latest first.
- `journal`: `Journal`, the SQL log of invocations, calls and compensations; `states` their states.
- `migrations`: the journal's schema under Alembic (`toolfleet db upgrade`).
- `recovery`: `recover()`, which finishes the sagas of orchestrators that died (`toolfleet recover`).
- `compensation`: one journaled compensation, shared by the two.
- `_late`: what became of calls an orchestrator gave up on, read from Redis (a call left in flight
  by an orchestrator that died is settled by its executor: `ToolExecutor.settle`).
"""

from orchestrator.saga._late import LateCompensation, LateState, late_compensation
from orchestrator.saga.compensation import run_compensation
from orchestrator.saga.coordinator import (
    ROLLED_BACK,
    Saga,
    SagaStep,
    rollback_reason,
    rolled_back_text,
)
from orchestrator.saga.journal import CallRecord, CompensationRecord, InvocationRecord, Journal, owner_id
from orchestrator.saga.recovery import Recovered, recover
from orchestrator.saga.states import CallState, CompensationState, InvocationState

__all__ = [
    "ROLLED_BACK",
    "CallRecord",
    "CallState",
    "CompensationRecord",
    "CompensationState",
    "InvocationRecord",
    "InvocationState",
    "Journal",
    "LateCompensation",
    "LateState",
    "Recovered",
    "Saga",
    "SagaStep",
    "late_compensation",
    "owner_id",
    "recover",
    "rollback_reason",
    "rolled_back_text",
    "run_compensation",
]
