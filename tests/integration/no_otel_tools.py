"""A tool of pool `no-otel` that tells what OpenTelemetry the process running it has: the modules
loaded, and whether `opentelemetry` can be imported at all."""

from __future__ import annotations

import importlib
import json
import sys

from workers import tool

POOL = "no-otel"


@tool("Tells which OpenTelemetry modules this process holds", pool=POOL, timeout=10)
def opentelemetry_here() -> str:
    loaded = sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry")
    try:
        importlib.import_module("opentelemetry.trace")
        importable = True
    except ModuleNotFoundError:
        importable = False
    return json.dumps({"loaded": loaded, "importable": importable})
