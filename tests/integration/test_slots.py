"""Fleet-wide concurrency slots (`workers.runtime.slots`) on a real Redis, from several processes:
never more holders than the limit, a dead holder's slot free once its lease expires, a silent waiter
forgotten, and free slots handed out round-robin between groups."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import statistics
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from orchestrator.executors.celery._slots import Needed, SlotHolder
from workers.runtime.slots import Slots

pytestmark = pytest.mark.integration

POLL_S = 0.005


@pytest.fixture
def scope() -> str:
    return f"test:{uuid.uuid4().hex}"


@pytest.fixture
def slots_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _hold_in_turn(url: str, scope: str, limit: int, who: str, calls: int, running_key: str) -> None:
    """One process: `calls` calls in turn, each waiting for a slot, counting itself running meanwhile;
    they start together, once every process is up."""
    client = redis.Redis.from_url(url)
    slots = Slots(client, scope, limit)
    client.incr(running_key + ":up")
    while client.get(running_key + ":go") is None:
        time.sleep(POLL_S)
    for i in range(calls):
        task_id = f"{who}-{i}"
        while not slots.try_acquire(task_id, group=who):
            time.sleep(POLL_S)
        running = client.incr(running_key)
        client.rpush(running_key + ":seen", running)
        time.sleep(0.02)
        client.decr(running_key)
        slots.release(task_id, group=who)


def test_processes_competing_for_three_slots_never_run_more_than_three(
    redis_url: str, slots_client: redis.Redis, scope: str
) -> None:
    # given: 6 processes of 10 calls each, on a scope of 3 slots
    running_key = f"test:running:{uuid.uuid4().hex}"
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_hold_in_turn, args=(redis_url, scope, 3, f"p{n}", 10, running_key))
        for n in range(6)
    ]

    # when: they all run at once
    for process in processes:
        process.start()
    deadline = time.monotonic() + 60
    while int(slots_client.get(running_key + ":up") or 0) < len(processes):
        assert time.monotonic() < deadline, "the processes did not start"
        time.sleep(POLL_S)
    slots_client.set(running_key + ":go", 1)
    for process in processes:
        process.join(60)
        assert process.exitcode == 0

    # then: all 60 calls ran, never more than 3 at a time, and 3 at a time did run
    seen = [int(n) for n in slots_client.lrange(running_key + ":seen", 0, -1)]
    assert len(seen) == 60
    assert max(seen) == 3, seen
    assert Slots(slots_client, scope, 3).holders() == []


def _hold_until_killed(url: str, scope: str, lease_ttl_ms: int) -> None:
    client = redis.Redis.from_url(url)
    slots = Slots(client, scope, 1, lease_ttl_ms=lease_ttl_ms)
    assert slots.try_acquire("doomed")
    while True:  # renews its lease until it is killed
        slots.renew("doomed")
        time.sleep(lease_ttl_ms / 4000)


def test_a_killed_holders_slot_is_free_once_its_lease_expires(
    redis_url: str, slots_client: redis.Redis, scope: str
) -> None:
    # given: the only slot held by a process that renews its lease (1 s) while it lives
    lease_ttl_ms = 1000
    process = multiprocessing.get_context("spawn").Process(
        target=_hold_until_killed, args=(redis_url, scope, lease_ttl_ms)
    )
    process.start()
    slots = Slots(slots_client, scope, 1, lease_ttl_ms=lease_ttl_ms)
    deadline = time.monotonic() + 30
    while slots.holders() != ["doomed"]:
        assert time.monotonic() < deadline, "the holder never took its slot"
        time.sleep(POLL_S)

    # when: it is SIGKILLed, while another call waits
    assert not slots.try_acquire("next")
    time.sleep(lease_ttl_ms / 1000 * 1.5)  # renewed all along: still held
    assert not slots.try_acquire("next")
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    process.join(10)
    killed = time.monotonic()
    while not slots.try_acquire("next"):
        assert time.monotonic() - killed < 5, "the dead holder's slot was never freed"
        time.sleep(POLL_S)

    # then: the waiting call got it within the lease's time
    freed_after_s = time.monotonic() - killed
    assert freed_after_s < lease_ttl_ms / 1000 + 0.3, freed_after_s
    assert slots.holders() == ["next"]


def test_a_waiter_that_stops_asking_loses_its_place(slots_client: redis.Redis, scope: str) -> None:
    # given: one slot, held; two calls waiting, the first of which stops asking
    slots = Slots(slots_client, scope, 1, waiter_ttl_ms=300)
    assert slots.try_acquire("holder")
    assert not slots.try_acquire("gone")
    assert not slots.try_acquire("patient")

    # when: the holder ends after the first waiter went silent, the second still asking
    time.sleep(0.4)
    assert not slots.try_acquire("patient")
    slots.release("holder")

    # then: the slot went to the waiter still asking, not to the silent one ahead of it
    assert slots.holders() == ["patient"]
    assert not slots.try_acquire("gone")  # back in line, behind
    assert slots.try_acquire("patient")


def test_free_slots_go_round_robin_between_groups(slots_client: redis.Redis, scope: str) -> None:
    # given: two slots, both held by group A, which has 20 more calls waiting before B's 2
    slots = Slots(slots_client, scope, 2)
    assert slots.try_acquire("a-held-0", "A") and slots.try_acquire("a-held-1", "A")
    for i in range(20):
        assert not slots.try_acquire(f"a{i}", "A")
    for i in range(2):
        assert not slots.try_acquire(f"b{i}", "B")

    # when: slots free one by one (each holder ends, each waiter asks again)
    granted: list[str] = []
    held = ["a-held-0", "a-held-1"]
    while len(granted) < 6:
        ending = held.pop(0)
        slots.release(ending, "A" if ending.startswith("a") else "B")
        for waiter in [f"a{i}" for i in range(20)] + ["b0", "b1"]:
            if waiter not in granted and slots.try_acquire(waiter, waiter[0].upper()):
                granted.append(waiter)
                held.append(waiter)

    # then: B's calls were served in turn with A's, not after A's 20
    assert granted[:4] == ["a0", "b0", "a1", "b1"], granted
    assert granted[4:] == ["a2", "a3"]


def test_a_waiter_that_gives_up_leaves_the_line(slots_client: redis.Redis, scope: str) -> None:
    # given: one slot, held; a waiter that gives up (its deadline passed), one behind it
    slots = Slots(slots_client, scope, 1)
    assert slots.try_acquire("holder")
    assert not slots.try_acquire("quitter")
    assert not slots.try_acquire("next")

    # when: the quitter leaves the line, then the holder ends
    assert not slots.release("quitter")
    slots.release("holder")

    # then: the slot went to the one behind, and no lease is left to the one that left
    assert slots.holders() == ["next"]


def test_a_waiter_granted_a_slot_is_woken_at_once_not_at_its_next_ask(
    redis_url: str, slots_client: redis.Redis, scope: str
) -> None:
    # given: a scope of one slot, held elsewhere; a call waiting for it long enough that it asks only
    # every 50 ms
    holder = SlotHolder(redis_url)
    slots = Slots(slots_client, scope, 1)
    need = Needed(slots, "default", "its slots")
    latencies: list[float] = []

    async def trial(i: int) -> None:
        assert slots.try_acquire(f"elsewhere-{i}")
        waiting = asyncio.ensure_future(holder.take(f"waiter-{i}", [need], time.monotonic() + 10))
        await asyncio.sleep(0.4)

        # when: the slot is freed (granted to the waiter by the releasing script)
        freed = time.monotonic()
        await asyncio.to_thread(slots.release, f"elsewhere-{i}")
        assert await waiting is None
        latencies.append(time.monotonic() - freed)
        holder.release(f"waiter-{i}")
        holder.flush()

    async def trials() -> None:
        for i in range(9):
            await trial(i)

    asyncio.run(trials())

    # then: the waiter had its slot within a few milliseconds, not at its next ask (25 ms later on
    # average, were it not woken)
    print(f"\nwoken after {sorted(round(s * 1000, 1) for s in latencies)} ms")
    assert statistics.median(latencies) < 0.012, latencies


def test_a_waiter_granted_a_slot_too_close_to_its_deadline_gives_it_back(
    redis_url: str, slots_client: redis.Redis, scope: str
) -> None:
    # given: a scope of one slot, held elsewhere; a call waiting for it with 0.3 s to its deadline
    holder = SlotHolder(redis_url)
    slots = Slots(slots_client, scope, 1)
    need = Needed(slots, "default", "its slots")
    assert slots.try_acquire("elsewhere")

    async def trial() -> Needed | None:
        deadline = time.monotonic() + 0.3
        waiting = asyncio.ensure_future(holder.take("late-waiter", [need], deadline))
        # when: the slot is freed (granted to the waiter) 20 ms before that deadline
        await asyncio.sleep(max(0.0, deadline - 0.02 - time.monotonic()))
        await asyncio.to_thread(slots.release, "elsewhere")
        return await waiting

    # then: it did not start within its deadline, and the slot it was granted is free again
    assert asyncio.run(trial()) is need
    holder.flush()
    assert slots.holders() == []
