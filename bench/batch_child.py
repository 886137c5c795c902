"""`python -m bench.batch_child [--without-opentelemetry]`: measure 11's invocation in a process of its own.

One `AiService` with `CeleryExecutor` on the benchmark's worker (the `TOOLFLEET_*` variables it is
given): a `ScriptedChatModel` asks for `BATCH_SIZE` `noop` calls at once, then answers `done`, as in
measure 10. The benchmark drives it over stdin and stdout, one line each way:

- it prints `ready <seconds>` once its imports are done and its executor is built (the seconds that
  took);
- `run` runs one invocation and answers `<wall seconds> <CPU seconds of this process>`;
- `probe` runs one more invocation, untimed, under a profile hook (the event loop's thread and the
  threads started meanwhile) and answers how many calls went into OpenTelemetry's code;
- `end` answers a JSON object: the `opentelemetry` modules loaded (`loaded`) and whether `import
  opentelemetry` works here (`importable`), then the process exits.

An invocation that does not do its work (a call that fails, another answer) ends the process with an
error on stderr; the benchmark then sees its stdout close.

With `--without-opentelemetry`, before anything else is imported, the finder of `sys.path` stops
seeing OpenTelemetry: its modules are not found (`import opentelemetry` raises the very
`ModuleNotFoundError` of an interpreter without the package, `importlib.util.find_spec` returns
None) and its distributions are not listed (`importlib.metadata`). It is the process of a deployment
without the `toolfleet[otel]` extra, in the same interpreter and with everything else identical.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.machinery
import importlib.metadata
import json
import os
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from types import FrameType, ModuleType
from typing import Any

__all__ = [
    "HIDDEN",
    "WITHOUT_FLAG",
    "WithoutOpenTelemetry",
    "hide_opentelemetry",
    "loaded_opentelemetry",
    "main",
]

HIDDEN = "opentelemetry"
WITHOUT_FLAG = "--without-opentelemetry"


def _hidden_module(name: str) -> bool:
    return name == HIDDEN or name.startswith(f"{HIDDEN}.")


def _hidden_distribution(distribution: importlib.metadata.Distribution) -> bool:
    name = distribution.metadata["Name"] or ""
    return name.lower().replace("_", "-").startswith(f"{HIDDEN}-")


class WithoutOpenTelemetry(importlib.machinery.PathFinder):
    """The finder of `sys.path`, blind to OpenTelemetry's modules and distributions."""

    @classmethod
    def find_spec(
        cls, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if _hidden_module(fullname):
            return None
        return super().find_spec(fullname, path, target)

    @staticmethod
    def find_distributions(*args: Any, **kwargs: Any) -> Iterable[importlib.metadata.Distribution]:
        found = importlib.machinery.PathFinder.find_distributions(*args, **kwargs)
        return (distribution for distribution in found if not _hidden_distribution(distribution))


def hide_opentelemetry() -> None:
    """Put `WithoutOpenTelemetry` in the place of `sys.path`'s finder; refuse if OpenTelemetry is
    loaded already (too late to hide it)."""
    if loaded_opentelemetry():
        raise RuntimeError(f"OpenTelemetry is loaded already: {loaded_opentelemetry()[:3]}")
    sys.meta_path[:] = [
        WithoutOpenTelemetry if finder is importlib.machinery.PathFinder else finder
        for finder in sys.meta_path
    ]
    if WithoutOpenTelemetry not in sys.meta_path:
        raise RuntimeError(f"no PathFinder in sys.meta_path to replace: {sys.meta_path}")
    importlib.invalidate_caches()


def loaded_opentelemetry() -> list[str]:
    """The names of the `opentelemetry` modules this process has loaded."""
    return sorted(name for name in sys.modules if _hidden_module(name))


def _importable() -> bool:
    try:
        importlib.import_module(HIDDEN)
    except ModuleNotFoundError:
        return False
    return True


def _answer(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _serve(started: float) -> None:
    from bench import tools
    from bench._context import BATCH_SIZE
    from orchestrator import AiMessage, AiService, ScriptedChatModel, fail_invocation
    from orchestrator.executors.celery import CeleryExecutor
    from workers import ToolExecutionRequest
    from workers.settings import Settings

    executor = CeleryExecutor(settings=Settings.from_env(), tools=[tools])
    noop = executor.registry.get("noop")
    if noop is None:
        raise RuntimeError("bench.tools must define the tool noop")
    calls = [ToolExecutionRequest(id=f"n{i}", name=noop.name, arguments="{}") for i in range(BATCH_SIZE)]

    async def invocation() -> tuple[float, float]:
        model = ScriptedChatModel([AiMessage(tool_execution_requests=calls), "done"])
        service = AiService(
            chat_model=model,
            tools=[noop],
            executor=executor,
            tool_arguments_error_handler=fail_invocation(),
            tool_execution_error_handler=fail_invocation(),
        )
        cpu_before = time.process_time()
        wall_before = time.perf_counter()
        result = await service.achat("go")
        wall = time.perf_counter() - wall_before
        cpu = time.process_time() - cpu_before
        failed = [e.status for e in result.tool_executions if e.has_failed]
        if result.content != "done" or len(result.tool_executions) != BATCH_SIZE or failed:
            raise RuntimeError(
                f"the invocation answered {result.content!r} after {len(result.tool_executions)} "
                f"calls, failed: {failed[:3]}"
            )
        return wall, cpu

    loop = asyncio.get_running_loop()
    _answer(f"ready {time.perf_counter() - started:.6f}")
    try:
        while True:
            # Read in a thread: between runs the loop stays free for the executor's own work.
            command = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
            if command == "run":
                wall, cpu = await invocation()
                _answer(f"{wall:.6f} {cpu:.6f}")
            elif command == "probe":
                _answer(str(await _opentelemetry_calls(invocation)))
            elif command == "end" or not command:
                break
            else:
                raise RuntimeError(f"unknown command {command!r}")
    finally:
        executor.close()
    if command == "end":
        loaded = loaded_opentelemetry()
        _answer(json.dumps({"loaded": loaded, "importable": _importable()}))


async def _opentelemetry_calls(invocation: Any) -> int:
    """Run one invocation (untimed) with a profile hook on the event loop's thread and on the threads
    started meanwhile: how many calls went into OpenTelemetry's code (`.../opentelemetry/...`)."""
    calls = [0]
    marker = f"{os.sep}{HIDDEN}{os.sep}"

    def hook(frame: FrameType, event: str, _: object) -> None:
        if event == "call" and marker in frame.f_code.co_filename:
            calls[0] += 1

    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        await invocation()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return calls[0]


def main(argv: Sequence[str]) -> int:
    started = time.perf_counter()
    if WITHOUT_FLAG in argv:
        hide_opentelemetry()
    asyncio.run(_serve(started))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
