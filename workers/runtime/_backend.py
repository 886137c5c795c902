"""The workers' Redis result backend: each state stored in one round trip, atomically.

Celery's Redis backend stores a state in two round trips: a GET (a SUCCESS already stored is never
overwritten, so a redelivered task cannot replace its first result) and then a SET + PUBLISH
transaction. A tool call stores two states (STARTED, then its outcome), so four round trips per
call, each one a GIL hand-over on a threads pool. Here the same rule, the SET and the PUBLISH run
as one Lua script: one round trip per state, and the check and the write cannot interleave with
another worker's.

The STARTED state's script also answers whether the orchestrator already gave the call up (its
`CALL_CANCELLED_KEY`, written before a revoke a threads pool can miss): the worker reads it from
`cancelled_at_start` instead of asking Redis again before it runs the tool.

A tool's progress travels as the custom state `PROGRESS` (`workers.protocol.PROGRESS_STATE`), stored
and published by the same script; it never replaces a final state (SUCCESS, FAILURE, REVOKED): a
report held by the rate limit and sent late cannot hide the call's outcome.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import redis
from celery import states
from celery.backends.base import BackendStoreError
from celery.backends.redis import RedisBackend, SentinelBackend

from workers.protocol import CALL_CANCELLED_KEY, PROGRESS_STATE

__all__ = ["STORE_SCRIPT", "ResultBackend", "SentinelResultBackend", "cancelled_at_start"]

# KEYS[1]: the task's meta key; KEYS[2], with a STARTED state only: the call's cancellation mark.
# ARGV[1]: the encoded meta; ARGV[2]: expiry in seconds (0: none); ARGV[3]: '1' when the state is an
# interim one (PROGRESS) that must not replace any final state.
# Returns 1 when stored and published, 0 when the state already there was kept, plus 2 when the
# cancellation mark KEYS[2] exists.
STORE_SCRIPT = """
local marked = 0
if KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1 then
  marked = 2
end
local current = redis.call('GET', KEYS[1])
if current then
  local interim = ARGV[3] == '1'
  if interim or string.find(current, 'SUCCESS', 1, true) then
    local ok, meta = pcall(cjson.decode, current)
    if ok and type(meta) == 'table' then
      local status = meta['status']
      if status == 'SUCCESS' or (interim and (status == 'FAILURE' or status == 'REVOKED')) then
        return marked
      end
    end
  end
end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ttl)
else
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('PUBLISH', KEYS[1], ARGV[1])
return 1 + marked
"""

_started = threading.local()  # per thread: (task id, whether its cancellation mark was there at STARTED)


def cancelled_at_start(task_id: str) -> bool | None:
    """Whether the call `task_id` was marked cancelled when this thread stored its STARTED state;
    None when this thread stored none for it (another backend, or STARTED states not tracked)."""
    seen = getattr(_started, "seen", None)
    if seen is None or seen[0] != task_id:
        return None
    return bool(seen[1])


class _Store:
    """One state waiting to be written. Its `done` is released once it is written (with `error` set
    if that failed), or earlier with `lead` set: its thread is then the one to write."""

    __slots__ = ("done", "error", "expires", "interim", "key", "lead", "mark", "reply", "value")

    def __init__(self, key: bytes, value: str, expires: int, interim: bool, mark: str | None) -> None:
        self.key, self.value, self.expires, self.interim, self.mark = key, value, expires, interim, mark
        self.reply = 0
        self.error: BaseException | None = None
        self.lead = False
        self.done = threading.Lock()
        self.done.acquire()


class _GroupWriter:
    """Writes the states of one process in batches: one pipelined round trip for all those queued.

    A thread storing a state queues it; if no write is under way it becomes the writer and sends
    everything queued (its own state included) in one pipeline; otherwise it waits. A writer writes
    one batch, then hands the writing to the thread of the next state queued meanwhile, so no thread
    keeps writing for the others while its own call waits. When 100 calls finish together, that is
    a few round trips instead of 100, and a lone call pays nothing extra.
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._sha = ""
        self._lock = threading.Lock()
        self._queue: list[_Store] = []
        self._writing = False

    def store(
        self, key: bytes, value: str, expires: int, *, interim: bool = False, mark: str | None = None
    ) -> int:
        """Store one state; the script's reply (see `STORE_SCRIPT`)."""
        item = _Store(key, value, expires, interim, mark)
        with self._lock:
            self._queue.append(item)
            lead = not self._writing
            self._writing = True
        if not lead:
            item.done.acquire()  # written by another thread, or handed the writing
            lead = item.lead
        if lead:
            self._write_batch()  # the batch holds this thread's own state: `done` is released
            item.done.acquire()
        if item.error is not None:
            raise item.error
        return item.reply

    def _write_batch(self) -> None:
        with self._lock:
            batch, self._queue = self._queue, []
        error: BaseException | None = None
        try:
            self._write(batch)
        except BaseException as exc:  # each waiting thread gets it, and Celery's retry policy applies
            error = exc
        for item in batch:
            item.error = error
            item.done.release()
        with self._lock:
            if not self._queue:
                self._writing = False
                return
            successor = self._queue[0]
        successor.lead = True
        successor.done.release()

    def _write(self, batch: list[_Store]) -> None:
        if not self._sha:
            self._sha = self._client.script_load(STORE_SCRIPT)
        for attempt in range(2):
            pipe = self._client.pipeline(transaction=False)
            for item in batch:
                keys = (item.key,) if item.mark is None else (item.key, item.mark)
                interim = "1" if item.interim else "0"
                pipe.evalsha(self._sha, len(keys), *keys, item.value, item.expires, interim)
            try:
                for item, reply in zip(batch, pipe.execute(), strict=True):
                    item.reply = int(reply or 0)
                return
            except redis.exceptions.NoScriptError:  # the server lost its scripts (a restart): load again
                if attempt:
                    raise
                self._sha = self._client.script_load(STORE_SCRIPT)


_writers: dict[tuple[int, str], _GroupWriter] = {}
_writers_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked pool child starts with no writer and a free lock, whatever its parent was doing."""
    global _writers_lock
    _writers.clear()
    _writers_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class ResultBackend(RedisBackend):  # type: ignore[misc]
    """`RedisBackend` with one-round-trip, batched state stores; everything else is Celery's own.

    Set as the app's backend class, it takes its URL from `result_backend` as the stock one does.
    Celery makes one backend per thread; the writer is shared by the whole process.
    """

    def __init__(self, app: Any = None, url: str | None = None, **kwargs: Any) -> None:
        if url is None and app is not None:
            url = str(app.conf.result_backend)
        super().__init__(app=app, url=url, **kwargs)

    @property
    def _writer(self) -> _GroupWriter:
        key = (os.getpid(), str(self.url))
        writer = _writers.get(key)
        if writer is None:
            with _writers_lock:
                writer = _writers.get(key)
                if writer is None:
                    writer = _writers[key] = _GroupWriter(self.client)
        return writer

    def _store_result(
        self,
        task_id: str,
        result: Any,
        state: str,
        traceback: str | None = None,
        request: Any = None,
        **kwargs: Any,
    ) -> Any:
        meta = self._get_result_meta(result=result, state=state, traceback=traceback, request=request)
        meta["task_id"] = task_id.decode() if isinstance(task_id, bytes) else task_id
        value = self.encode(meta)
        if isinstance(value, str) and len(value) > self._MAX_STR_VALUE_SIZE:
            raise BackendStoreError("value too large for Redis backend", state=state, task_id=task_id)
        expires = self.failure_expires if state == states.FAILURE else self.expires
        interim = state == PROGRESS_STATE
        key = self.get_key_for_task(task_id)
        if state != states.STARTED:
            self._writer.store(key, value, int(expires or 0), interim=interim)
            return result
        task_id = meta["task_id"]
        reply = self._writer.store(key, value, int(expires or 0), mark=CALL_CANCELLED_KEY.format(task_id))
        _started.seen = (task_id, reply & 2)
        return result


class SentinelResultBackend(ResultBackend, SentinelBackend):  # type: ignore[misc]
    """`ResultBackend` on a Redis behind Sentinel: its client asks the sentinels for the master."""
