"""`async def` tools the async-tool tests run on a threads pool and a prefork pool of their own."""

from __future__ import annotations

import asyncio
import os
import threading

from workers import tool

THREADS = "async-threads"
PREFORK = "async-prefork"


async def _where() -> str:
    loop = asyncio.get_running_loop()
    return f"{os.getpid()}:{threading.get_ident()}:{id(loop)}"


@tool("Where this async call ran: process, thread and event loop", pool=THREADS, timeout=10)
async def where_threads() -> str:
    return await _where()


@tool("Where this async call ran: process, thread and event loop", pool=PREFORK, timeout=10)
async def where_prefork() -> str:
    return await _where()


@tool("Sleeps asynchronously", pool=THREADS, timeout=10)
async def async_nap(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "rested"


@tool("Sleeps asynchronously past its deadline", pool=PREFORK, timeout=1)
async def async_overrun() -> str:
    await asyncio.sleep(30)
    return "never"


@tool("Leaves a task behind that would count forever", pool=THREADS, timeout=10)
async def leave_a_task() -> int:
    async def forever() -> None:
        while True:
            await asyncio.sleep(0.01)

    asyncio.get_running_loop().create_task(forever())
    await asyncio.sleep(0)
    return len(asyncio.all_tasks())


@tool("Fails asynchronously", pool=THREADS, timeout=10)
async def async_fail() -> str:
    await asyncio.sleep(0)
    raise RuntimeError("the async tool failed")
