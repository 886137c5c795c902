"""A call's fleet-wide concurrency slots: which it needs, waiting for them, and holding them.

A tool declared `@tool(concurrency=N)` runs at most N calls at once in the whole fleet; with
`concurrency_key="tenant"`, at most N per value of that invocation parameter (or, failing that, of
that argument). The orchestrator takes the slot before it publishes the call, so a waiting call holds
no worker and no thread, only a place in line (`workers.runtime.slots`); its wait counts against its
deadline. The slot is held, its lease renewed by this process, until the call's outcome is known;
should this process die, the lease expires and the slot is free again.

Waiting calls are grouped by tenant (the invocation parameter `tenant`, else `default`): free slots
go round-robin between tenants.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from orchestrator._subscription import on_message
from orchestrator.executors._call_events import CallEvent, call_notifier
from orchestrator.telemetry.hooks import slot_waited, slots_held
from workers.protocol import CallTask, OutcomeKind, ToolOutcome
from workers.runtime.rates import key_value
from workers.runtime.slots import GRANTED_CHANNEL, LEASE_TTL_MS, Slots
from workers.tenants import tenant_of
from workers.tools import ToolDefinition

__all__ = ["Needed", "SlotHolder", "needed_slots", "slot_wait_outcome"]

log = logging.getLogger(__name__)

FIRST_POLL_S, MAX_POLL_S = 0.002, 0.05  # asking again while in line, doubling
START_MARGIN_S = 0.05  # a call that waited takes no slot this close to its deadline


@dataclass(frozen=True)
class Needed:
    """One slot a call needs before it is published: of `slots`, waiting in `group`'s line; `whose`
    names them to the model should its deadline pass in line."""

    slots: Slots
    group: str
    whose: str


def needed_slots(
    client: redis.Redis, definition: ToolDefinition, call: CallTask, pool_limit: int | None = None
) -> list[Needed]:
    """The slots a call of `definition` needs, given its invocation's parameters and its arguments:
    its tool's, then its pool's (`pool_limit`), always taken in that order."""
    options = definition.options
    if options.concurrency is None and pool_limit is None:
        return []
    parameters, arguments = call.invocation.parameters, call.request.arguments
    group = tenant_of(parameters)
    needed = []
    if options.concurrency is not None:
        name = f"tool:{definition.name}"
        if options.concurrency_key is not None:
            name += f":{options.concurrency_key}={key_value(options.concurrency_key, parameters, arguments)}"
        whose = "its fleet-wide slots (concurrency)"
        needed.append(Needed(Slots(client, name, options.concurrency), group, whose))
    if pool_limit is not None:
        whose = f"the slots of its pool '{definition.pool}' (pool concurrency)"
        needed.append(Needed(Slots(client, f"pool:{definition.pool}", pool_limit), group, whose))
    return needed


def slot_wait_outcome(definition: ToolDefinition, timeout_s: float, busy: Needed) -> ToolOutcome:
    """What the model hears of a call whose deadline passed while it waited for the slot `busy`."""
    return ToolOutcome(
        kind=OutcomeKind.TIMED_OUT,
        text=(
            f"Tool '{definition.name}' did not start within its deadline of {timeout_s:g} s: all "
            f"{busy.slots.limit} of {busy.whose} stayed busy"
        ),
        error_type="SlotWaitTimeout",
    )


# The calls of this process waiting in line, by task id: how to wake each when its slot is granted.
_wakers: dict[str, Callable[[], None]] = {}
_wakers_lock = threading.Lock()


def _granted(task_id: str) -> None:
    """A slot was granted to `task_id` (published on `GRANTED_CHANNEL`): wake it, if it waits here."""
    with _wakers_lock:
        wake = _wakers.get(task_id)
    if wake is not None:
        wake()


def _wake_when_granted(redis_url: str, task_id: str, woken: asyncio.Event) -> None:
    """Set `woken` (on its loop) whenever a slot is granted to `task_id`, until `_wakers` forgets it."""
    loop = asyncio.get_running_loop()

    def wake() -> None:  # on the listening thread
        with contextlib.suppress(RuntimeError):  # its loop ended meanwhile: nobody to wake
            loop.call_soon_threadsafe(woken.set)

    with _wakers_lock:
        _wakers[task_id] = wake
    on_message(redis_url, GRANTED_CHANNEL, _granted)


def _counted(needs: list[Needed], delta: int) -> None:
    for need in needs:
        slots_held(need.slots.name, delta)


class SlotHolder:
    """The slots this process holds for calls in flight, their leases renewed by one thread."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url  # where slots granted to waiters are published
        self._held: dict[str, list[Needed]] = {}
        self._lock = threading.Lock()
        self._renewer: threading.Thread | None = None
        self._releases: queue.Queue[tuple[str, list[Needed]]] = queue.Queue()

    async def take(
        self, task_id: str, needed: list[Needed], deadline: float, on_wait: Callable[[], None] | None = None
    ) -> Needed | None:
        """Wait (in line, woken when granted a slot, else asking again ever less often) until `task_id`
        holds every slot it needs: None; or, once `deadline` passes first, the one it waited for in
        vain, having left every line and slot. `on_wait` is called once, if the call has to wait."""
        taken: list[Needed] = []
        woken: asyncio.Event | None = None
        try:
            for need in needed:
                poll = FIRST_POLL_S
                while True:
                    if woken is not None:
                        woken.clear()  # before asking: a grant published after it wakes the next wait
                    # A call that waited until too close to its deadline to start takes no slot (one
                    # freed at that deadline, by a call of the same batch, would start it only to time
                    # it out): it did not start within its deadline.
                    late = woken is not None and deadline - time.monotonic() <= START_MARGIN_S
                    if not late and need.slots.try_acquire(task_id, need.group):
                        break
                    if woken is None:
                        woken = asyncio.Event()
                        _wake_when_granted(self.redis_url, task_id, woken)
                        if on_wait is not None:
                            on_wait()
                    remaining = deadline - time.monotonic() - START_MARGIN_S
                    if late or remaining <= 0:
                        _counted(taken, -1)
                        self._give_back(task_id, [*taken, need])
                        return need
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(woken.wait(), min(poll, remaining))
                    poll = min(poll * 2, MAX_POLL_S)
                taken.append(need)
                _counted([need], 1)
                self._hold(task_id, taken)
        except BaseException:
            _counted(taken, -1)
            self._give_back(task_id, [*taken, *needed[len(taken) :]])
            raise
        finally:
            if woken is not None:
                with _wakers_lock:
                    _wakers.pop(task_id, None)
        return None

    async def take_or_refuse(
        self,
        task_id: str,
        task_name: str,
        envelope: CallTask,
        definition: ToolDefinition,
        needed: list[Needed],
        deadline: float,
        timeout_s: float,
        on_call: Callable[[CallEvent], None] | None,
    ) -> tuple[ToolOutcome | None, float]:
        """`take`, telling `on_call` when the call waits: (None, or what the model hears instead, told as
        well; how long it waited in line, 0 when a slot was free at once); counted either way."""
        request = envelope.request
        notify = call_notifier(on_call, task_id, task_name, definition.pool, request.arguments, request.id)
        started = time.monotonic()
        in_line = False

        def on_wait() -> None:
            nonlocal in_line
            in_line = True
            if notify is not None:
                notify("waiting", None)

        try:
            busy = await self.take(task_id, needed, deadline, on_wait)
            refused = None if busy is None else slot_wait_outcome(definition, timeout_s, busy)
        except redis.RedisError as exc:  # Redis did not answer: the call is not published
            refused = ToolOutcome(
                kind=OutcomeKind.EXECUTION_ERROR,
                text=f"Tool '{definition.name}' could not be dispatched: its concurrency slots are "
                f"unreachable ({exc})",
                error_type="BrokerUnavailable",
            )
        elapsed = time.monotonic() - started
        slot_waited(definition, elapsed, refused is None)
        if refused is not None and notify is not None:
            notify(refused.kind.value, None)
        return refused, elapsed if in_line else 0.0

    def release(self, task_id: str) -> None:
        """Free the slots `task_id` holds (the next calls in line get them), on this holder's thread: the
        call's outcome does not wait for it."""
        with self._lock:
            held = self._held.pop(task_id, [])
        if held:
            _counted(held, -1)
            self._releases.put((task_id, held))

    def flush(self) -> None:
        """Free now what calls released: on this thread what the holder's thread has not taken yet, and
        wait for what it is freeing."""
        while True:
            try:
                task_id, needs = self._releases.get_nowait()
            except queue.Empty:
                break
            self._give_back(task_id, needs)
            self._releases.task_done()
        self._releases.join()

    def _hold(self, task_id: str, taken: list[Needed]) -> None:
        with self._lock:
            self._held[task_id] = list(taken)
            if self._renewer is None or not self._renewer.is_alive():
                self._renewer = threading.Thread(
                    target=self._renew_forever, name="toolfleet-slots", daemon=True
                )
                self._renewer.start()

    @staticmethod
    def _give_back(task_id: str, needs: list[Needed]) -> None:
        for need in needs:
            try:
                need.slots.release(task_id, need.group)
            except redis.RedisError as exc:  # its lease expires by itself
                log.warning("could not free slot of %s in %s: %s", task_id, need.slots.name, exc)

    def _renew_forever(self) -> None:
        """Free what calls released as they end; every third of a lease, renew what calls hold."""
        renew_every_s = LEASE_TTL_MS / 3000
        next_renewal = time.monotonic() + renew_every_s
        while True:
            wait_s = next_renewal - time.monotonic()
            if wait_s > 0:  # however many releases come, the renewals are never late
                try:
                    task_id, needs = self._releases.get(timeout=wait_s)
                except queue.Empty:
                    pass
                else:
                    self._give_back(task_id, needs)
                    self._releases.task_done()
                    continue
            next_renewal = time.monotonic() + renew_every_s
            with self._lock:
                by_scope: dict[str, tuple[Slots, list[str]]] = {}
                for task_id, needs in self._held.items():
                    for need in needs:
                        by_scope.setdefault(need.slots.scope, (need.slots, []))[1].append(task_id)
            for slots, task_ids in by_scope.values():
                try:
                    slots.renew(*task_ids)
                except redis.RedisError as exc:  # tried again at the next round, well within the lease
                    log.warning(
                        "could not renew the slots of %d calls in %s: %s", len(task_ids), slots.name, exc
                    )
