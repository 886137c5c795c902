"""`toolfleet chat`: talk to a model from the terminal; its tool calls run on the worker pools (or in
this process) and show live, and the answer streams as it comes."""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

from orchestrator.cli.commands._command import add_command, refuse
from orchestrator.cli.console import add_model_argument, progress_text
from orchestrator.errors import SetupError
from workers.settings import Settings

if TYPE_CHECKING:
    from orchestrator.cli.console import LiveTable
    from orchestrator.executors.celery import CallEvent, CeleryExecutor
    from orchestrator.executors.local import LocalExecutor
    from orchestrator.models.base import ChatModel
    from orchestrator.service import AiService
    from workers.protocol import ToolExecutionRequest
    from workers.tools import ToolDefinition

HELP = "talk to a model from the terminal; its tool calls run on the worker pools and show live"

DEFAULT_MODEL = "openai:gpt-4o-mini"
EXIT_COMMAND = "/exit"
CANCELLED_STATUS = 130  # a question cut short: interrupted here (Ctrl-C), or cancelled from elsewhere
_CONNECT_TIMEOUT_S = 3.0
DESCRIPTION = (
    'Ask one question (`toolfleet chat "question"`) or, without one, keep asking: a '
    f"prompt reads lines from stdin until end of input or {EXIT_COMMAND}. Tools come from the live "
    "catalog (the running workers) unless --tools names modules; every tool call shows as it runs "
    "(tool, pool, worker, state, elapsed, arguments) and the answer streams as the model writes it. "
    "Setup errors (no API key, unknown provider, unreachable --base-url, no tools) exit 2."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "chat", HELP, DESCRIPTION)
    parser.add_argument(
        "question", nargs="?", default=None, help="ask this one question and exit (default: a prompt loop)"
    )
    add_model_argument(
        parser, default=DEFAULT_MODEL, help=f"openai:<model> or anthropic:<model> (default {DEFAULT_MODEL})"
    )
    parser.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="the provider's API at another address, e.g. an OpenAI-compatible server "
        "(vLLM, Ollama, llama.cpp, LM Studio): http://127.0.0.1:11434/v1",
    )
    parser.add_argument(
        "--api-key-env",
        default=None,
        metavar="NAME",
        help="read the API key from this environment variable (default OPENAI_API_KEY / ANTHROPIC_API_KEY)",
    )
    parser.add_argument(
        "--tools",
        default=None,
        metavar="MODULE[,MODULE]",
        help="use the tools of these modules (module or module:attribute) instead of the live catalog",
    )
    parser.add_argument(
        "--executor",
        choices=("local", "celery"),
        default=None,
        help="where tool calls run: local (in this process; the default with --tools) or celery (on the "
        "worker pools; the default without --tools, which requires it)",
    )
    parser.add_argument(
        "--memory-id",
        default=None,
        help="continue this conversation: it is kept in the SQL store at TOOLFLEET_DATABASE_URL",
    )
    parser.add_argument(
        "--max-messages",
        type=int,
        default=20,
        metavar="N",
        help="messages of the conversation sent to the model (default 20)",
    )
    parser.add_argument("--system", default=None, metavar="TEXT", help="a system message for the model")
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        session = _Session.build(args, settings, sys.stdout)
    except SetupError as exc:
        return refuse("chat", exc)
    with session:
        try:
            if args.question is not None:
                return session.ask_once(args.question)
            return session.loop(sys.stdin, prompt=sys.stdin.isatty())
        except KeyboardInterrupt:
            print(file=sys.stdout)
            return CANCELLED_STATUS


def _model(args: argparse.Namespace) -> ChatModel:
    from orchestrator.cli.console import model_of

    hint = "" if args.api_key_env else " (or name another variable with --api-key-env)"
    return model_of(args.model, base_url=args.base_url, api_key_env=args.api_key_env, key_hint=hint)


def _check_reachable(base_url: str) -> None:
    """Fail at once, not at the first question, when nothing listens at `--base-url`."""
    try:
        parts = urlsplit(base_url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise SetupError(f"--base-url {base_url!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SetupError(f"--base-url must be an http:// or https:// URL, got {base_url!r}")
    try:
        socket.create_connection((parts.hostname, port), timeout=_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise SetupError(f"the model server at {base_url} cannot be reached: {exc.strerror or exc}") from None


@dataclass
class _Tools:
    """Where the chat's tools come from: `given` (of --tools modules), or None for the live catalog
    the service reads again as pools come and go; `pools` names each tool's pool, for the rows."""

    given: list[ToolDefinition] | None
    pools: dict[str, str]
    executor: LocalExecutor | CeleryExecutor
    local: bool


def _tools(args: argparse.Namespace, settings: Settings, on_call: Callable[[CallEvent], None]) -> _Tools:
    from orchestrator.executors.celery import CeleryExecutor
    from orchestrator.executors.local import LocalExecutor
    from workers.errors import ToolfleetError
    from workers.runtime.worker import load_tools

    local = (args.executor or ("local" if args.tools else "celery")) == "local"
    if args.tools is None:
        if local:
            raise SetupError("--executor local runs the tools of --tools modules: name them with --tools")
        executor = CeleryExecutor(settings=settings, on_call=on_call)
        try:
            found = executor.catalog_definitions()  # at start-up only: the service reads it live
        except BaseException:
            executor.close()
            raise
        if not found:
            executor.close()
            redis_url = settings.redacted()["redis_url"]
            raise SetupError(
                f"no tools found: no live worker serves any tool at {redis_url} (start one with "
                "`toolfleet worker --pool NAME --tools MODULE`, or use --tools MODULE)"
            )
        return _Tools(None, {}, executor, local=False)
    try:
        definitions = list(load_tools(args.tools.split(",")))
    except ToolfleetError as exc:
        raise SetupError(f"cannot load the tools of {args.tools}: {exc}") from None
    if not definitions:
        raise SetupError(f"no tools found in {args.tools}")
    pools = {d.name: d.pool for d in definitions}
    if local:
        return _Tools(definitions, pools, LocalExecutor(), local=True)
    executor = CeleryExecutor(settings=settings, tools=definitions, on_call=on_call)
    return _Tools(definitions, pools, executor, local=False)


class _Session:
    """One model, one set of tools, one conversation, and the terminal they show on."""

    def __init__(
        self, service: AiService, tools: _Tools, table: LiveTable, memory_id: str, out: TextIO
    ) -> None:
        self.service = service
        self.tools = tools
        self.table = table
        self.memory_id = memory_id
        self.out = out
        self.runner = asyncio.Runner()

    @classmethod
    def build(cls, args: argparse.Namespace, settings: Settings, out: TextIO) -> _Session:
        from orchestrator.cli.console import LiveTable
        from orchestrator.handlers import send_exception_message_to_llm
        from orchestrator.memory import InMemoryChatMemoryStore, MessageWindowChatMemory, SqlChatMemoryStore
        from orchestrator.saga.journal import Journal
        from orchestrator.service import AiService

        if args.max_messages < 1:
            raise SetupError(f"--max-messages must be at least 1, got {args.max_messages}")
        model = _model(args)
        if args.base_url is not None:
            _check_reachable(args.base_url)
        table = LiveTable(out)
        tools = _tools(args, settings, table)
        try:
            store = SqlChatMemoryStore(settings.database_url) if args.memory_id else InMemoryChatMemoryStore()
            service = AiService(
                chat_model=model,
                tools=tools.given,
                executor=tools.executor,
                system_message=args.system,
                chat_memory_provider=lambda _: MessageWindowChatMemory(args.max_messages, store=store),
                tool_arguments_error_handler=send_exception_message_to_llm(),
                tool_execution_error_handler=send_exception_message_to_llm(),
                compensate_on_tool_errors=True,
                journal=Journal(settings.database_url, keys=settings.journal_keys),
                name="chat",
            )
        except BaseException:
            tools.executor.close()
            raise
        return cls(service, tools, table, args.memory_id or "default", out)

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, *_: object) -> None:
        try:
            close = getattr(self.service.chat_model, "aclose", None)
            if close is not None:
                self.runner.run(close())
            self.runner.close()
        finally:
            self.tools.executor.close()

    def ask_once(self, question: str) -> int:
        """One question, its answer; the exit code."""
        return self._ask(question)

    def loop(self, lines: TextIO, *, prompt: bool) -> int:
        """Questions from `lines` until their end or `/exit`; exit code 1 when any of them failed."""
        failed = False
        while True:
            if prompt:
                self.out.write("> ")
                self.out.flush()
            line = lines.readline()
            if not line:
                if prompt:
                    self.out.write("\n")
                return 1 if failed else 0
            question = line.strip()
            if question == EXIT_COMMAND:
                return 1 if failed else 0
            if not question:
                continue
            code = self._ask(question)
            if code in (2, CANCELLED_STATUS):
                return code
            failed = failed or code != 0
            self.out.write("\n")
            self.out.flush()

    def _ask(self, question: str) -> int:
        from orchestrator.errors import ModelAuthenticationError, ModelConnectionError
        from workers.errors import ToolfleetError

        try:
            self.runner.run(self._stream(question))
        except asyncio.CancelledError:  # cancelled from elsewhere (`toolfleet cancel`, the API)
            self._fail("the invocation was cancelled")
            return CANCELLED_STATUS
        except (ModelConnectionError, ModelAuthenticationError) as exc:
            self._fail(str(exc))
            return 2
        except ToolfleetError as exc:
            self._fail(str(exc))
            return 1
        return 0

    def _fail(self, message: str) -> None:
        self.table.close()
        self.table.end_line()
        first = (message.strip().splitlines() or ["failed"])[0]
        print(f"toolfleet chat: {first}", file=sys.stderr)

    async def _stream(self, question: str) -> None:
        from orchestrator.models.base import CompleteToolCall, PartialResponse
        from orchestrator.result import CompleteResponse, ToolExecuted, ToolProgress

        answered = False  # text streamed since the last tool call: the answer
        content: str | None = None
        arguments: dict[str | None, str] = {}  # by call id: finds a reporting call's row
        async for event in self.service.stream(question, memory_id=self.memory_id):
            if isinstance(event, PartialResponse):
                self.table.write_text(event.text)
                answered = answered or bool(event.text)
            elif isinstance(event, CompleteToolCall):
                answered = False
                arguments[event.request.id] = event.request.arguments
                if self.tools.local:
                    self._row(event.request, "started")
            elif isinstance(event, ToolProgress):
                text = progress_text(event.fraction, event.message)
                self.table.progress(f"tool.{event.tool_name}", arguments.get(event.request_id, ""), text)
            elif isinstance(event, ToolExecuted):
                if self.tools.local:
                    self._row(event.execution.request, event.execution.status)
            elif isinstance(event, CompleteResponse):
                content = event.result.content
        if not answered and content:
            self.table.write_text(content)
        self.table.close()
        self.table.end_line()

    def _row(self, request: ToolExecutionRequest, state: str) -> None:
        """The row of a call run in this process, keyed by its call id (unique in the invocation: the
        streamed call and its execution carry the same one)."""
        self.table.update(
            request.id or "",
            task=f"tool.{request.name}",
            pool=self.tools.pools.get(request.name) or "-",
            state=state,
            worker="in-process",
            arguments=request.arguments,
        )
