"""The run view: every invocation's story on a web page at `/ui`, served by `toolfleet serve` and by
`toolfleet ui` alone, rendered on the server (Jinja2) with a few lines of script for live updates."""

from orchestrator.server.ui.settings import UI_ENVIRONMENT, UiSettings
from orchestrator.server.ui.standalone import create_ui_app, mount_ui, serve_ui

__all__ = ["UI_ENVIRONMENT", "UiSettings", "create_ui_app", "mount_ui", "serve_ui"]
