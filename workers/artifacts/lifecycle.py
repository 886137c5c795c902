"""Artifacts undone with the call that made them: a compensation removes what the call stored.

A call's result carries references only; its artifacts stay in the store after the call is undone
unless its compensation removes them, as it would delete any other thing the call made::

    @compensate_for("render_report")
    def discard_report(execution: ToolExecution) -> None:
        delete_artifacts(execution)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from workers.artifacts._results import ArtifactSink

if TYPE_CHECKING:
    from workers.protocol import ToolExecution

__all__ = ["delete_artifacts"]

log = logging.getLogger(__name__)


def delete_artifacts(execution: ToolExecution) -> int:
    """Remove the artifacts `execution`'s result refers to (record and bytes) from the store the
    environment names (`TOOLFLEET_ARTIFACT_URL`); how many there were. Removing one already gone is
    no error, so that a compensation run again removes nothing twice and fails for nothing."""
    refs = execution.artifacts
    if not refs:
        return 0
    store = ArtifactSink.from_env().store
    removed = sum(store.delete(ref.id) for ref in refs)
    log.info(
        "removed %d of %d artifact(s) of call %s of tool %s",
        removed,
        len(refs),
        execution.request.id,
        execution.request.name,
    )
    return removed
