"""Sagas: undo the successful calls of an invocation when one fails, and keep a log that outlives it.

- `coordinator`: `Saga`, the compensations one invocation owes, run latest first.
- `journal`: `Journal`, the SQL log of invocations, calls and compensations; `states` their states.
- `async_journal`: `AsyncJournal`, the same log on SQLAlchemy's asyncio extension, and `JournalRunner`,
  the one method (`run`) through which the loop, the saga and recovery reach either.
- `migrations`: the journal's schema under Alembic (`toolfleet db upgrade`).
- `recovery`: `recover()`, which finishes the sagas of orchestrators that died (`toolfleet recover`).
- `compensation`: one journaled compensation, shared by the two.
- `_late`: what became of calls an orchestrator gave up on, read from Redis (a call left in flight
  by an orchestrator that died is settled by its executor: `ToolExecutor.settle`).
"""

from orchestrator.saga import journal
from orchestrator.saga._late import LateCompensation, LateState, late_compensation
from orchestrator.saga.async_journal import AsyncJournal, JournalRunner
from orchestrator.saga.compensation import run_compensation
from orchestrator.saga.coordinator import ROLLED_BACK, Saga, SagaStep, rollback_reason, rolled_back_text
from orchestrator.saga.journal import *  # noqa: F403 - the journal's names and its states, listed in `journal.__all__`
from orchestrator.saga.recovery import Recovered, cancel_paused, recover

__all__ = [
    "ROLLED_BACK",
    "AsyncJournal",
    "JournalRunner",
    "LateCompensation",
    "LateState",
    "Recovered",
    "Saga",
    "SagaStep",
    "cancel_paused",
    "late_compensation",
    "recover",
    "rollback_reason",
    "rolled_back_text",
    "run_compensation",
]
__all__ += journal.__all__
