"""A fault proxy for one link between two hosts of the soak: TCP in, TCP out, with latency added to
every piece of data, the link stalled (data held, connections kept) or cut (connections closed, new
ones refused) until healed.

It runs its own event loop on a thread of its own, so that the soak's driver controls it with plain
calls (`add_latency`, `stall`, `cut`, `heal`) from any thread. Every wait it makes is bounded: a
stalled piece waits at most `MAX_STALL_S`, then the connection is closed, as a real link's would time
out.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MAX_STALL_S", "FaultProxy", "LinkState"]

MAX_STALL_S = 60.0  # the longest a stalled piece of data waits before its connection is dropped
_CHUNK = 65536
STOP_WAIT_S = 6.0  # how long `stop` waits for its connections' tasks (a connect in progress: 5 s)


@dataclass(frozen=True)
class LinkState:
    """What the link does now: its added latency (seconds, each way), and whether it is stalled or cut."""

    latency_s: float = 0.0
    stalled: bool = False
    cut: bool = False


class FaultProxy:
    """Forwards `listen` (host, port) to `target` (host, port), with the faults it is told to make."""

    def __init__(self, name: str, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.name = name
        self.listen = listen
        self.target = target
        self.state = LinkState()
        self.connections = 0  # accepted so far
        self._loop = asyncio.new_event_loop()
        self._flowing: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"proxy-{name}", daemon=True)

    # -- control, from any thread --------------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Listen (returns once it does)."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def stop(self) -> None:
        """Close every connection and stop listening."""
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def add_latency(self, seconds: float) -> None:
        """Delay every piece of data by `seconds` each way (0: none)."""
        self._call(lambda: self._set(LinkState(max(seconds, 0.0), self.state.stalled, self.state.cut)))

    def stall(self) -> None:
        """Hold every piece of data (the connections stay open) until `heal`."""
        self._call(lambda: self._set(LinkState(self.state.latency_s, True, self.state.cut)))

    def cut(self) -> None:
        """Close every connection, and refuse new ones until `heal`."""
        self._call(lambda: self._set(LinkState(self.state.latency_s, self.state.stalled, True)))

    def heal(self) -> None:
        """Let data flow and connections in again (the latency stays until set to 0)."""
        self._call(lambda: self._set(LinkState(self.state.latency_s, False, False)))

    def _call(self, change: Callable[[], None]) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                change()
            finally:
                done.set()

        if not self._thread.is_alive():
            return  # stopped (a restarted link is a new proxy): nothing to change
        try:
            self._loop.call_soon_threadsafe(run)
        except RuntimeError:  # stopped between the check and the call
            return
        done.wait(timeout=10)

    # -- the loop's side -----------------------------------------------------------------------------

    def _set(self, state: LinkState) -> None:
        assert self._flowing is not None
        self.state = state
        if state.stalled:
            self._flowing.clear()
        else:
            self._flowing.set()
        if state.cut:
            for writer in list(self._writers):
                writer.close()

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, *self.listen)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._tasks:  # their connections closed, they end by themselves (cancelled, asyncio complains)
            await asyncio.wait(list(self._tasks), timeout=STOP_WAIT_S)

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if self.state.cut:
            client_writer.close()
            return
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(*self.target), timeout=5)
        except (OSError, TimeoutError):
            client_writer.close()
            return
        self._writers.update((client_writer, writer))
        try:
            await asyncio.gather(self._pipe(client_reader, writer), self._pipe(reader, client_writer))
        finally:
            self._writers.difference_update((client_writer, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        try:
            while data := await reader.read(_CHUNK):
                if self.state.latency_s > 0:
                    await asyncio.sleep(self.state.latency_s)
                if not self._flowing.is_set():
                    await asyncio.wait_for(self._flowing.wait(), timeout=MAX_STALL_S)
                if self.state.cut:
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError, TimeoutError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
