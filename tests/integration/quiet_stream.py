"""A tool quiet for 60 s, streamed end to end over curl: the native event stream and a streamed chat
completion both stay open (a `: keep-alive` comment every 15 s) and end with the answer.

Too long for the suite; run by hand, on a Redis of your choosing (the database is a fresh SQLite file):

    .venv/bin/python -m tests.integration.quiet_stream [REDIS_URL] [SECONDS]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tests.integration.fake_openai import fake_openai
from tests.integration.serve.replicas import API_KEY, replica_env, start_replica
from tests.integration.serve.upstream import script
from tests.integration.worker_processes import tool_worker


def curl(*args: str) -> tuple[str, float, int]:
    started = time.monotonic()
    done = subprocess.run(["curl", "-sN", "-m", "300", *args], capture_output=True, text=True, check=False)
    return done.stdout, time.monotonic() - started, done.returncode


def main(redis_url: str, seconds: float) -> None:
    for name in [name for name in os.environ if name.startswith("TOOLFLEET_")]:
        del os.environ[name]
    folder = Path(tempfile.mkdtemp(prefix="quiet-stream-"))
    auth, json_body = f"Authorization: Bearer {API_KEY}", "Content-Type: application/json"
    with fake_openai(script) as upstream:
        worker = tool_worker(
            redis_url,
            ["serve"],
            ["tests.integration.serve_agents"],
            folder / "worker.log",
            f"quiet-{uuid.uuid4().hex[:6]}@h",
        )
        with worker.running(timeout_s=60):
            replica = start_replica(
                replica_env(redis_url, f"sqlite:///{folder}/journal.db", upstream.base_url),
                folder / "serve.log",
            )
            try:
                ns = uuid.uuid4().hex[:8]
                native = curl(
                    f"{replica.base_url}/agents/assistant/invocations",
                    "-H",
                    auth,
                    "-H",
                    json_body,
                    "-H",
                    "Accept: text/event-stream",
                    "-d",
                    f'{{"input": "nap {ns} {seconds:g}"}}',
                )
                chat = curl(
                    f"{replica.base_url}/chat/completions",
                    "-H",
                    auth,
                    "-H",
                    json_body,
                    "-d",
                    json.dumps(
                        {
                            "model": "assistant",
                            "stream": True,
                            "messages": [{"role": "user", "content": f"nap {ns}-c {seconds:g}"}],
                        }
                    ),
                )
            finally:
                replica.stop()
    for label, (text, took, status) in (("native event stream", native), ("streamed chat completion", chat)):
        kept = text.count(": keep-alive")
        print(f"== {label}: curl exit {status} after {took:.1f} s, {kept} keep-alive comments")
        print(text)


if __name__ == "__main__":
    main(
        sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379/7",
        float(sys.argv[2]) if len(sys.argv) > 2 else 60.0,
    )
