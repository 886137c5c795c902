"""OpenTelemetry made unimportable, as if toolfleet's `otel` extra were not installed, in a process whose
`PYTHONPATH` starts with this folder: Python imports `sitecustomize` as it starts, before any module
of toolfleet, and the finder below answers every `opentelemetry` module as missing."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType


class NoOpenTelemetry(importlib.abc.MetaPathFinder):
    """Finds `opentelemetry` and its submodules nowhere, whatever is installed."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "opentelemetry" or fullname.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


sys.meta_path.insert(0, NoOpenTelemetry())
