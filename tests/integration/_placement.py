"""Where a call of the `AiService` integration tests ran: on Celery, its pool and worker; in-process,
nowhere in particular.
"""

from __future__ import annotations

import uuid
from typing import Any

from orchestrator import CeleryExecutor


def is_celery(executor: object) -> bool:
    return isinstance(executor, CeleryExecutor)


def assert_ran(executor: object, execution: Any, pool: str, worker: str) -> None:
    """Where the call ran: its pool and worker on Celery, nowhere in particular in-process."""
    if is_celery(executor):
        assert execution.pool == pool
        assert execution.worker == worker
        assert execution.task_id is not None
        uuid.UUID(execution.task_id)
    else:
        assert (execution.task_id, execution.pool, execution.worker) == (None, None, None)
