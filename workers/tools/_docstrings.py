"""A tool's description and its parameters' descriptions, read from its docstring."""

from __future__ import annotations

import inspect
import re
from typing import Any


def doc_summary(doc: str | None) -> str | None:
    if not doc:
        return None
    paragraph = doc.strip().split("\n\n", 1)[0]
    return " ".join(line.strip() for line in paragraph.splitlines()) or None


_ARGS_HEADER = re.compile(r"^(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\w+)\s*(\([^)]*\))?:\s*(.+)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def docstring_args(function: Any) -> dict[str, str]:
    """Parameter descriptions from a Google-style `Args:` section of the docstring."""
    doc = inspect.getdoc(function) or ""
    found: dict[str, str] = {}
    inside = False
    last: tuple[str, int] | None = None
    for line in doc.splitlines():
        if _ARGS_HEADER.match(line.strip()):
            inside = True
            continue
        if inside:
            if line and not line[0].isspace():
                break
            match = _ARG_LINE.match(line)
            if match and (last is None or _indent(line) <= last[1]):
                found[match.group(1)] = match.group(3).strip()
                last = (match.group(1), _indent(line))
            elif last is not None and line.strip():
                found[last[0]] += " " + line.strip()
    return found
