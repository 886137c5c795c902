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
from dataclasses import dataclass

import redis

from orchestrator.executors._call_events import CallEvent, call_notifier
from orchestrator.executors.celery._pools import Pools
from orchestrator.executors.celery._slots import SlotHolder, needed_slots
from orchestrator.telemetry.hooks import slot_waited
from workers.protocol import CallTask, OutcomeKind, ToolOutcome
from workers.runtime.rates import Rates, rate_scope
from workers.tools import ToolDefinition
from workers.tools.rate_limits import parse_rate_limit

__all__ = ["Admission", "Admitted", "needed_rate"]

log = logging.getLogger(__name__)

WAIT_SHOWN_S = 0.005  # a shorter wait (a slot or turn free at once: two Redis round trips) is no wait


def needed_rate(client: redis.Redis, definition: ToolDefinition, call: CallTask) -> Rates | None:
    """The reservations a call of `definition` takes its turn among, if its tool has a rate limit."""
    name = rate_scope(definition, call.invocation.parameters, call.request.arguments)
    if name is None:
        return None
    assert definition.options.rate_limit is not None
    return Rates(client, f"{name}:dispatch", parse_rate_limit(definition.options.rate_limit))


class Admission:
    """Admits calls to their pool: slots taken (and held by `slots` until the call's outcome), then the
    rate limit's turn awaited."""

    def __init__(self, client: redis.Redis, pools: Pools) -> None:
        self.redis = client
        self.pools = pools
        self.slots = SlotHolder()  # the fleet-wide concurrency slots held by calls in flight

    async def enter(
        self,
        task_id: str,
        task_name: str,
        envelope: CallTask,
        definition: ToolDefinition,
        deadline: float,
        timeout_s: float,
        on_call: Callable[[CallEvent], None] | None,
    ) -> Admitted:
        """Wait until the call may be published, or until it is refused (having held nothing then)."""
        admitted = Admitted()
        needed = needed_slots(self.redis, definition, envelope, self.pools.limit(definition.pool))
        if needed:
            began = time.monotonic()
            admitted.refused = await self.slots.take_or_refuse(
                task_id, task_name, envelope, definition, needed, deadline, timeout_s, on_call
            )
            admitted.waited(time.monotonic() - began, "concurrency")
            if admitted.refused is not None:
                return admitted
            admitted.holds = True
        rates = needed_rate(self.redis, definition, envelope)
        if rates is not None:
            began = time.monotonic()
            try:
                admitted.refused = await _take_turn(
                    rates, task_id, task_name, envelope, definition, deadline, timeout_s, on_call
                )
            except BaseException:
                if needed:
                    self.slots.release(task_id)
                raise
            admitted.waited(time.monotonic() - began, "rate_limit")
            if admitted.refused is not None and needed:
                self.slots.release(task_id)
                admitted.holds = False
        return admitted


@dataclass
class Admitted:
    """What came of a call's admission: `refused`, what the model hears instead of its publish (None:
    it may be published); whether it `holds` slots to release once its outcome is known; how long it
    waited, and mostly for what."""

    refused: ToolOutcome | None = None
    holds: bool = False
    waited_s: float = 0.0
    reason: str | None = None
    _longest_s: float = 0.0

    def waited(self, seconds: float, reason: str) -> None:
        self.waited_s += seconds
        if seconds >= WAIT_SHOWN_S and seconds > self._longest_s:
            self._longest_s, self.reason = seconds, reason

    def told(self, outcome: ToolOutcome) -> ToolOutcome:
        """`outcome`, saying how long the call waited before it was published, if it did."""
        if self.reason is None:
            return outcome
        return dataclasses.replace(outcome, waited_s=round(self.waited_s, 3), wait_reason=self.reason)


async def _take_turn(
    rates: Rates,
    task_id: str,
    task_name: str,
    envelope: CallTask,
    definition: ToolDefinition,
    deadline: float,
    timeout_s: float,
    on_call: Callable[[CallEvent], None] | None,
) -> ToolOutcome | None:
    """Reserve the call's start under `rates` and sleep until it: None — or, when its start would come
    after its deadline (nothing reserved then) or Redis does not answer, what the model hears."""
    request = envelope.request
    notify = call_notifier(on_call, task_id, task_name, definition.pool, request.arguments, request.id)
    started = time.monotonic()
    try:
        turn = rates.reserve(int((deadline - started) * 1000))
    except redis.RedisError as exc:  # the call is not published
        return ToolOutcome(
            kind=OutcomeKind.EXECUTION_ERROR,
            text=f"Tool '{definition.name}' could not be dispatched: its rate limit is unreachable ({exc})",
            error_type="BrokerUnavailable",
        )
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
        return refused
    if turn.wait_ms > 0:
        if notify is not None:
            notify("waiting", None)
        try:
            await asyncio.sleep(turn.wait_ms / 1000)
        except BaseException:  # cancelled: its turn goes to the next call, if none was reserved since
            with contextlib.suppress(redis.RedisError):
                rates.give_back(turn)
            raise
    slot_waited(definition, time.monotonic() - started, True, "rate_limit")
    return None
