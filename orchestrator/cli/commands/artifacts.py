"""`toolfleet artifacts gc`: remove the artifacts nobody can still need from the artifact store.

An artifact belongs to the invocation whose call made it (its record's `invocation_id`). Once that
invocation has ended (succeeded, failed or cancelled) more than the given age ago, in the saga journal,
its artifacts go. One the journal does not know (made by an in-process call with no journal, or the
journal was wiped) goes once it is itself older than that age. One of an invocation still running,
paused for approval or compensating stays, whatever its age: the invocation may still read it, or its
compensation undo it. Bytes without a record (a write cut short) go once they are older than the age.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from typing import TYPE_CHECKING, Any

from orchestrator.cli.commands._command import add_command, refuse
from orchestrator.cli.commands.artifacts_get import add_get, get
from orchestrator.saga.states import InvocationState
from workers.artifacts import size_text
from workers.errors import SettingsError
from workers.settings import Settings

if TYPE_CHECKING:
    from orchestrator.saga.journal import Journal
    from workers.artifacts import ArtifactRecord, ArtifactStore

__all__ = ["BATCH", "Collected", "collect", "parse_age"]

log = logging.getLogger(__name__)

HELP = "manage the artifact store (TOOLFLEET_ARTIFACT_URL)"
GC_HELP = "remove the artifacts of invocations that ended long ago, and those no journaled invocation owns"
GC_DESCRIPTION = (
    GC_HELP[0].upper() + GC_HELP[1:] + ". An artifact goes when its invocation ended in the journal "
    "(TOOLFLEET_DATABASE_URL) more than --older-than ago, or, when the journal does not know its "
    "invocation, when it was made more than --older-than ago; one of a running, paused or compensating "
    "invocation stays, whatever its age. Bytes left without a record by a write cut short go too."
)
BATCH = 500  # the invocations asked of the journal at once
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")

# Why an artifact stays, as the report says it.
KEPT_UNFINISHED = "its invocation is {}"
KEPT_RECENTLY_FINISHED = "its invocation ended too recently"
KEPT_RECENT = "made too recently, its invocation not journaled"


def parse_age(text: str) -> float:
    """An age in seconds from `30d`, `12h`, `45m`, `90s` or a plain number of seconds."""
    match = _AGE.fullmatch(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: write a number of days, hours, minutes or seconds "
            "(30d, 12h, 45m, 90s) or of seconds alone (3600)"
        )
    return float(match[1]) * _UNITS[match[2]]


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "artifacts", HELP)
    actions = parser.add_subparsers(dest="artifacts_command", metavar="ACTION")
    actions.required = True
    gc = actions.add_parser("gc", help=GC_HELP, description=GC_DESCRIPTION)
    gc.add_argument(
        "--older-than",
        required=True,
        type=parse_age,
        metavar="D",
        help="the age past which an artifact may go: 30d, 12h, 45m, 90s or seconds",
    )
    gc.add_argument("--dry-run", action="store_true", help="say what would be removed; remove nothing")
    gc.add_argument("--json", action="store_true", help="print the report as JSON")
    add_get(actions)
    return parser


@dataclass
class Collected:
    """What a collection removed (or, dry, would remove) and what it kept, by reason."""

    older_than_s: float
    dry_run: bool
    removed: int = 0
    removed_bytes: int = 0
    unrecorded: int = 0
    unrecorded_bytes: int = 0
    failed: int = 0
    kept: Counter[str] = field(default_factory=Counter)

    def to_json(self) -> dict[str, Any]:
        return {
            "older_than_s": self.older_than_s,
            "dry_run": self.dry_run,
            "removed": {"artifacts": self.removed, "bytes": self.removed_bytes},
            "unrecorded": {"removed": self.unrecorded, "bytes": self.unrecorded_bytes},
            "failed": self.failed,
            "kept": {"artifacts": sum(self.kept.values()), "why": dict(sorted(self.kept.items()))},
        }

    def lines(self) -> list[str]:
        verb = "would remove" if self.dry_run else "removed"
        lines = [
            f"{verb} {self.removed} artifact(s), {size_text(self.removed_bytes)}",
            f"{verb} {self.unrecorded} write(s) without a record, {size_text(self.unrecorded_bytes)}",
        ]
        lines.append(f"kept {sum(self.kept.values())} artifact(s)" + (":" if self.kept else ""))
        lines += [f"  {count}: {why}" for why, count in sorted(self.kept.items())]
        if self.failed:
            lines.append(f"{self.failed} could not be removed (see the warnings above)")
        return lines


@dataclass(frozen=True)
class _Ended:
    """What the journal says of an invocation: its state, and when it ended (None: it has not)."""

    state: InvocationState
    ended_at: float | None


def collect(
    store: ArtifactStore, journal: Journal, *, older_than_s: float, dry_run: bool, now: float | None = None
) -> Collected:
    """Remove (unless `dry_run`) what is older than `older_than_s` seconds at `now` (default: now), as
    the module says; the journal is asked about `BATCH` invocations at a time."""
    now = time.time() if now is None else now
    cutoff = now - older_than_s
    report = Collected(older_than_s, dry_run)
    for batch in _batches(store.records(), BATCH):
        ended = _invocations(journal, {r.invocation_id for r in batch if r.invocation_id})
        for record in batch:
            why = _kept_because(record, ended.get(record.invocation_id or ""), cutoff)
            if why is not None:
                report.kept[why] += 1
            elif _removed(store, record.ref.id, dry_run, report):
                report.removed += 1
                report.removed_bytes += record.ref.size
    for artifact_id, size in store.unrecorded(cutoff).items():
        if _removed(store, artifact_id, dry_run, report):
            report.unrecorded += 1
            report.unrecorded_bytes += size
    return report


def _kept_because(record: ArtifactRecord, ended: _Ended | None, cutoff: float) -> str | None:
    """Why `record`'s artifact stays; None when it goes."""
    if ended is None:  # no journaled invocation: its own age decides
        return KEPT_RECENT if record.created_at >= cutoff else None
    if ended.ended_at is None:
        return KEPT_UNFINISHED.format(ended.state.value)
    return KEPT_RECENTLY_FINISHED if ended.ended_at >= cutoff else None


def _invocations(journal: Journal, ids: set[str]) -> dict[str, _Ended]:
    """The journal's word on the invocations `ids`, in one query."""
    if not ids:
        return {}
    import sqlalchemy as sa

    from orchestrator.saga.journal import invocations

    columns = (invocations.c.id, invocations.c.state, invocations.c.finished_at, invocations.c.heartbeat_at)
    found = {}
    for row in journal.select(sa.select(*columns).where(invocations.c.id.in_(sorted(ids)))):
        state = InvocationState(row["state"])
        # an ended row without its end time (not one the journal writes): its last beat stands in
        ended_at = _epoch(row["finished_at"] or row["heartbeat_at"]) if state.finished else None
        found[row["id"]] = _Ended(state, ended_at)
    return found


def _epoch(moment: datetime) -> float:
    return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)).timestamp()


def _removed(store: ArtifactStore, artifact_id: str, dry_run: bool, report: Collected) -> bool:
    """Whether the artifact is (or, dry, would be) removed here: not when another removal took it first;
    a removal that fails is counted and told."""
    if dry_run:
        return True
    try:
        return store.delete(artifact_id)
    except OSError as exc:
        log.warning("artifact %s could not be removed: %s", artifact_id, exc)
        report.failed += 1
        return False


def _batches(records: Iterable[ArtifactRecord], size: int) -> Iterator[list[ArtifactRecord]]:
    iterator = iter(records)
    while batch := list(islice(iterator, size)):
        yield batch


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.cli.commands._journal_source import open_journal
    from workers.artifacts import store_for

    if args.artifacts_command == "get":
        return get(args, settings)
    command = "artifacts gc"
    try:
        store = store_for(settings.artifact_url)
    except SettingsError as exc:  # a URL that names no store
        return refuse(command, exc)
    print(f"toolfleet {command}: the artifact store at {store.url}", file=sys.stderr, flush=True)
    journal = open_journal(settings, command)
    try:
        report = collect(store, journal, older_than_s=args.older_than, dry_run=args.dry_run)
    except OSError as exc:
        return refuse(command, OSError(f"the artifact store at {store.url} failed: {exc}"))
    finally:
        journal.engine.dispose()
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2)
        print()
    else:
        print("\n".join(report.lines()))
    return 1 if report.failed else 0
