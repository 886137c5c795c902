"""What `toolfleet demo` and `toolfleet chat` show on a terminal: the live table of tool calls, and the
model named on the command line (`--model PROVIDER:MODEL`).

`LiveTable` shows every call in flight — tool, pool, worker, state, elapsed and a short form of its
arguments — redrawn in place on a terminal, a line per change otherwise; text streamed between the
rows (a model's answer) is kept on lines of its own. `chat_model` builds a real model from
`openai:<model>` or `anthropic:<model>`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TextIO

from orchestrator.errors import ModelAuthenticationError, ModelSpecError, SetupError
from orchestrator.executors.celery import CallEvent
from orchestrator.models.base import ChatModel

__all__ = [
    "COLUMN_WIDTHS",
    "PROVIDERS",
    "LiveTable",
    "ModelSpecError",
    "add_model_argument",
    "aligned",
    "chat_model",
    "cut",
    "model_of",
    "short_arguments",
]

# Provider name -> the model used when the spec names none, and the environment variable of its key.
PROVIDERS = {
    "openai": ("gpt-4o-mini", "OPENAI_API_KEY"),
    "anthropic": ("claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
}

ARGUMENTS_WIDTH = 48
# The widths of the table's columns task, pool, worker and state (the longest outcome kind,
# `execution_error`, and a space); elapsed and the call's arguments follow. A longer name is cut.
COLUMN_WIDTHS = (24, 6, 12, 16)


def chat_model(spec: str, *, base_url: str | None = None, api_key: str | None = None) -> ChatModel:
    """The model of `PROVIDER:MODEL` (`openai:gpt-4o-mini`, `anthropic:claude-sonnet-4-5`; the model
    name may be left out). `base_url` reaches an OpenAI-compatible server (or another Anthropic
    endpoint); without `api_key` the provider's own environment variable is read. A missing key the
    provider needs raises `ModelAuthenticationError`."""
    provider, _, name = spec.partition(":")
    provider = provider.strip().lower()
    if provider not in PROVIDERS:
        raise ModelSpecError(
            f"--model must be openai:<model> or anthropic:<model>, got {spec!r} "
            f"(unknown provider {provider!r})"
        )
    model = name.strip() or PROVIDERS[provider][0]
    if provider == "openai":
        from orchestrator.models.openai import OpenAiChatModel

        if base_url is None:
            return OpenAiChatModel(model, api_key=api_key)
        return OpenAiChatModel(model, api_key=api_key, base_url=base_url)
    from orchestrator.models.anthropic import AnthropicChatModel

    if base_url is None:
        return AnthropicChatModel(model, api_key=api_key)
    return AnthropicChatModel(model, api_key=api_key, base_url=base_url)


def add_model_argument(parser: argparse.ArgumentParser, *, default: str | None, help: str) -> None:
    """The `--model PROVIDER:MODEL` option of a command (`model_of` builds the model it names)."""
    parser.add_argument("--model", default=default, metavar="PROVIDER:MODEL", help=help)


def model_of(
    spec: str, *, base_url: str | None = None, api_key_env: str | None = None, key_hint: str = ""
) -> ChatModel:
    """The model `--model spec` names, its key read from `api_key_env` (else the provider's own
    variable). A bad spec or a missing key is a `SetupError` whose one line says what to set
    (`key_hint` is added to the missing-key message)."""
    api_key: str | None = None
    if api_key_env is not None:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise SetupError(f"no API key: the environment variable {api_key_env} is not set")
    try:
        return chat_model(spec, base_url=base_url, api_key=api_key)
    except ModelSpecError as exc:
        raise SetupError(str(exc)) from None
    except ModelAuthenticationError:
        variable = api_key_env or provider_key_variable(spec)
        raise SetupError(f"no API key for {spec}: set {variable}{key_hint}") from None


def provider_key_variable(spec: str) -> str:
    """The environment variable the provider of `spec` reads its key from."""
    provider = spec.partition(":")[0].strip().lower()
    return PROVIDERS[provider][1] if provider in PROVIDERS else "the provider's API key variable"


def short_arguments(arguments: str, width: int = ARGUMENTS_WIDTH) -> str:
    """A call's JSON arguments as `city=London, days=3`, cut to `width` characters."""
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        text = ", ".join(f"{key}={_value(value)}" for key, value in parsed.items())
    else:
        text = " ".join(arguments.split())
    return cut(text, width)


def cut(text: str, width: int) -> str:
    """`text` as is when it fits in `width` characters, else cut to `width` ending with "…"."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def aligned(texts: Iterable[str], widths: Iterable[int]) -> str:
    """Columns of a table: each text padded, or cut (`cut`), to its width, a space between."""
    return " ".join(f"{cut(text, width):{width}}" for text, width in zip(texts, widths, strict=True))


def progress_text(fraction: float | None, message: str | None) -> str:
    """A progress report as people read it: `40% copied part 4`."""
    parts = [f"{fraction * 100:.0f}%"] if fraction is not None else []
    if message:
        parts.append(cut(message, ARGUMENTS_WIDTH))
    return " ".join(parts) or "working"


def _value(value: object) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass
class _Row:
    task: str
    pool: str
    worker: str | None
    state: str
    first: float
    at: float
    arguments: str
    call_id: str | None = None  # the model's id of the call (of a compensation: of the call it undoes)
    progress: str = ""  # the latest progress its tool reported, while it runs


_RUNNING = ("waiting", "queued", "started")


class LiveTable:
    """Every call in flight: tool, pool, worker, state, elapsed and its arguments — redrawn on a
    terminal, a line per change otherwise.

    Feed it `CallEvent`s (it is a `CeleryExecutor(on_call=...)` observer) or, for calls that run
    elsewhere, `update()`. `write_text()` prints streamed text between the rows; `placed()` tells
    where the block's calls ran, as shown; `close()` ends the current block of rows (the next call
    starts a new one).
    """

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.redraw = out.isatty() and os.environ.get("TERM") != "dumb"
        self.rows: dict[str, _Row] = {}
        self.lock = threading.RLock()
        self._at_line_start = True
        self._drawn = 0

    def __call__(self, event: CallEvent) -> None:
        self.update(
            event.task_id,
            task=event.task_name,
            pool=event.pool,
            state=event.state,
            worker=event.worker,
            at=event.at,
            arguments=event.arguments,
            call_id=event.call_id,
        )

    def update(
        self,
        key: str,
        *,
        task: str,
        pool: str,
        state: str,
        worker: str | None = None,
        at: float | None = None,
        arguments: str = "",
        call_id: str | None = None,
    ) -> None:
        """A call `key` is now in `state` (a row is added for a key not seen yet)."""
        at = time.monotonic() if at is None else at
        with self.lock:
            row = self.rows.get(key)
            if row is None:
                shown = short_arguments(arguments)
                row = self.rows[key] = _Row(task, pool, worker, state, at, at, shown, call_id)
            else:
                row.worker = worker or row.worker
                row.state, row.at = state, at
                row.arguments = row.arguments or short_arguments(arguments)
            if self.redraw:
                self._draw()
            else:
                self._line(self._row(row, row.at))

    def progress(self, task: str, arguments: str, text: str) -> None:
        """The latest progress of the running call of `task` with these arguments (the first such)."""
        shown = short_arguments(arguments)
        with self.lock:
            row = next(
                (
                    r
                    for r in self.rows.values()
                    if r.task == task and r.arguments == shown and r.state in _RUNNING
                ),
                None,
            )
            if row is None:
                return
            row.progress = text
            if self.redraw:
                self._draw()
            else:
                self._line(self._row(row, time.monotonic()))

    def placed(self) -> dict[tuple[str, str], tuple[str, str | None]]:
        """Where each call of the current block ran, as its row shows it: (task, the model's call id)
        -> (pool, worker); of a call dispatched again, its last dispatch."""
        with self.lock:
            return {
                (row.task, row.call_id): (row.pool, row.worker)
                for row in self.rows.values()
                if row.call_id is not None
            }

    def write_text(self, text: str) -> None:
        """Streamed text (a model's answer), below the rows drawn so far."""
        if not text:
            return
        with self.lock:
            if self.rows:
                self.close()
            self.out.write(text)
            self.out.flush()
            self._at_line_start = text.endswith("\n")

    def end_line(self) -> None:
        """Finish a line of streamed text, if one is open."""
        with self.lock:
            if not self._at_line_start:
                self.out.write("\n")
                self.out.flush()
                self._at_line_start = True

    def close(self) -> None:
        """End the current block of rows: the next call starts a new one."""
        with self.lock:
            if self.redraw and self._drawn:
                self.out.write(f"\x1b[{self._drawn}E")
                self.out.flush()
            self.rows.clear()
            self._drawn = 0

    def _line(self, text: str) -> None:
        if not self._at_line_start:
            self.out.write("\n")
        self.out.write(text + "\n")
        self.out.flush()
        self._at_line_start = True

    def _draw(self) -> None:
        if not self._at_line_start:
            self.out.write("\n")
            self._at_line_start = True
        now = time.monotonic()
        lines = [f"    {aligned(('task', 'pool', 'worker', 'state'), COLUMN_WIDTHS)} {'elapsed':>8}  call"]
        lines += [self._row(row, row.at if row.state not in _RUNNING else now) for row in self.rows.values()]
        # A line wider than the terminal would wrap, and moving back up would miss the table's top.
        width = max(shutil.get_terminal_size().columns - 1, 20)
        lines = [line if len(line) <= width else line[: width - 1] + "…" for line in lines]
        self.out.write("\x1b[J" + "\n".join(lines) + "\n" + f"\x1b[{len(lines)}F")
        self.out.flush()
        self._drawn = len(lines)

    @staticmethod
    def _row(row: _Row, until: float) -> str:
        elapsed = until - row.first
        progress = f"  [{row.progress}]" if row.progress and row.state in _RUNNING else ""
        cells = aligned((row.task, row.pool, row.worker or "-", row.state), COLUMN_WIDTHS)
        return f"    {cells} {elapsed:6.2f} s  {row.arguments}{progress}".rstrip()
