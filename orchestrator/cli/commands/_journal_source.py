"""Which journal a reading command reads, said on stderr before it reads it.

`runs`, `show` and `sagas` read the SQL log at TOOLFLEET_DATABASE_URL, by default a file in the current
directory: run from another directory, they would quietly read (or create) another, empty journal.
Saying which one on stderr keeps stdout for the listing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from workers.settings import ENVIRONMENT, Settings, redact_url

if TYPE_CHECKING:
    from orchestrator.saga.journal import Journal

__all__ = ["DEFAULT_DATABASE_URL", "describe_source", "open_journal"]

DEFAULT_DATABASE_URL = Settings().database_url
_SQLITE = "sqlite:///"


def describe_source(url: str) -> str:
    """One line: the journal at `url` (password redacted), and how to read another."""
    variable = ENVIRONMENT["database_url"]
    if url == DEFAULT_DATABASE_URL:
        path = Path(url.removeprefix(_SQLITE))
        new = "" if path.exists() else "; it does not exist yet, so nothing was journaled here"
        return f"reading the default journal ./{path} in {Path.cwd()} (set {variable} to read another{new})"
    return f"reading the journal at {redact_url(url)} ({variable})"


def open_journal(settings: Settings, command: str) -> Journal:
    """The journal of `settings`, after saying on stderr which one it is."""
    from orchestrator.saga.journal import Journal

    print(f"toolfleet {command}: {describe_source(settings.database_url)}", file=sys.stderr, flush=True)
    return Journal(settings.database_url, keys=settings.journal_keys)
