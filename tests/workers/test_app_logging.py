"""Celery's per-task lines, which carry results, are kept out of a worker's log from its start only:
building the app (as Flower or a publisher does) leaves the process's logging alone."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from celery import Celery
from celery.signals import worker_init

from workers.app import CELERY_TRACE_LOGGER, make_app
from workers.settings import Settings


class _Worker:
    """What `worker_init` sends: the starting worker, holding its app."""

    def __init__(self, app: Celery) -> None:
        self.app = app


@pytest.fixture
def trace_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger(CELERY_TRACE_LOGGER)
    level = logger.level
    logger.setLevel(logging.NOTSET)
    yield logger
    logger.setLevel(level)


def test_building_the_app_leaves_celerys_trace_logger_alone(trace_logger: logging.Logger) -> None:
    app = make_app(Settings())
    assert trace_logger.level == logging.NOTSET
    app.close()


def test_a_worker_of_the_app_keeps_celerys_task_lines_to_warnings(trace_logger: logging.Logger) -> None:
    # given the app and another one
    app, other = make_app(Settings()), Celery(set_as_current=False)
    # when a worker of the other starts, nothing changes
    worker_init.send(sender=_Worker(other))
    assert trace_logger.level == logging.NOTSET
    # when a worker of the app starts, Celery's trace logger keeps warnings and errors only
    worker_init.send(sender=_Worker(app))
    assert trace_logger.level == logging.WARNING
    app.close()
    other.close()
