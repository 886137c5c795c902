"""A local server that speaks OpenAI's chat-completions wire format, streamed, for `toolfleet chat` tests.

It plays a weather assistant: asked about the weather in a city (the last message is the user's), it
streams a `get_weather` call for that city; given the tool's result (the last message is a tool
message), it streams a final answer that quotes the result. Every request body and its headers are
kept, so a test can assert on what the model was sent. Chunks have the shape of recorded real ones
(tests/orchestrator/models/fixtures/openai_stream_tool_calls.txt).

`hold_after` makes the final answer pause after its first piece until `release` is set: a test can
see that the first piece reached the terminal before the rest was even sent.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAi"]

_CREATED = 1752667331
_MODEL = "gpt-4o-mini-2024-07-18"


class FakeOpenAi:
    """`with FakeOpenAi() as server:` — `server.base_url` is `http://127.0.0.1:<port>/v1`."""

    def __init__(self, *, hold_s: float = 0.0) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.hold = threading.Event()
        self.release = threading.Event()
        self._hold_s = hold_s
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAi:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def _chunks(self, body: dict[str, Any]) -> Iterator[dict[str, Any] | None]:
        """The response to `body`, chunk by chunk; `None` marks where a held answer pauses."""
        messages = body["messages"]
        last = messages[-1]
        number = len(self.requests)
        if last["role"] == "tool":
            call = next(m for m in reversed(messages) if m["role"] == "assistant" and m.get("tool_calls"))
            city = json.loads(call["tool_calls"][0]["function"]["arguments"])["city"]
            forecast = json.loads(last["content"])
            summary = f"{forecast['temperature']}°C, {forecast['summary']}."
            yield _chunk(number, {"role": "assistant", "content": ""})
            yield _chunk(number, {"content": "Forecast for "})
            yield _chunk(number, {"content": f"{city}: "})
            yield None
            middle = len(summary) // 2
            for piece in (summary[:middle], summary[middle:]):
                yield _chunk(number, {"content": piece})
            yield _chunk(number, {}, finish_reason="stop")
        else:
            found = re.search(r"weather in (\w+)", str(last.get("content")))
            city = found[1] if found else "Nowhere"
            arguments = json.dumps({"city": city})
            call_id = f"call_{number:02d}{city}"
            yield _chunk(number, {"role": "assistant", "content": None})
            yield _chunk(
                number,
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                },
            )
            half = len(arguments) // 2
            for piece in (arguments[:half], arguments[half:]):
                yield _chunk(number, {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            yield _chunk(number, {}, finish_reason="tool_calls")
        yield {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion.chunk",
            "created": _CREATED,
            "model": _MODEL,
            "choices": [],
            "usage": {"prompt_tokens": 90, "completion_tokens": 12, "total_tokens": 102},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length))
                if self.path != "/v1/chat/completions" or not body.get("stream"):
                    self.send_error(404, f"only streamed /v1/chat/completions here, not {self.path}")
                    return
                with fake._lock:
                    chunks = list(fake._chunks(body))
                    fake.requests.append(body)
                    fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                for chunk in chunks:
                    if chunk is None:
                        if fake._hold_s > 0:
                            fake.hold.set()
                            fake.release.wait(fake._hold_s)
                        continue
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def _chunk(number: int, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion.chunk",
        "created": _CREATED,
        "model": _MODEL,
        "system_fingerprint": "fp_06737a9306",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        "usage": None,
    }
