"""A load balancer of the simplest kind in front of replicas: each connection goes to the first
replica that accepts it, so that a client's retry after a replica died reaches a live one."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator, Sequence

from tests._ports import free_port

__all__ = ["failover"]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


@contextlib.contextmanager
def failover(ports: Sequence[int]) -> Iterator[int]:
    """Listen on a free port (yielded) while the block runs, forwarding each connection to the first
    of `ports` that accepts it."""
    port = free_port()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    stop: asyncio.Future[None] = loop.create_future()

    writers: set[asyncio.StreamWriter] = set()

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        writers.add(client_writer)
        for backend in ports:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", backend)
            except OSError:
                continue
            writers.add(writer)
            await asyncio.gather(_pipe(client_reader, writer), _pipe(reader, client_writer))
            return
        client_writer.close()

    async def serve() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        started.set()
        async with server:
            await stop
        for writer in writers:
            writer.close()
        await asyncio.sleep(0)

    def run() -> None:
        try:
            loop.run_until_complete(serve())
        finally:
            loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield port
    finally:
        loop.call_soon_threadsafe(stop.set_result, None)
        thread.join(10)
