"""The deadline-aware result collector: one Redis subscription per process for every call in flight.

Celery's Redis result backend stores a task's state under `celery-task-meta-<id>` and publishes it
on the channel of the same name in one step. The collector subscribes to a call's channel before the
call is published, so no result can be missed, and resolves a future when a final state arrives.
One thread reads the subscription; callers on any thread or event loop subscribe directly (the
connection's writes are serialized by redis-py's lock) and wait on their future with their own
deadline.

Every `check_interval_s` the reader also reads the stored states of the calls still pending — results
published while the subscription was reconnecting are picked up there — and asks the catalog whether
the worker that started a call, or any worker of the call's pool, is still alive. An idempotent
call whose worker is declared lost is published again (same task id) for another worker of its pool
rather than ended: the lost worker's message stays unacknowledged in the broker until its visibility
timeout, long after the call's deadline, so that copy is discarded as expired when it comes back.

A running call's progress arrives on the same channel as the interim state `PROGRESS`
(`workers/calls/progress.py`): each new report (by its `seq`) goes to the call's `on_progress`, and
each state counts as a heartbeat. A call whose tool has a heartbeat timeout is watched from its
STARTED state: when no state with a new beat count has arrived for that long, the call is declared
lost at the next liveness check — as if its worker died (redispatched when idempotent) — whatever
the catalog says of the worker: a hung or stopped tool, a partitioned or vanished machine.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from redis.exceptions import RedisError

from orchestrator._subscription import subscription
from workers.protocol import META_PREFIX, POOL_KEY, PROGRESS_STATE, WORKER_KEY
from workers.redis_client import connect as connect_redis

__all__ = ["FINAL_STATES", "LOST", "MAX_REDISPATCHES", "NO_WORKER", "ResultCollector"]

log = logging.getLogger(__name__)

CONTROL_CHANNEL = "toolfleet:collector"
FINAL_STATES = frozenset({"SUCCESS", "FAILURE", "REVOKED"})
LOST = "TOOLFLEET_WORKER_LOST"
NO_WORKER = "TOOLFLEET_NO_WORKER"


MAX_REDISPATCHES = 3  # per call: each one needs a worker to die while running it
RECONNECT_DELAY_MAX_S = 0.5


@dataclass
class _Pending:
    task_id: str
    pool: str
    future: concurrent.futures.Future[dict[str, Any]]
    since: float = field(default_factory=time.monotonic)
    worker: str | None = None
    on_started: Callable[[str], None] | None = None
    redispatch: Callable[[], None] | None = None
    lost: tuple[str, ...] = ()  # workers declared lost while running it, oldest first
    redispatched_at: float = 0.0  # when it was last published again (monotonic)
    on_progress: Callable[[dict[str, Any]], None] | None = None
    heartbeat_timeout_s: float | None = None
    last_beat: float = 0.0  # when its last beat was heard (monotonic), from its STARTED state on
    beats: int = 0  # the beat count of the last PROGRESS state heard
    progress_seq: int = 0  # the last report passed to `on_progress`


class ResultCollector:
    """Futures for the final states of Celery tasks, fed by one pub/sub connection."""

    _shared: ClassVar[dict[str, ResultCollector]] = {}
    _shared_lock = threading.Lock()

    @classmethod
    def shared(
        cls, redis_url: str, *, check_interval_s: float = 0.5, heartbeat_ttl_s: float = 6.0
    ) -> ResultCollector:
        """The process-wide collector for `redis_url`."""
        with cls._shared_lock:
            collector = cls._shared.get(redis_url)
            if collector is None or collector._closed.is_set():
                collector = cls(redis_url, check_interval_s=check_interval_s, heartbeat_ttl_s=heartbeat_ttl_s)
                cls._shared[redis_url] = collector
            return collector

    def __init__(
        self, redis_url: str, *, check_interval_s: float = 0.5, heartbeat_ttl_s: float = 6.0
    ) -> None:
        self._check_interval_s = check_interval_s
        self._heartbeat_ttl_s = heartbeat_ttl_s
        self._connected = True
        self._trust_liveness_after = 0.0
        self._client = connect_redis(redis_url, socket_timeout=5, socket_connect_timeout=2)
        self._pubsub = subscription(self._client)
        self._pending: dict[str, _Pending] = {}
        self._deferred: list[str] = []  # watched calls whose channels are not subscribed to yet
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._subscribed = threading.Event()
        self._redispatcher = concurrent.futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="toolfleet-redispatch"
        )
        self._thread = threading.Thread(target=self._run, name="toolfleet-collector", daemon=True)
        self._thread.start()

    def watch(
        self,
        task_id: str,
        pool: str,
        on_started: Callable[[str], None] | None = None,
        *,
        redispatch: Callable[[], None] | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        heartbeat_timeout_s: float | None = None,
        deferred: bool = False,
    ) -> concurrent.futures.Future[dict[str, Any]]:
        """Subscribe to `task_id`'s channel and return the future of its final state; with `deferred`,
        at the next `subscribe_deferred` (the calls published together share one `SUBSCRIBE`).

        `on_progress` receives each new progress report (on the collector's thread); with
        `heartbeat_timeout_s`, the call is declared lost when its tool stops beating that long.

        Call it before publishing the task. If Redis is unreachable the call is still watched: its
        stored state is read once Redis answers again.

        With `redispatch` (idempotent calls), a call whose worker is declared lost is not ended: it
        is published again under the same task id by `redispatch()` (on another thread), and
        watched on. The STARTED state the lost worker left behind is then ignored; a STARTED
        published after the call was sent again is taken, whichever worker it names (a worker
        restarted under the lost one's name may take the copy). Up to `MAX_REDISPATCHES` times; the
        caller's deadline bounds the wait as always.
        """
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        with self._lock:
            self._pending[task_id] = _Pending(
                task_id,
                pool,
                future,
                on_started=on_started,
                redispatch=redispatch,
                on_progress=on_progress,
                heartbeat_timeout_s=heartbeat_timeout_s,
            )
        if deferred:
            with self._lock:
                self._deferred.append(task_id)
            return future
        self._subscribe([task_id])
        return future

    def subscribe_deferred(self) -> None:
        """Subscribe, in one command, to the channels of the calls watched with `deferred` since the
        last time (`_publish.Sender` does it right before it publishes them)."""
        with self._lock:
            task_ids, self._deferred = [t for t in self._deferred if t in self._pending], []
        if task_ids:
            self._subscribe(task_ids)

    def _subscribe(self, task_ids: list[str]) -> None:
        self._subscribed.wait(timeout=2)
        if not self._connected:
            return  # subscribed with all pending calls once the connection is back
        try:
            self._pubsub.subscribe(*(META_PREFIX + task_id for task_id in task_ids))
        except (RedisError, OSError) as exc:
            log.warning("subscribe for %s failed (%s); its stored state will be polled", task_ids[0], exc)

    def forget(self, task_id: str) -> None:
        """Stop waiting for `task_id` (its deadline passed, or its caller went away)."""
        with self._lock:
            entry = self._pending.pop(task_id, None)
        if entry is not None:
            self._unsubscribe(task_id)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=5)
        self._redispatcher.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            pending, self._pending = list(self._pending.values()), {}
        for entry in pending:
            if not entry.future.done():
                entry.future.set_exception(RuntimeError("result collector closed"))
        self._pubsub.close()
        self._client.close()

    # -- the reader thread ---------------------------------------------------------------------

    def _run(self) -> None:
        delay = 0.05
        next_check = time.monotonic() + self._check_interval_s
        while not self._closed.is_set():
            try:
                if not self._subscribed.is_set():
                    self._pubsub.subscribe(CONTROL_CHANNEL)
                    self._subscribed.set()
                if not self._connected:
                    self._reconnect()
                timeout = max(0.0, min(0.25, next_check - time.monotonic()))
                message = self._pubsub.get_message(ignore_subscribe_messages=True, timeout=timeout)
                if message is not None and message.get("type") == "message":
                    self._on_message(message)
                if time.monotonic() >= next_check:
                    self._poll_stored()
                    self._check_liveness()
                    next_check = time.monotonic() + self._check_interval_s
                delay = 0.05
            except (RedisError, OSError) as exc:
                log.warning("result subscription interrupted (%s); retrying in %.2f s", exc, delay)
                self._connected = False
                self._subscribed.set()  # callers never wait on a Redis that is down
                self._closed.wait(delay)
                delay = min(delay * 2, RECONNECT_DELAY_MAX_S)
                next_check = time.monotonic()
            except Exception:
                log.exception("result collector error")

    def _reconnect(self) -> None:
        """Subscribe again to every pending call, read what was stored meanwhile, and hold liveness
        verdicts until workers had time to beat again (their heartbeats may have lapsed with Redis)."""
        with self._lock:
            channels = [META_PREFIX + task_id for task_id in self._pending]
        self._pubsub.subscribe(CONTROL_CHANNEL, *channels)
        self._connected = True
        self._trust_liveness_after = time.monotonic() + self._heartbeat_ttl_s
        log.info("result subscription restored (%d calls pending)", len(channels))
        with self._lock:
            for entry in self._pending.values():
                entry.since = 0.0  # due for a read of its stored state now
                entry.last_beat = time.monotonic()  # beats sent during the outage were not heard
        self._poll_stored()

    def _on_message(self, message: dict[str, Any]) -> None:
        channel = message["channel"]
        channel = channel.decode() if isinstance(channel, bytes) else str(channel)
        if not channel.startswith(META_PREFIX):
            return
        task_id = channel[len(META_PREFIX) :]
        if task_id in self._pending:
            try:
                # Delivered as it is published: it was written now, not before a redispatch.
                self._on_state(task_id, json.loads(message["data"]), published_at=time.monotonic())
            except ValueError as exc:
                log.warning("unreadable state of %s ignored: %s", task_id, exc)

    def _on_state(self, task_id: str, meta: dict[str, Any], *, published_at: float | None = None) -> None:
        """Act on a state of `task_id`: a final one resolves its future, a STARTED one names its worker.

        `published_at` is when the state is known to have been written (a published message), None
        when it was read back from the store and may be older than the call's last redispatch."""
        status = meta.get("status")
        if status in FINAL_STATES or status in (LOST, NO_WORKER):
            with self._lock:
                entry = self._pending.pop(task_id, None)
            if entry is None:
                return
            if entry.worker is not None and "worker" not in meta:
                meta = {**meta, "worker": entry.worker}  # who started it, learned from its STARTED state
            if not entry.future.done():
                entry.future.set_result(meta)
            self._unsubscribe(task_id)  # after: its caller goes on meanwhile
        elif status == "STARTED":
            entry = self._pending.get(task_id)
            started = meta.get("result")
            worker = started.get("hostname") if isinstance(started, dict) else meta.get("worker")
            if entry is not None and isinstance(worker, str):
                self._started(entry, worker, published_at)
        elif status == PROGRESS_STATE:
            entry = self._pending.get(task_id)
            report = meta.get("result")
            if entry is not None and isinstance(report, dict):
                self._progress(entry, report, published_at)

    def _started(self, entry: _Pending, worker: str, published_at: float | None) -> bool:
        """Take `worker` as the one running the call (its heartbeat clock starts); False when the
        state is a stale one from a worker declared lost."""
        if worker == entry.worker:
            return True
        if _stale(entry, worker, published_at):
            return False
        entry.worker = worker
        entry.last_beat = time.monotonic()
        if entry.on_started is not None:
            try:
                entry.on_started(worker)
            except Exception:
                log.exception("on_started callback failed")
        return True

    def _progress(self, entry: _Pending, report: dict[str, Any], published_at: float | None) -> None:
        """A PROGRESS state: it names the worker (it may replace STARTED in the store), is a beat
        when its count changed, and a new report when its `seq` is past the last one passed on."""
        worker = report.get("worker")
        if isinstance(worker, str) and not self._started(entry, worker, published_at):
            return
        beats = report.get("beats")
        if isinstance(beats, int) and beats != entry.beats:
            entry.beats, entry.last_beat = beats, time.monotonic()
        seq = report.get("seq")
        if entry.on_progress is not None and isinstance(seq, int) and seq > entry.progress_seq:
            entry.progress_seq = seq
            try:
                entry.on_progress(report)
            except Exception:
                log.exception("on_progress callback failed")

    def _unsubscribe(self, task_id: str) -> None:
        with contextlib.suppress(RedisError, OSError):
            self._pubsub.unsubscribe(META_PREFIX + task_id)

    def _due(self) -> list[_Pending]:
        now = time.monotonic()
        with self._lock:
            return [e for e in self._pending.values() if now - e.since >= self._check_interval_s]

    def _poll_stored(self) -> None:
        """Read the stored states of calls pending longer than one interval (missed publishes)."""
        due = [e.task_id for e in self._due()]
        for start in range(0, len(due), 500):
            chunk = due[start : start + 500]
            values = self._client.mget([META_PREFIX + task_id for task_id in chunk])
            for task_id, raw in zip(chunk, values, strict=True):
                if raw:
                    self._on_state(task_id, json.loads(raw))

    def _check_liveness(self) -> None:
        if time.monotonic() < self._trust_liveness_after:
            return
        due = self._due()
        if not due:
            return
        workers = sorted({e.worker for e in due if e.worker})
        pools = sorted({e.pool for e in due if not e.worker})
        pipe = self._client.pipeline(transaction=False)
        for worker in workers:
            pipe.exists(WORKER_KEY.format(worker))
        now = time.time()
        for pool in pools:
            pipe.zcount(POOL_KEY.format(pool), now, "+inf")
        answers = pipe.execute()
        alive_workers = {w for w, n in zip(workers, answers[: len(workers)], strict=True) if n}
        live_pools = {p for p, n in zip(pools, answers[len(workers) :], strict=True) if n}
        checked = time.monotonic()
        for entry in due:
            if entry.worker and entry.worker not in alive_workers:
                self._lost(entry, entry.worker, {})
            elif entry.worker and entry.heartbeat_timeout_s is not None:
                if checked - entry.last_beat > entry.heartbeat_timeout_s:
                    self._lost(entry, entry.worker, {"heartbeat_timeout_s": entry.heartbeat_timeout_s})
            elif not entry.worker and entry.pool not in live_pools:
                self._on_state(entry.task_id, {"status": NO_WORKER, "pool": entry.pool})

    def _lost(self, entry: _Pending, worker: str, detail: dict[str, Any]) -> None:
        """The call's worker is gone (or its tool stopped beating): dispatch it again, or end it."""
        if entry.redispatch is not None and len(entry.lost) < MAX_REDISPATCHES:
            self._redispatch(entry, worker)
        else:
            self._on_state(entry.task_id, {"status": LOST, "worker": worker, **detail})

    def _redispatch(self, entry: _Pending, lost_worker: str) -> None:
        """Publish an idempotent call whose worker died again, and go on waiting for it."""
        redispatch = entry.redispatch
        assert redispatch is not None
        with self._lock:
            entry.lost = (*entry.lost, lost_worker)
            entry.worker = None
            entry.progress_seq = entry.beats = 0  # the new run reports from its start
            entry.since = entry.redispatched_at = time.monotonic()
        log.info("call %s lost its worker %s; dispatching it again (idempotent)", entry.task_id, lost_worker)

        def publish() -> None:
            try:
                redispatch()
            except Exception as exc:
                log.warning("could not dispatch %s again: %s", entry.task_id, exc)
                self._on_state(entry.task_id, {"status": LOST, "worker": lost_worker})

        try:
            self._redispatcher.submit(publish)
        except RuntimeError:  # closing
            self._on_state(entry.task_id, {"status": LOST, "worker": lost_worker})


def _stale(entry: _Pending, worker: str, published_at: float | None) -> bool:
    """Whether a STARTED naming `worker` is the one a worker declared lost left before the call was
    published again: written by that worker, and not known to be written after the redispatch."""
    if worker not in entry.lost:
        return False
    return published_at is None or published_at < entry.redispatched_at
