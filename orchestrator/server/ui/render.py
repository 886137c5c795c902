"""The run view's HTML: Jinja2 templates shipped in the package, every value autoescaped, and the
headers that keep a page from running anything but the view's own script."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, PackageLoader, StrictUndefined

from orchestrator.server.ui.data import arguments_text
from orchestrator.server.ui.waterfall_axis import duration_text

__all__ = ["SECURITY_HEADERS", "html", "static_file"]

# Scripts, styles and connections only from the view itself; never framed; nothing inline.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

_environment = Environment(
    loader=PackageLoader("orchestrator.server.ui", "templates"),
    autoescape=True,  # every template, whatever its name: a model's text is never markup
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _duration(seconds: float | None) -> str:
    return "—" if seconds is None else duration_text(seconds)


def _elapsed(start: datetime | None, end: datetime | None) -> str:
    if start is None:
        return "—"
    return _duration(((end or datetime.now(UTC)) - start).total_seconds())


def _when(value: datetime | None) -> str:
    return "—" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


_environment.filters.update(duration=_duration, when=_when, as_json=_as_json)
_environment.globals.update(elapsed=_elapsed, arguments_text=arguments_text)


def html(template: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    """`template` rendered with `values`, as a page of the view."""
    body = _environment.get_template(template).render(**values)
    return HTMLResponse(body, status_code=status_code, headers=SECURITY_HEADERS)


def static_file(name: str) -> Response:
    """One of the view's own script or style files (404 for any other name)."""
    suffix = name[name.rfind(".") :] if "." in name else ""
    folder = resources.files("orchestrator.server.ui").joinpath("static")
    if suffix not in _STATIC_TYPES or "/" in name or name.startswith("."):
        return Response("not found", status_code=404, media_type="text/plain")
    item = folder.joinpath(name)
    if not item.is_file():
        return Response("not found", status_code=404, media_type="text/plain")
    headers = {"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"}
    return Response(item.read_bytes(), media_type=_STATIC_TYPES[suffix], headers=headers)
