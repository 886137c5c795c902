"""Processes a test starts end before the test does: SIGTERM, a grace period, then SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Any

__all__ = ["reap"]


def reap(process: subprocess.Popen[Any], grace_s: float = 5.0) -> int | None:
    """Stop `process` and its process group (started with `start_new_session=True`): SIGTERM, wait up
    to `grace_s`, then SIGKILL; always waited for, so no Popen is left running to warn when collected.
    Returns its exit status (negative: the signal that ended it)."""
    if process.poll() is None:
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.wait(timeout=10)
    _signal_group(process, signal.SIGKILL)  # children it left behind in its group
    return process.returncode


def _signal_group(process: subprocess.Popen[Any], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)
