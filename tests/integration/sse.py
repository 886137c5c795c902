"""Server-sent events read from an HTTP response's lines, as an SSE client reads them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

__all__ = ["server_sent_events"]


def server_sent_events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(id, event) of each server-sent event read from `lines` (comments and keep-alives skipped)."""
    entry_id, data = "", ""
    for line in lines:
        if line.startswith("id: "):
            entry_id = line[4:]
        elif line.startswith("data: "):
            data = line[6:]
        elif not line and data:
            yield entry_id, json.loads(data)
            entry_id, data = "", ""
