"""Run one tool call in this process: bind, call, convert; shared by workers and `LocalExecutor`."""

from __future__ import annotations

import asyncio
import base64
import functools
import inspect
import logging
import mimetypes
import time
from concurrent.futures import Executor
from typing import Any

from workers.artifacts import (
    Artifact,
    ArtifactSink,
    ArtifactWriter,
    describe,
    is_ref,
    writing_artifacts,
)
from workers.calls.binding import BoundCall, bind_arguments
from workers.calls.invocation import Invocation, ToolCallIdentity
from workers.calls.loops import run_awaitable
from workers.calls.results import ConvertedResult, convert_result
from workers.contents import Content, Image, ImageContent, TextContent
from workers.errors import ToolArgumentsError, ToolErrorVisibleToLlm, ToolResultError
from workers.protocol import ErrorCause, OutcomeKind, ToolExecutionRequest, ToolOutcome
from workers.tools import ToolDefinition

__all__ = [
    "arun_tool",
    "bound_outcome",
    "call_identity",
    "content_preview",
    "error_outcome",
    "log_call",
    "qualified_name",
    "run_tool",
    "utf8_size",
]

log = logging.getLogger(__name__)


def call_identity(
    invocation: Invocation, request: ToolExecutionRequest, *, attempt: int = 1, key: str | None = None
) -> ToolCallIdentity:
    """The identity a tool (or the compensation of this call) receives: ids, idempotency key, attempt."""
    return ToolCallIdentity.of(invocation.context, request.id, request.name, attempt=attempt, key=key)


def run_tool(
    definition: ToolDefinition,
    request: ToolExecutionRequest,
    invocation: Invocation | None = None,
    identity: ToolCallIdentity | None = None,
    *,
    log_outcome: bool = True,
    artifacts: ArtifactSink | None = None,
) -> ToolOutcome:
    """Run the call synchronously (an `async` tool runs on this thread's long-lived event loop).

    `identity` is what a `ToolCallIdentity` parameter receives (the first attempt when not given).
    The call's line is logged (`log_call`) unless `log_outcome` is false: a worker logs its own, with
    the outcome it reports. Artifacts in the result, and a result over the inline limit, go to
    `artifacts` (the sink the environment names when not given).
    """
    started = time.perf_counter()
    invocation = invocation or Invocation()
    bound = _bind(definition, request, invocation, identity)
    if isinstance(bound, ToolOutcome):
        return _logged(definition, request, started, bound, log_outcome)
    try:
        value = definition.function(*bound.args, **bound.kwargs)
        if inspect.isawaitable(value):
            value = run_awaitable(value)
    except Exception as exc:
        outcome = error_outcome(exc, OutcomeKind.EXECUTION_ERROR, bound)
        return _logged(definition, request, started, outcome, log_outcome)
    writer = _writer(artifacts, invocation, request, definition)
    return _logged(definition, request, started, _success(definition, value, bound, writer), log_outcome)


async def arun_tool(
    definition: ToolDefinition,
    request: ToolExecutionRequest,
    invocation: Invocation | None = None,
    identity: ToolCallIdentity | None = None,
    *,
    executor: Executor | None = None,
    artifacts: ArtifactSink | None = None,
) -> ToolOutcome:
    """Run the call from async code: an `async` tool is awaited here, any other runs on `executor`."""
    if not definition.is_async:
        loop = asyncio.get_running_loop()
        run = functools.partial(run_tool, artifacts=artifacts)
        return await loop.run_in_executor(executor, run, definition, request, invocation, identity)
    started = time.perf_counter()
    invocation = invocation or Invocation()
    bound = _bind(definition, request, invocation, identity)
    if isinstance(bound, ToolOutcome):
        return _logged(definition, request, started, bound)
    try:
        value = await definition.function(*bound.args, **bound.kwargs)
    except Exception as exc:
        return _logged(definition, request, started, error_outcome(exc, OutcomeKind.EXECUTION_ERROR, bound))
    writer = _writer(artifacts, invocation, request, definition)
    if isinstance(value, int | float | bool | None) or (
        isinstance(value, str) and _surely_inline(value, writer)
    ):
        outcome = _success(definition, value, bound, writer)  # nothing to store: no thread needed
    else:  # storing artifacts runs on a thread: their writes would block this loop
        outcome = await asyncio.to_thread(_success, definition, value, bound, writer)
    return _logged(definition, request, started, outcome)


def _writer(
    sink: ArtifactSink | None,
    invocation: Invocation,
    request: ToolExecutionRequest,
    definition: ToolDefinition,
) -> ArtifactWriter:
    return ArtifactWriter(sink or ArtifactSink.from_env(), invocation, request.id, definition.name)


def _bind(
    definition: ToolDefinition,
    request: ToolExecutionRequest,
    invocation: Invocation,
    identity: ToolCallIdentity | None,
) -> BoundCall | ToolOutcome:
    """The bound call, or the arguments-error outcome that says why there is none."""
    if identity is None and definition.takes_identity:
        identity = call_identity(invocation, request)
    try:
        return bind_arguments(definition, request.arguments, invocation, identity)
    except ToolArgumentsError as exc:
        return error_outcome(exc, OutcomeKind.ARGUMENTS_ERROR)
    except (RecursionError, ArithmeticError, MemoryError, TypeError, ValueError) as exc:
        error = ToolArgumentsError(f'Arguments of tool "{definition.name}" could not be bound: {exc}')
        return error_outcome(error, OutcomeKind.ARGUMENTS_ERROR)


def _success(definition: ToolDefinition, value: Any, bound: BoundCall, writer: ArtifactWriter) -> ToolOutcome:
    try:
        with writing_artifacts(writer):
            result = _inline_or_stored(
                convert_result(value, returns_none=definition.returns_none), definition, writer
            )
    except Exception as exc:
        return error_outcome(
            exc, OutcomeKind.EXECUTION_ERROR, bound, prefix=f"Result of tool '{definition.name}': "
        )
    return ToolOutcome(
        kind=OutcomeKind.SUCCESS,
        text=result.text,
        contents=result.contents,
        result_object=result.result_object,
        attributes=result.attributes,
        parameter_changes=bound.parameters.changes(),
    )


def _inline_or_stored(
    result: ConvertedResult, definition: ToolDefinition, writer: ArtifactWriter
) -> ConvertedResult:
    """`result`, or, when its text is over the inline limit, the same stored as an artifact: the model
    reads its beginning and its reference, the result object is the reference."""
    if result.contents is not None:
        return _images_inline_or_stored(result, definition, writer)
    if _surely_inline(result.text, writer):
        return result
    if is_ref(result.result_object) or (
        isinstance(result.result_object, list) and all(is_ref(item) for item in result.result_object)
    ):
        return result  # artifacts already: the model reads their notes
    if utf8_size(result.text) <= writer.sink.inline_result_bytes:
        return result
    as_json = not isinstance(result.result_object, str) and result.result_object is not None
    artifact = Artifact(
        result.text.encode("utf-8", "surrogatepass"),
        name=f"{definition.name}-result.{'json' if as_json else 'txt'}",
        media_type="application/json" if as_json else "text/plain; charset=utf-8",
    )
    ref = writer.write(artifact)
    return ConvertedResult(describe(ref, writer.heads.get(ref.id)), None, ref.to_json(), result.attributes)


def _surely_inline(text: str, writer: ArtifactWriter) -> bool:
    """Whether `text` is within the inline limit whatever its characters (4 bytes at most each in
    UTF-8), known without encoding it."""
    return len(text) * 4 <= writer.sink.inline_result_bytes


def _images_inline_or_stored(
    result: ConvertedResult, definition: ToolDefinition, writer: ArtifactWriter
) -> ConvertedResult:
    """Contents over the inline limit: each image given as data is stored as an artifact, the contents
    naming it (the orchestrator reads it for a model that takes images) beside a note of it."""
    contents = result.contents or []
    images = sum(len(p.image.base64_data or "") for p in contents if isinstance(p, ImageContent))
    if not images or images + utf8_size(result.text) <= writer.sink.inline_result_bytes:
        return result
    parts: list[Content] = []
    refs: list[dict[str, Any]] = []
    for index, part in enumerate(contents, start=1):
        if not isinstance(part, ImageContent) or part.image.base64_data is None:
            parts.append(part)
            continue
        media_type = part.image.mime_type or "application/octet-stream"
        name = f"{definition.name}-image-{index}{mimetypes.guess_extension(media_type) or ''}"
        data = base64.b64decode(part.image.base64_data, validate=True)
        ref = writer.write(Artifact(data, name=name, media_type=media_type))
        parts += [
            TextContent(describe(ref)),
            ImageContent(Image(url=ref.ref, mime_type=media_type), part.detail),
        ]
        refs.append(ref.to_json())
    text = "\n".join(part.text for part in parts if isinstance(part, TextContent))
    return ConvertedResult(
        text, parts, result.result_object if result.result_object is not None else refs, result.attributes
    )


def error_outcome(
    exc: BaseException, kind: OutcomeKind, bound: BoundCall | None = None, *, prefix: str = ""
) -> ToolOutcome:
    """The outcome of a call that raised `exc`: its message (or type name), type, and text for the model."""
    message = _safe_str(exc) or type(exc).__name__
    for_llm = _message_for_llm(exc)
    return ToolOutcome(
        kind=kind,
        text=_truncate(prefix + message),
        error_type=type(exc).__name__,
        message_for_llm=for_llm,
        parameter_changes=bound.parameters.changes() if bound is not None else {},
        error_type_name=qualified_name(type(exc)),
        error_cause=_cause_of(exc),
        exception=exc,
    )


def qualified_name(cls: type) -> str:
    """A type's name as a traceback shows it: `ValueError`, `billing.errors.Declined`."""
    module = getattr(cls, "__module__", None)
    if module in (None, "builtins", "__main__"):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


def _cause_of(exc: BaseException) -> ErrorCause | None:
    """The exception's direct `__cause__` (`raise ... from cause`), described for the wire.

    A `ToolErrorVisibleToLlm` keeps its cause for the logs of the process that raised it: handlers
    never unwrap it, and its cause's text never leaves that process.
    """
    cause = exc.__cause__
    if cause is None or isinstance(exc, ToolErrorVisibleToLlm):
        return None
    return ErrorCause(
        error_type=type(cause).__name__,
        type_name=qualified_name(type(cause)),
        message=_truncate(_safe_str(cause) or type(cause).__name__),
        message_for_llm=_message_for_llm(cause),
    )


def _message_for_llm(exc: BaseException) -> str | None:
    """What a `ToolErrorVisibleToLlm` chose for the model; `None` when unmarked or blank."""
    if not isinstance(exc, ToolErrorVisibleToLlm):
        return None
    try:
        candidate = exc.message_for_llm()
    except Exception:
        return None
    return _truncate(candidate) if candidate and candidate.strip() else None


MAX_ERROR_CHARS = 8192


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # an exception whose __str__ itself fails
        return ""


def _truncate(text: str) -> str:
    """Error texts reach the model, Redis and Flower: long ones are cut, saying so."""
    if len(text) <= MAX_ERROR_CHARS:
        return text
    return f"{text[:MAX_ERROR_CHARS]}… ({len(text) - MAX_ERROR_CHARS} more characters)"


def utf8_size(text: str) -> int:
    """Bytes of `text` as UTF-8, lone surrogates (which a model can emit) counted too."""
    return len(text.encode("utf-8", "surrogatepass"))


def bound_outcome(outcome: ToolOutcome, tool_name: str, max_result_bytes: int) -> ToolOutcome:
    """A success larger than `max_result_bytes` (text and contents) becomes an execution error."""
    if outcome.is_error:
        return outcome
    size = utf8_size(outcome.text)
    for part in outcome.contents or ():
        if isinstance(part, ImageContent):
            size += len(part.image.base64_data or "") + len(part.image.url or "")
        elif isinstance(part, TextContent):
            size += utf8_size(part.text)
    if size <= max_result_bytes:
        return outcome
    return error_outcome(
        ToolResultError(
            f"Result of tool '{tool_name}' is {size} bytes, over the limit of {max_result_bytes} bytes "
            "(TOOLFLEET_MAX_RESULT_BYTES)"
        ),
        OutcomeKind.EXECUTION_ERROR,
    )


CONTENT_LOG_CHARS = 200  # how much of a call's content a DEBUG line shows


def log_call(
    tool: str,
    call_id: str | None,
    outcome: ToolOutcome,
    elapsed_ms: float,
    *,
    task_id: str | None = None,
    attempt: int | None = None,
    retry_in_s: float | None = None,
) -> None:
    """The one INFO line of a call: tool, ids, outcome and duration, never its arguments or content;
    for a failed attempt that will be retried, its number (`attempt`) and the pause (`retry_in_s`).

    The content (an error's message, a result's text) is logged at DEBUG only, its first
    `CONTENT_LOG_CHARS` characters: results can hold whatever the tool read.
    """
    if not log.isEnabledFor(logging.INFO):
        return
    error_type = outcome.error_type if outcome.is_error else None
    args: list[Any] = [tool, call_id]
    if task_id:
        args.append(task_id)
    if attempt is not None:
        args.append(attempt)
    args.append(outcome.kind.value)
    if error_type:
        args.append(error_type)
    args.append(elapsed_ms)
    if retry_in_s is not None:
        args.append(retry_in_s)
    line = _call_line(bool(task_id), attempt is not None, bool(error_type), retry_in_s is not None)
    log.info(line, *args)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("tool %s call %s content: %s", tool, call_id, content_preview(outcome.text))


@functools.cache
def _call_line(task: bool, attempt: bool, error: bool, retry: bool) -> str:
    """The %-format of a call's line with the parts it has: one of a few constant strings."""
    return "".join(
        (
            "tool %s call %s",
            " task %s" if task else "",
            ": ",
            "attempt %d " if attempt else "",
            "%s",
            " (%s)" if error else "",
            " in %.1f ms",
            "; retrying in %.2f s" if retry else "",
        )
    )


def content_preview(text: str) -> str:
    """The first `CONTENT_LOG_CHARS` characters of `text`, saying how many more there are."""
    if len(text) <= CONTENT_LOG_CHARS:
        return repr(text)
    return f"{text[:CONTENT_LOG_CHARS]!r}… ({len(text) - CONTENT_LOG_CHARS} more characters)"


def _logged(
    definition: ToolDefinition,
    request: ToolExecutionRequest,
    started: float,
    outcome: ToolOutcome,
    log_outcome: bool = True,
) -> ToolOutcome:
    if log_outcome:
        log_call(definition.name, request.id, outcome, (time.perf_counter() - started) * 1000)
    return outcome
