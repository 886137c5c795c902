"""Tools served on pool `logs` by the worker-log tests' own worker: results and errors holding secrets."""

from __future__ import annotations

from workers import tool

POOL = "logs"
RESULT_SECRET = "result-secret-5f0c2e9a"
ARGUMENT_SECRET = "argument-secret-81b7d4c3"
ERROR_SECRET = "error-secret-3a9e6b12"
# A result's first characters, then enough filler that the secret lies past what a DEBUG line shows.
RESULT_HEAD = "head-of-the-file:"
FILLER = "." * 300


@tool("Reads a file", pool=POOL, timeout=20)
def logs_read_file(path: str) -> str:
    return f"{RESULT_HEAD}{FILLER}{RESULT_SECRET} ({len(path)} characters of path)"


@tool("Reads a file and fails, saying what it read", pool=POOL, timeout=20)
def logs_read_and_fail(path: str) -> str:
    raise ValueError(f"could not parse {ERROR_SECRET}")
