"""`toolfleet chat` on the worker pools without --tools offers the live catalog, read again as pools
come and go during the chat: not the tools found when it started."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from orchestrator.cli.commands.chat import _Session
from orchestrator.cli.main import build_parser
from tests._waiting import wait_for
from tests.integration.private_redis import private_redis_in
from tests.integration.worker_processes import tool_worker
from workers.settings import Settings

pytestmark = pytest.mark.integration


def _args() -> argparse.Namespace:
    """`toolfleet chat` as a user starts it on the worker pools, read by the command's own parser."""
    return build_parser().parse_args(
        ["chat", "--model", "openai:gpt-4o-mini", "--api-key-env", "CHAT_CATALOG_TEST_KEY"]
    )


def test_a_pool_that_starts_during_the_chat_offers_its_tools(
    worker_logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a chat started while only the io pool (weather) is live, on a Redis of its own (the
    # session's shared workers serve other tools on the heavy pool)
    monkeypatch.setenv("CHAT_CATALOG_TEST_KEY", "sk-test")
    with private_redis_in(tmp_path / "redis") as server:
        _pool_joins_during_the_chat(server.url, worker_logs, tmp_path)


def _pool_joins_during_the_chat(redis_url: str, worker_logs: Path, tmp_path: Path) -> None:
    settings = Settings.from_env(
        {"TOOLFLEET_REDIS_URL": redis_url, "TOOLFLEET_DATABASE_URL": f"sqlite:///{tmp_path}/chat.db"}
    )
    io_worker = tool_worker(
        redis_url, ["io"], ["workers.examples.weather"], worker_logs / "chat-io.log", "io@chat"
    )
    heavy_worker = None
    try:
        io_worker.wait_ready(timeout_s=60)
        with _Session.build(_args(), settings, io.StringIO()) as session:
            names = {spec.name for spec in session.service.tool_specifications()}
            assert "get_weather" in names and "squareRoot" not in names

            # when: the heavy pool (math) starts during the chat
            heavy_worker = tool_worker(
                redis_url, ["heavy"], ["workers.examples.math"], worker_logs / "chat-heavy.log", "heavy@chat"
            )
            heavy_worker.wait_ready(timeout_s=60)

            # then: the chat's service offers its tools too, without a restart
            wait_for(
                lambda: "squareRoot" in {s.name for s in session.service.tool_specifications()},
                timeout_s=10,
                what="the heavy pool's tools in the chat's catalog",
            )
    finally:
        if heavy_worker is not None:
            heavy_worker.stop()
        io_worker.stop()
