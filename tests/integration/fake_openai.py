"""A local server speaking OpenAI's chat-completions format, answering from a script.

It lets code written for `OpenAiChatModel("gpt-4o-mini")` run unchanged but for its `base_url`: the
real provider's HTTP, JSON and server-sent-event handling are exercised, and every request body is
recorded, so a test reads exactly which tools the model was shown.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Reply", "ToolCall", "fake_openai"]


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a scripted answer."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """A scripted answer: text, tool calls, or both."""

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)


Script = Callable[[dict[str, Any]], Reply]


@dataclass
class FakeOpenAi:
    """The running server: its `base_url` and the request bodies it received, in order."""

    base_url: str
    requests: list[dict[str, Any]] = field(default_factory=list)

    def tool_names(self, index: int) -> set[str]:
        """The names of the tools request `index` showed the model."""
        return {tool["function"]["name"] for tool in self.requests[index].get("tools") or []}


def _completion(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in reply.tool_calls
        ]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _chunks(reply: Reply, model: str) -> Iterator[dict[str, Any]]:
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model}
    if reply.content:
        for number, word in enumerate(reply.content.split(" ")):  # the pieces add up to the content
            piece = word if number == 0 else f" {word}"
            yield {**base, "choices": [{"index": 0, "delta": {"content": piece}}]}
    for index, call in enumerate(reply.tool_calls):
        function = {"name": call.name, "arguments": json.dumps(call.arguments)}
        delta = {"tool_calls": [{"index": index, "id": call.id, "type": "function", "function": function}]}
        yield {**base, "choices": [{"index": 0, "delta": delta}]}
    yield {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": _finish(reply)}]}
    yield {**base, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def _finish(reply: Reply) -> str:
    return "tool_calls" if reply.tool_calls else "stop"


@contextmanager
def fake_openai(script: Script) -> Iterator[FakeOpenAi]:
    """Serve `script` at `http://127.0.0.1:<port>/v1` until the block ends."""
    server_state = FakeOpenAi(base_url="")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if not self.path.endswith("/chat/completions"):
                self.send_error(404)
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                server_state.requests.append(body)
            try:
                reply = script(body)
            except Exception as exc:  # a script that cannot answer: a 400 the client reports, not a hang
                self._send_json(400, {"error": {"message": f"fake server: {exc}", "type": "invalid_request"}})
                return
            model = str(body.get("model", ""))
            if body.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in _chunks(reply, model):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True
            else:
                self._send_json(200, _completion(reply, model))

        def _send_json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the test reads `requests`

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="fake-openai", daemon=True)
    thread.start()
    server_state.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield server_state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
