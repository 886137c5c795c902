"""The demo's report story, and where its processes keep artifacts.

The forecasts of a few cities are looked up on the io pool, then the heavy pool renders an hourly
outlook of them as a Markdown report of a few hundred KB (`workers.examples.report`), returned as an
artifact: the bytes go to the artifact store, the conversation carries the reference. The answer gives
that reference, `artifact:<id>`, and where to fetch it: `GET /v1/artifacts/<id>` from `toolfleet
serve`, or the file in the store. Every process of the demo (its worker pools, the approving process,
the MCP gateway) writes to and reads from one store: `TOOLFLEET_ARTIFACT_URL` when it is set, else the
directory `toolfleet-artifacts` under the working directory, which `toolfleet serve` started there
reads too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import TextIO

from orchestrator.cli.demo_scripts import Script, asks, call, last_results
from orchestrator.messages import AiMessage
from orchestrator.models.base import ChatRequest
from orchestrator.result import Result
from workers.artifacts import ArtifactStore, size_text, store_for
from workers.errors import ArtifactNotFoundError
from workers.settings import Settings

__all__ = [
    "REPORT_CITIES",
    "REPORT_DAYS",
    "REPORT_QUESTION",
    "REPORT_STORY",
    "REPORT_TOOLS",
    "report_script",
    "shared_artifact_url",
    "skipped_because",
    "write_artifacts",
]

REPORT_STORY = "Outlook report, an artifact from the heavy pool"
REPORT_CITIES = ("Lisbon", "Kyiv", "Oslo", "Nairobi", "Lima")
REPORT_DAYS = 60
REPORT_QUESTION = (
    f"Make me a {REPORT_DAYS}-day hourly temperature outlook for {', '.join(REPORT_CITIES)}, "
    "as a report I can download."
)
REPORT_TOOLS = frozenset({"get_weather", "render_outlook"})
REPORT_TITLE = f"{REPORT_DAYS}-day temperature outlook"
# The note a stored artifact leaves in a result: `[artifact <name> (<type>, <size>): artifact:<id>]`.
_NOTE = re.compile(
    r"\[artifact (?P<name>.+?) \((?P<type>[^,]+), (?P<size>[^)]+)\): artifact:(?P<id>[0-9a-f]{32})\]"
)


def report_script(request: ChatRequest) -> AiMessage | str:
    """The forecasts, then the outlook rendered from them, then an answer that links the report."""
    if asks(request):
        calls = [call(f"call_r{i}", "get_weather", city=c) for i, c in enumerate(REPORT_CITIES)]
        return AiMessage(tool_execution_requests=calls)
    results = last_results(request)
    if results[-1].tool_name == "get_weather":
        forecasts = []
        for result in results:
            forecast = json.loads(result.text)
            forecasts.append({k: forecast[k] for k in ("city", "temperature", "summary")})
        render = call(
            "call_outlook", "render_outlook", title=REPORT_TITLE, forecasts=forecasts, days=REPORT_DAYS
        )
        return AiMessage(tool_execution_requests=[render])
    note = _NOTE.search(results[-1].text)
    if results[-1].is_error or note is None:
        return f"The report could not be rendered: {results[-1].text}"
    return (
        f"Your outlook is ready: {note['name']} ({note['size']}), artifact:{note['id']}. Download it from "
        f"`toolfleet serve` with GET /v1/artifacts/{note['id']}, or open it in the artifact store."
    )


def skipped_because(script: Script, tools: Collection[str]) -> str | None:
    """Why a story cannot run on the live pools (None: it can): the report story needs its tool."""
    missing = sorted(REPORT_TOOLS - set(tools)) if script is report_script else []
    if not missing:
        return None
    return (
        f"skipped: no live pool serves {', '.join(missing)} (the heavy pool serves render_outlook "
        "with --tools workers.examples.report)"
    )


def shared_artifact_url(settings: Settings) -> str:
    """The artifact store every process of the demo uses: the one `settings` name, a directory made
    absolute (the demo's processes may not share its working directory)."""
    store = store_for(settings.artifact_url)
    return settings.artifact_url if store.is_s3 else store.url


def write_artifacts(out: TextIO, result: Result, store: ArtifactStore) -> None:
    """Where each artifact of the story's calls is: its file in a directory store (else its URI), and
    the service's route that serves it."""
    for execution in result.tool_executions:
        for ref in execution.artifacts:
            try:
                record = store.record(ref.id)
            except ArtifactNotFoundError:
                out.write(f"    {ref.ref} is not in {store.url}: its worker stores artifacts elsewhere\n")
                continue
            where = f"{store.root}/{ref.id}" if store.url.startswith("file://") else record.ref.uri
            out.write(
                f"    artifact {ref.ref}: {ref.name} ({ref.media_type}, {size_text(ref.size)}) made by "
                f"{record.tool}, stored at {where}; `toolfleet serve` gives it at "
                f"GET /v1/artifacts/{ref.id}\n"
            )
