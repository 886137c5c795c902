"""`CeleryExecutor`: every tool call a Celery task on its pool's queue, awaited under a deadline.

The executor's jobs are private modules of this package: which pools have live workers (`_pools`),
one dispatch from publish to outcome (`_dispatch`), undoing a call (`_compensation`), and settling a call
an orchestrator that died left in flight (`_settle`).
"""

from orchestrator.executors.celery._executor import CallEvent, CeleryExecutor

__all__ = ["CallEvent", "CeleryExecutor"]
