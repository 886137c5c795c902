"""The capacity run's clients: `python -m bench._capacity_load CONFIG` (JSON: `targets`, a list of
`host:port`; `clients`; `agent`; `api_key`).

`clients` connections in one asyncio loop, spread round-robin over the replicas, each sending one
non-streaming `POST /v1/chat/completions` after another over a keep-alive HTTP/1.1 connection,
written and read by hand (no HTTP library: the clients share the machine's two cores with the fleet
they measure, and spend as little of them as they can). A line `mark` on stdin is answered on stdout
with one JSON line: the completions answered 200 so far, the others, and `time.monotonic()`; `stop`
(or the end of stdin) ends the process.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

__all__ = ["main"]


class Counts:
    ok = 0
    failed = 0


def _request(host: str, agent: str, api_key: str) -> bytes:
    body = json.dumps({"model": agent, "messages": [{"role": "user", "content": "go"}]}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {api_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _client(target: str, agent: str, api_key: str, counts: Counts) -> None:
    host, port = target.rsplit(":", 1)
    request = _request(target, agent, api_key)
    while True:
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
            while True:
                writer.write(request)
                status = await reader.readline()
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                if status.split(b" ", 2)[1:2] == [b"200"]:
                    counts.ok += 1
                else:
                    counts.failed += 1
        except (OSError, asyncio.IncompleteReadError, IndexError, ValueError):
            counts.failed += 1
            await asyncio.sleep(0.05)


async def _run(config: dict[str, Any]) -> None:
    counts = Counts()
    targets = list(config["targets"])
    tasks = [
        asyncio.create_task(_client(targets[n % len(targets)], config["agent"], config["api_key"], counts))
        for n in range(int(config["clients"]))
    ]
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if line.strip() != "mark":
            break
        print(json.dumps({"ok": counts.ok, "failed": counts.failed, "t": time.monotonic()}), flush=True)
    for task in tasks:
        task.cancel()


def main() -> None:
    with open(sys.argv[1]) as handle:
        config = json.load(handle)
    asyncio.run(_run(config))


if __name__ == "__main__":
    main()
