"""The soak's ledger: every side effect a soak tool makes and every compensation that undoes one, as
a JSON line appended to one file (`SOAK_LEDGER`) that nothing of the fleet reads or writes otherwise.

Each line is written with one `write` on a descriptor opened `O_APPEND`, so lines of concurrent
writers (threads, prefork children, workers in other namespaces: they share the filesystem) never
interleave, and a line written before its process is SIGKILLed stays (it is in the kernel's cache).

The ledger is the outside world the tools change, so an undo behaves as a real one does (a refund of
a charge by its idempotency key): it undoes what stands under its key, and when nothing does (a call
undone in doubt before its worker made the effect, or after another undo), it is noted as
`undo_nothing`, changing nothing. An effect marks its key (a file beside the ledger) before its line
is written, and an undo takes the mark away, so an undo that finds no mark finds nothing standing.
The checks still count every undo tried: more than one for a call not in doubt is a violation.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["LEDGER_ENV", "effect", "read", "record", "undo"]

LEDGER_ENV = "SOAK_LEDGER"


def record(kind: str, **fields: Any) -> None:
    """Append one entry: `kind` ("effect" or "undo"), the writer's pid, the time, and `fields`."""
    line = json.dumps({"kind": kind, "pid": os.getpid(), "t": time.time(), **fields}, separators=(",", ":"))
    descriptor = os.open(os.environ[LEDGER_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (line + "\n").encode())
    finally:
        os.close(descriptor)


def _mark(key: str) -> Path:
    marks = Path(os.environ[LEDGER_ENV] + ".keys")
    marks.mkdir(exist_ok=True)
    return marks / hashlib.sha256(key.encode()).hexdigest()


def effect(key: str, **fields: Any) -> None:
    """A side effect made under idempotency key `key`."""
    _mark(key).touch()
    record("effect", key=key, **fields)


def undo(key: str, **fields: Any) -> None:
    """Undo what was made under `key`: an `undo` entry if something stands (its mark taken away, at
    most one undo takes it), else `undo_nothing`."""
    try:
        _mark(key).unlink()
    except FileNotFoundError:
        record("undo_nothing", key=key, **fields)
        return
    record("undo", key=key, **fields)


def read(path: Path) -> list[dict[str, Any]]:
    """Every entry of the ledger at `path`, in the order written."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
