"""Fleet-wide rate limits with real workers and orchestrator processes: `@tool(rate_limit="20/s")`
called from three orchestrators starts at most 20 calls in any second (read from the tools' own record
of their starts), a limit per key value leaves other values free, a call whose turn would come after
its deadline is told so at once, and reserved starts are kept in every window on Redis's clock."""

from __future__ import annotations

import itertools
import multiprocessing
import time
import uuid

import pytest
import redis

from tests.integration.slot_driver import batch_of, ended, launch, run_batch, wait_counts
from workers import OutcomeKind
from workers.runtime.process import WorkerProcess
from workers.runtime.rates import DISPATCH_GUARD_MS, Rates
from workers.settings import Settings
from workers.tools.rate_limits import RateLimit

pytestmark = pytest.mark.integration


def _starts(client: redis.Redis, run: str) -> list[float]:
    return sorted(float(t) for t in client.lrange(f"test:rates:{run}:starts", 0, -1))


def _busiest_window(starts: list[float], window_s: float) -> int:
    """The most starts in any window of `window_s` (each window opening at a start)."""
    return max(sum(1 for t in starts[i:] if t < start + window_s) for i, start in enumerate(starts))


def test_two_hundred_calls_from_three_orchestrators_start_at_most_twenty_in_any_second(
    redis_url: str, client: redis.Redis, slot_worker: WorkerProcess
) -> None:
    # given: a tool limited to 20 starts a second, a worker with 16 threads for it
    run = uuid.uuid4().hex

    # when: 3 orchestrator processes call it 67, 67 and 66 times, all at once
    drivers = [launch(redis_url, "paced", run, calls, 0) for calls in (67, 67, 66)]
    kinds = [ended(driver)[0] for driver in drivers]

    # then: every call succeeded; no second saw more than 20 of them start, yet the limit was used
    # (200 starts, 20 a second, evenly spaced, take 10 s)
    assert [k.count("success") for k in kinds] == [67, 67, 66]
    starts = _starts(client, run)
    assert len(starts) == 200
    busiest = _busiest_window(starts, 1.0)
    span = starts[-1] - starts[0]
    print(f"\nrate: 200 starts in {span:.2f} s, at most {busiest} in any 1 s window")
    assert busiest <= 20
    assert 9.5 <= span < 10.0 * 1.2, span


def test_a_rate_limit_per_key_value_holds_each_value_apart(
    settings: Settings, client: redis.Redis, slot_worker: WorkerProcess
) -> None:
    # given: a tool limited to 2 starts a second per account; 4 calls for each of 2 accounts
    run = uuid.uuid4().hex
    calls = batch_of("paced_per_account", *[{"run": run, "account": a, "seconds": 0} for a in "ABABABAB"])

    # when: they are called in one batch
    outcomes = run_batch(settings, calls)

    # then: each account's calls started 2 a second, the two accounts side by side (one after the
    # other, the 8 starts would take 3.5 s)
    assert [o.kind for o in outcomes] == [OutcomeKind.SUCCESS] * 8, [o.text for o in outcomes]
    for account in "AB":
        starts = _starts(client, f"{run}:{account}")
        assert len(starts) == 4
        # the tool notes its start a moment after the worker took its turn: on a loaded machine that
        # moment varies by up to a tenth of a second, so 3 turns spaced 0.5 s apart may be noted within
        # 1 s; they are never within 0.9 s
        assert _busiest_window(starts, 0.9) == 2, starts
        assert 1.5 <= starts[-1] - starts[0] < 2.5, starts
    both = _starts(client, f"{run}:A") + _starts(client, f"{run}:B")
    assert max(both) - min(both) < 3.0


def test_a_call_whose_turn_would_come_after_its_deadline_is_told_at_once(
    settings: Settings, client: redis.Redis, slot_worker: WorkerProcess
) -> None:
    # given: a tool of one start every 10 s and a 1 s deadline; two calls at once
    run = uuid.uuid4().hex
    client.delete("toolfleet:rates:tool:rare:dispatch", "toolfleet:rates:tool:rare:start")

    # when: they are called in one batch
    started = time.monotonic()
    outcomes = run_batch(settings, batch_of("rare", *[{"run": run, "seconds": 0}] * 2))
    elapsed = time.monotonic() - started

    # then: one started; the other did not, was told why without waiting out its deadline, and the
    # wait for a turn is counted
    kinds = sorted(o.kind.value for o in outcomes)
    assert kinds == ["success", "timed_out"], [o.text for o in outcomes]
    refused = next(o for o in outcomes if o.kind is OutcomeKind.TIMED_OUT)
    assert refused.error_type == "RateLimitWaitTimeout"
    assert refused.text.startswith(
        "Tool 'rare' could not start within its deadline of 1 s: its rate limit of 1/10s across the fleet "
        "gives it no turn for "
    )
    assert len(_starts(client, run)) == 1
    assert elapsed < 1.0
    assert wait_counts("rare", "rate_limit") == {"taken": 1, "timed_out": 1}


def _reserve_many(url: str, name: str, calls: int, out: str) -> None:
    """One process: reserve `calls` starts of `name` (5 a second), recording each reserved start."""
    client = redis.Redis.from_url(url)
    rates = Rates(client, name, RateLimit(5, 1000))
    for _ in range(calls):
        turn = rates.reserve(60_000)
        assert turn.reserved
        client.rpush(out, turn.start)
    client.close()


def test_reserved_starts_from_many_processes_keep_every_window_within_the_limit(
    redis_url: str, client: redis.Redis
) -> None:
    # given: a scope of 5 starts a second
    name, out = f"test:{uuid.uuid4().hex}", f"test:rates:{uuid.uuid4().hex}"
    context = multiprocessing.get_context("spawn")

    # when: 4 processes reserve 10 starts each, as fast as they can
    processes = [context.Process(target=_reserve_many, args=(redis_url, name, 10, out)) for _ in range(4)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0

    # then: no two of the 40 starts are closer than a fifth of a second (and the guard), so no window of
    # a second holds more than 5
    starts = sorted(float(ms) for ms in client.lrange(out, 0, -1))
    assert len(starts) == 40
    spacing = (1000 + DISPATCH_GUARD_MS) / 5
    assert min(b - a for a, b in itertools.pairwise(starts)) == pytest.approx(spacing, abs=0.01)
    assert _busiest_window([s / 1000 for s in starts], 1.0) == 5


def test_a_turn_given_back_goes_to_the_next_call(client: redis.Redis) -> None:
    # given: a scope of 2 starts a second, with three turns reserved
    rates = Rates(client, f"test:{uuid.uuid4().hex}", RateLimit(2, 1000))
    turns = [rates.reserve(60_000) for _ in range(3)]
    assert [turn.reserved for turn in turns] == [True] * 3
    assert turns[0].wait_ms == 0
    assert 900 < turns[2].wait_ms <= 1000 + DISPATCH_GUARD_MS

    # when: the last call gives its turn back before it came (its caller was cancelled)
    assert rates.give_back(turns[2])

    # then: the next call gets that turn, not a later one
    turn = rates.reserve(60_000)
    assert turn.reserved
    assert turn.start == turns[2].start
    # ... while a turn already come, or one followed by a later reservation, is not given back
    assert not rates.give_back(turns[0])
    assert not rates.give_back(turns[1])


def test_a_turn_past_the_longest_wait_is_not_reserved(client: redis.Redis) -> None:
    # given: a scope of 1 start a second whose turn now is taken
    rates = Rates(client, f"test:{uuid.uuid4().hex}", RateLimit(1, 1000))
    first = rates.reserve(0)
    assert (first.reserved, first.wait_ms) == (True, 0)

    # when: a call that can wait half a second asks
    second = rates.reserve(500)

    # then: it reserves nothing (the next call gets the turn it would have had) and hears its wait
    assert not second.reserved
    assert 900 < second.wait_ms <= 1000 + DISPATCH_GUARD_MS
    third = rates.reserve(2000)
    assert third.reserved
    assert third.wait_ms == pytest.approx(second.wait_ms, abs=20)
