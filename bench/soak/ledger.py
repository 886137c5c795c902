"""The soak's ledger: every side effect a soak tool makes and every compensation that undoes one, as
a JSON line appended to one file (`SOAK_LEDGER`) that nothing of the fleet reads or writes otherwise.

Each line is written with one `write` on a descriptor opened `O_APPEND`, so lines of concurrent
writers (threads, prefork children, workers in other namespaces: they share the filesystem) never
interleave, and a line written before its process is SIGKILLed stays (it is in the kernel's cache).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["LEDGER_ENV", "read", "record"]

LEDGER_ENV = "SOAK_LEDGER"


def record(kind: str, **fields: Any) -> None:
    """Append one entry: `kind` ("effect" or "undo"), the writer's pid, the time, and `fields`."""
    line = json.dumps({"kind": kind, "pid": os.getpid(), "t": time.time(), **fields}, separators=(",", ":"))
    descriptor = os.open(os.environ[LEDGER_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (line + "\n").encode())
    finally:
        os.close(descriptor)


def read(path: Path) -> list[dict[str, Any]]:
    """Every entry of the ledger at `path`, in the order written."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
