"""Tools of the JSON log tests: each writes to the worker's output another way a process can.

Pool `jsonlogs` holds the tools a test's worker serves; pool `jsonlogs-elsewhere` holds one it must
not list in its banner, the module serving both.
"""

from __future__ import annotations

import logging
import sys
import threading
import warnings

from billiard import util as billiard_util
from celery.utils.log import get_task_logger

from workers import compensate_for, tool

POOL = "jsonlogs"
OTHER_POOL = "jsonlogs-elsewhere"
TASK_LOGGER = "jsonlogs.task"
WARNING_TEXT = "the fare cache is stale"
PRINTED = "printed by the tool"
FAILURE = "the fare server refused"
THREAD_NAME = "jsonlogs-stray"

log = logging.getLogger(__name__)


@tool("Logs, prints on standard output and error, and logs through Celery's task logger", pool=POOL)
def jsonlogs_speak(text: str) -> str:
    log.warning("speaking about %s", text)
    print(f"{PRINTED}: {text}\nits second line")
    print(f"{PRINTED} on standard error", file=sys.stderr)
    get_task_logger(TASK_LOGGER).warning("task logger: %s", text)
    return text


@tool("Warns through Python's warnings", pool=POOL)
def jsonlogs_warn(text: str) -> str:
    warnings.warn(f"{WARNING_TEXT}: {text}", UserWarning, stacklevel=1)
    return text


@tool("Fails", pool=POOL)
def jsonlogs_fail(text: str) -> str:
    raise ValueError(f"{FAILURE}: {text}")


@tool("Logs a traceback, leaves a thread to die of an exception, and logs as multiprocessing", pool=POOL)
def jsonlogs_stray(text: str) -> str:
    try:
        {}[text]
    except KeyError:
        log.exception("looking up %s failed", text)

    def die() -> None:
        raise RuntimeError(f"the stray thread of {text} died")

    thread = threading.Thread(target=die, name=THREAD_NAME)
    thread.start()
    thread.join()
    billiard_util.get_logger().error("multiprocessing says %s", text)
    return text


class Desk:
    """A tool of the pool with its compensation."""

    @tool("Books a seat", pool=POOL)
    def jsonlogs_book(self, seat: str) -> str:
        return seat

    @compensate_for("jsonlogs_book")
    def jsonlogs_unbook(self, seat: str) -> None:
        return None


desk = Desk()


@tool("Serves another pool", pool=OTHER_POOL)
def jsonlogs_elsewhere(text: str) -> str:
    return text
