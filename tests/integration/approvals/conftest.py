"""The fixtures of the approval tests: PostgreSQL, the `approvals` pool's worker, a journal, a key."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from orchestrator import Journal
from tests._postgres import reachable_postgres
from tests.integration.approvals import tools
from tests.integration.worker_processes import serving


@pytest.fixture(scope="module")
def postgres() -> str:
    return reachable_postgres()


@pytest.fixture(scope="module")
def pool(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with serving(
        redis_url, tools.POOL, "tests.integration.approvals.tools", tmp_path_factory.mktemp("w"), "approvals"
    ):
        yield


@pytest.fixture
def journal(postgres: str) -> Iterator[Journal]:
    journal = Journal(postgres)
    yield journal
    journal.engine.dispose()


@pytest.fixture
def key() -> str:
    return uuid.uuid4().hex[:12]
