"""What a call waits for before it is published: its fleet-wide slots, then its turn under its tool's
fleet-wide rate limit.

The rate limit's turn comes last, right before the publish: a call that reserved its start and then
waited for a slot would start late, bunched with the next calls' starts. Either wait counts against the
call's deadline and holds no worker; a call whose deadline would pass first is told so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from orchestrator.executors._call_events import CallEvent, call_notifier
from orchestrator.executors.celery._pools import Pools
from orchestrator.executors.celery._slots import SlotHolder, needed_slots
from orchestrator.telemetry.hooks import slot_waited
from workers.protocol import CallTask, OutcomeKind, ToolOutcome
from workers.runtime.rates import Rates, rates_of
from workers.tools import ToolDefinition

__all__ = ["Admission", "Admitted"]

log = logging.getLogger(__name__)


class Admission:
    """Admits calls to their pool: slots taken (and held by `slots` until the call's outcome), then the
    rate limit's turn awaited."""

    def __init__(self, client: redis.Redis, redis_url: str, pools: Pools) -> None:
        self.redis = client
        self.pools = pools
        self.slots = SlotHolder(redis_url)  # the fleet-wide concurrency slots held by calls in flight

    async def enter(
        self,
        task_id: str,
        task_name: str,
        envelope: CallTask,
        definition: ToolDefinition,
        deadline: float,
        timeout_s: float,
        on_call: Callable[[CallEvent], None] | None,
    ) -> Admitted | None:
        """Wait until the call may be published, or until it is refused (having held nothing then);
        None, at once, for a call with no limit to wait for (most calls: nothing is built for them)."""
        options, pool_limit = definition.options, self.pools.limit(definition.pool)
        if options.concurrency is None and options.rate_limit is None and pool_limit is None:
            return None
        admitted = Admitted()
        needed = needed_slots(self.redis, definition, envelope, pool_limit)
        if needed:
            admitted.refused, waited_s = await self.slots.take_or_refuse(
                task_id, task_name, envelope, definition, needed, deadline, timeout_s, on_call
            )
            admitted.waited("concurrency", waited_s)
            admitted.holds = admitted.refused is None
        rates = rates_of(self.redis, definition, envelope)
        if rates is not None and admitted.refused is None:
            try:
                admitted.refused, waited_s = await _take_turn(
                    rates, task_id, task_name, envelope, definition, deadline, timeout_s, on_call
                )
            except BaseException:  # cancelled while it waited: it holds nothing
                self._release(task_id, admitted)
                raise
            if admitted.refused is not None:  # it publishes nothing: it holds nothing
                self._release(task_id, admitted)
            admitted.waited("rate_limit", waited_s)
        return admitted

    def _release(self, task_id: str, admitted: Admitted) -> None:
        if admitted.holds:
            self.slots.release(task_id)
            admitted.holds = False


@dataclass
class Admitted:
    """What came of a call's admission: `refused`, what the model hears instead of its publish (None:
    it may be published); whether it `holds` slots to release once its outcome is known; how long it
    waited for each reason."""

    refused: ToolOutcome | None = None
    holds: bool = False
    waits: dict[str, float] = field(default_factory=dict)

    def waited(self, reason: str, seconds: float) -> None:
        if seconds > 0:  # it had to wait: its slot was busy, or its turn still to come
            self.waits[reason] = seconds

    def told(self, outcome: ToolOutcome) -> ToolOutcome:
        """`outcome`, saying how long the call waited before it was published (in all), and mostly for
        what, if it waited at all."""
        reason = max(self.waits, key=self.waits.__getitem__, default=None)
        if reason is None:
            return outcome
        waited_s = round(sum(self.waits.values()), 3)
        return dataclasses.replace(outcome, waited_s=waited_s, wait_reason=reason)


async def _take_turn(
    rates: Rates,
    task_id: str,
    task_name: str,
    envelope: CallTask,
    definition: ToolDefinition,
    deadline: float,
    timeout_s: float,
    on_call: Callable[[CallEvent], None] | None,
) -> tuple[ToolOutcome | None, float]:
    """Reserve the call's start under `rates` and sleep until it: (None, how long it slept) — or, when
    its start would come after its deadline (nothing reserved then) or Redis does not answer, (what
    the model hears, 0)."""
    request = envelope.request
    notify = call_notifier(on_call, task_id, task_name, definition.pool, request.arguments, request.id)
    started = time.monotonic()
    try:
        turn = rates.reserve(int((deadline - started) * 1000))
    except redis.RedisError as exc:  # the call is not published
        unreachable = ToolOutcome(
            kind=OutcomeKind.EXECUTION_ERROR,
            text=f"Tool '{definition.name}' could not be dispatched: its rate limit is unreachable ({exc})",
            error_type="BrokerUnavailable",
        )
        return unreachable, 0.0
    if not turn.reserved:
        slot_waited(definition, 0.0, False, "rate_limit")
        refused = ToolOutcome(
            kind=OutcomeKind.TIMED_OUT,
            text=(
                f"Tool '{definition.name}' could not start within its deadline of {timeout_s:g} s: its "
                f"rate limit of {rates.rate} across the fleet gives it no turn for "
                f"{turn.wait_ms / 1000:.1f} s"
            ),
            error_type="RateLimitWaitTimeout",
        )
        if notify is not None:
            notify(refused.kind.value, None)
        return refused, 0.0
    if turn.wait_ms > 0:
        if notify is not None:
            notify("waiting", None)
        try:
            await asyncio.sleep(turn.wait_ms / 1000)
        except BaseException:  # cancelled: its turn goes to the next call, if none was reserved since
            with contextlib.suppress(redis.RedisError):
                rates.give_back(turn)
            raise
    elapsed = time.monotonic() - started
    slot_waited(definition, elapsed, True, "rate_limit")
    return None, elapsed if turn.wait_ms > 0 else 0.0
