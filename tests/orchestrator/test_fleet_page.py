"""The fleet page in process (no browser, no worker): what a tenant's viewer and an operator see, the
window's choice, the empty state, the charts' geometry and the words that say their numbers."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from orchestrator.saga.journal import Journal
from orchestrator.server.tenants import ApiKey
from orchestrator.server.ui import UiSettings
from orchestrator.server.ui.fleet import Bar, calls_chart, latency_chart, ms_text, rate_text
from orchestrator.server.ui.fleet_data import Bucket, Numbers, PoolNumbers, Window
from tests.orchestrator._fleet_calls import Call, write_calls
from tests.orchestrator._view_clients import view_client

ACME = ApiKey("sk-acme-view-0123456789", tenant="acme")
OPERATOR = ApiKey("sk-ops-view-0123456789", tenant="ops", scopes=frozenset({"admin"}))
ODD_POOL = "<i>odd</i>"


@pytest.fixture
def run() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _calls(now: datetime) -> list[Call]:
    return [
        Call("acme", "alpha", "book", "success", now - timedelta(minutes=40), 100, queued_ms=10),
        Call("acme", "alpha", "book", "execution_error", now - timedelta(minutes=5), 300, queued_ms=30),
        Call("globex", "alpha", "book", "timed_out", now - timedelta(minutes=20), 9000),
        Call("globex", "alpha", "wire", "success", now - timedelta(minutes=25), 70),
        Call("globex", ODD_POOL, "crawl", "success", now - timedelta(minutes=3), 50),
    ]


@contextlib.asynccontextmanager
async def _client(tmp_path: Path, calls: list[Call]) -> AsyncIterator[httpx.AsyncClient]:
    """The run view alone on a SQLite journal holding `calls`."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    filled = Journal(f"sqlite:///{tmp_path / 'journal.db'}", keys=())
    write_calls(filled, calls)
    filled.engine.dispose()
    async with view_client(tmp_path, UiSettings(api_keys=(ACME, OPERATOR))) as http:
        yield http


async def _signed_in(client: httpx.AsyncClient, key: ApiKey) -> None:
    form = await client.get("/ui/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce is not None
    signed = await client.post("/ui/login", data={"nonce": nonce[1], "key": key.key, "next": "/ui/fleet"})
    assert signed.status_code == 303


def _pools(page: str) -> list[str]:
    return re.findall(r'<section class="fleet-pool" data-pool="([^"]*)">', page)


def _tool_calls(page: str, pool: str) -> dict[str, str]:
    """Each tool row's number of calls in `pool`'s section."""
    section = page.split(f'data-pool="{pool}">', 1)[1].split("</section>", 1)[0]
    rows = re.findall(
        r'<tr class="tool" data-tool="([^"]*)">.*?<td class="number calls">(\d+)</td>', section, re.S
    )
    return dict(rows)


def test_a_tenants_viewer_sees_only_its_own_calls(tmp_path: Path, run: asyncio.AbstractEventLoop) -> None:
    async def story() -> None:
        async with _client(tmp_path, _calls(datetime.now(UTC))) as client:
            await _signed_in(client, ACME)
            page = (await client.get("/ui/fleet")).text

            # then: acme's two book calls, nothing of globex's (its tool, its pool, its slow timeout)
            assert _pools(page) == ["alpha"]
            assert _tool_calls(page, "alpha") == {"book": "2"}
            assert "wire" not in page and "odd" not in page and "9.00 s" not in page
            assert '<td class="number failed">1 (50.0 %)</td>' in page
            assert '<td class="number timed-out">0</td>' in page

    run.run_until_complete(story())


def test_an_operator_sees_every_tenants_calls(tmp_path: Path, run: asyncio.AbstractEventLoop) -> None:
    async def story() -> None:
        async with _client(tmp_path, _calls(datetime.now(UTC))) as client:
            await _signed_in(client, OPERATOR)
            response = await client.get("/ui/fleet")
            page = response.text

            # then: every pool and tool, each chart with its numbers in words; the pool's name escaped
            assert response.status_code == 200
            assert _pools(page) == ["&lt;i&gt;odd&lt;/i&gt;", "alpha"]
            assert _tool_calls(page, "alpha") == {"book": "3", "wire": "1"}
            assert ODD_POOL not in page
            assert '<td class="number timed-out">1 (25.0 %)</td>' in page  # alpha: 1 of its 4 calls
            titles = re.findall(r"<title>([^<]*)</title>", page)
            assert any(
                t.startswith("Calls of pool alpha per 2 minutes, the last hour, oldest first: ")
                for t in titles
            )
            assert any("Latency p95 of pool alpha" in t and "9.00 s" in t for t in titles)
            assert 'aria-label="Calls of pool alpha' in page
            assert "style=" not in page  # the view's policy allows no inline style
            assert '<a href="/ui/fleet">Fleet</a>' in page

    run.run_until_complete(story())


def test_the_window_is_chosen_from_three_and_an_empty_one_says_so(
    tmp_path: Path, run: asyncio.AbstractEventLoop
) -> None:
    async def story() -> None:
        async with _client(tmp_path, _calls(datetime.now(UTC))) as client:
            await _signed_in(client, OPERATOR)
            quarter = (await client.get("/ui/fleet?window=15m")).text
            unknown = (await client.get("/ui/fleet?window=1y")).text

            # then: in the last 15 minutes only the calls of 5 and 3 minutes ago; an unknown window is 1 h
            assert _tool_calls(quarter, "alpha") == {"book": "1"}
            assert 'class="chosen" aria-current="page">15 min<' in quarter
            assert 'class="chosen" aria-current="page">1 h<' in unknown

        async with _client(tmp_path / "empty", []) as client:
            await _signed_in(client, OPERATOR)
            empty = (await client.get("/ui/fleet?window=24h")).text
            assert "No calls in the last 24 hours." in empty and _pools(empty) == []

    (tmp_path / "empty").mkdir()
    run.run_until_complete(story())


WINDOW = Window("6m", 360, 120, "the last 6 minutes", "6 min")
START = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
POOL = PoolNumbers(
    "alpha",
    Numbers(6, 1),
    [],
    [
        Bucket(START, 2, 1, 120.0),
        Bucket(START + timedelta(minutes=2)),
        Bucket(START + timedelta(minutes=4), 4, 0, 30.0),
    ],
)


def test_the_calls_chart_draws_each_bucket_with_its_failures_on_top() -> None:
    chart = calls_chart(POOL, WINDOW)
    assert chart.bars == [
        Bar(0, 48, 119, 16, "ok"),
        Bar(0, 32, 119, 16, "failed"),
        Bar(240, 0, 119, 64, "ok"),
    ]
    assert chart.label == (
        "Calls of pool alpha per 2 minutes, the last 6 minutes, oldest first: 2 (1 failed), 0, 4"
    )
    assert chart.top == "4 calls"


def test_the_latency_chart_draws_each_buckets_p95_and_skips_empty_buckets() -> None:
    chart = latency_chart(POOL, WINDOW)
    assert chart.bars == [Bar(0, 0, 119, 64, "latency"), Bar(240, 48, 119, 16, "latency")]
    assert chart.label == (
        "Latency p95 of pool alpha per 2 minutes, the last 6 minutes, oldest first: 120 ms, —, 30 ms"
    )
    assert chart.top == "120 ms"


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "—"), (2.25, "2.2 ms"), (385.0, "385 ms"), (4080.0, "4.08 s"), (185_000.0, "3 min 5 s")],
)
def test_durations_are_said_in_their_unit(value: float | None, text: str) -> None:
    assert ms_text(value) == text


def test_rates_say_the_count_and_its_share() -> None:
    assert [rate_text(0, 4), rate_text(1, 8), rate_text(3, 3)] == ["0", "1 (12.5 %)", "3 (100.0 %)"]
