"""The listener of a process whose Redis is away (cancel requests, slots granted): it says so once per
outage, with the URL's password masked, and tries again with a growing pause."""

from __future__ import annotations

import logging

import pytest

from orchestrator import _subscription
from orchestrator.loop import cancellation
from tests._ports import free_port
from tests._waiting import wait_for


def test_an_unreachable_redis_is_reported_once_without_its_password(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_subscription, "RETRY_FIRST_S", 0.05)
    monkeypatch.setattr(_subscription, "RETRY_MAX_S", 0.1)
    attempts: list[str] = []
    real_from_url = _subscription.redis.Redis.from_url

    def counting(url: str, **options: object) -> object:
        attempts.append(url)
        return real_from_url(url, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(_subscription.redis.Redis, "from_url", counting)
    url = f"redis://:s3cret-pw@127.0.0.1:{free_port()}/0"
    caplog.set_level(logging.DEBUG, logger=_subscription.__name__)

    cancellation.listen_for_cancels(url)
    wait_for(lambda: len(attempts) >= 4, timeout_s=5, what="the listener trying again")

    # the listener's own (another test's threads of this process may still be logging their own)
    ours = [r for r in caplog.records if r.name == _subscription.__name__]
    warnings = [r for r in ours if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "s3cret-pw" not in said and "lost its subscription" in said
