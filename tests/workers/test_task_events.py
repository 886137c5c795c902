"""`TOOLFLEET_TASK_EVENTS`: Celery's task events, on unless turned off, on both sides of a call."""

from __future__ import annotations

from workers.app import make_app, make_publisher
from workers.settings import Settings


def test_task_events_are_on_by_default_for_flower() -> None:
    settings = Settings.from_env({})
    assert make_app(settings).conf.worker_send_task_events is True
    assert make_publisher(settings).conf.task_send_sent_event is True


def test_task_events_off_silences_the_worker_and_the_publisher() -> None:
    settings = Settings.from_env({"TOOLFLEET_TASK_EVENTS": "false"})
    assert settings.task_events is False
    assert make_app(settings).conf.worker_send_task_events is False
    assert make_publisher(settings).conf.task_send_sent_event is False
