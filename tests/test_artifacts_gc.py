"""`toolfleet artifacts gc`: what goes and what stays, read from a real journal (an SQLite file, a
PostgreSQL database) and a directory store, as a user runs it."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from orchestrator.cli.commands import artifacts as gc_command
from orchestrator.saga.journal import Journal, invocations
from orchestrator.saga.states import InvocationState
from tests._cli import toolfleet
from tests.orchestrator._databases import KINDS, fresh_database
from workers.artifacts import Artifact, ArtifactRecord, ArtifactStore
from workers.calls.invocation import Invocation, InvocationContext
from workers.settings import Settings

DAY_S = 86400.0
OLD = time.time() - 3 * DAY_S  # three days ago: past `--older-than 1d`


@pytest.fixture(params=KINDS)
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Journal]:
    """A fresh journal in an SQLite file, or in a PostgreSQL database of its own."""
    with fresh_database(request.param, tmp_path) as url:
        journal = Journal(url)
        yield journal
        journal.engine.dispose()


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore.from_url(f"file://{tmp_path}/artifacts")


def _invocation(journal: Journal, state: InvocationState, *, ended_at: float | None = None) -> str:
    """An invocation journaled through the journal's own writes, left in `state`; when it ended, with
    its end time moved to `ended_at` (the journal writes the present)."""
    context = InvocationContext(memory_id="gc", user_message="report")
    journal.start_invocation(context, Invocation(context).to_json())
    invocation_id = str(context.invocation_id)
    if state is not InvocationState.RUNNING:
        assert journal.set_invocation_state(invocation_id, state)
    if ended_at is not None:
        _rewrite(journal, invocation_id, finished_at=datetime.fromtimestamp(ended_at, UTC))
    return invocation_id


def _rewrite(journal: Journal, invocation_id: str, **values: Any) -> None:
    with journal.engine.begin() as connection:
        connection.execute(sa.update(invocations).where(invocations.c.id == invocation_id).values(**values))


def _artifact(store: ArtifactStore, invocation_id: str | None, *, made_at: float | None = None) -> str:
    """An artifact of `invocation_id` in `store` (its record's time moved to `made_at`); its id."""
    record, _ = store.put(Artifact(b"x" * 1000, name="report.csv"), invocation_id=invocation_id)
    if made_at is not None:
        moved = dataclasses.replace(record, created_at=made_at)
        store.fs.pipe_file(f"{store.root}/{record.ref.id}.json", json.dumps(moved.to_json()).encode())
    return record.ref.id


def _unrecorded(store: ArtifactStore, written_at: float) -> str:
    """Bytes without a record (a write cut short), last written at `written_at`; their id."""
    artifact_id = uuid.uuid4().hex
    path = Path(store.root) / artifact_id
    path.write_bytes(b"y" * 500)
    os.utime(path, (written_at, written_at))
    return artifact_id


def _exists(store: ArtifactStore, artifact_id: str) -> bool:
    return any((Path(store.root) / name).exists() for name in (artifact_id, f"{artifact_id}.json"))


@dataclasses.dataclass
class Given:
    """The store's artifacts by what the collection must do with them."""

    removed: dict[str, str]
    kept: dict[str, str]


def _given(journal: Journal, store: ArtifactStore) -> Given:
    """One artifact of each case the collection tells apart, as of `--older-than 1d`."""
    removed = {
        "finished long ago": _artifact(
            store, _invocation(journal, InvocationState.SUCCEEDED, ended_at=OLD), made_at=OLD
        ),
        "cancelled long ago, made recently": _artifact(
            store, _invocation(journal, InvocationState.CANCELLED, ended_at=OLD)
        ),
        "not journaled, made long ago": _artifact(store, str(uuid.uuid4()), made_at=OLD),
        "of no invocation, made long ago": _artifact(store, None, made_at=OLD),
        "unrecorded, written long ago": _unrecorded(store, OLD),
    }
    kept = {
        "finished recently, made long ago": _artifact(
            store, _invocation(journal, InvocationState.FAILED), made_at=OLD
        ),
        "running, made long ago": _artifact(
            store, _invocation(journal, InvocationState.RUNNING), made_at=OLD
        ),
        "paused, made long ago": _artifact(store, _invocation(journal, InvocationState.PAUSED), made_at=OLD),
        "compensating, made long ago": _artifact(
            store, _invocation(journal, InvocationState.COMPENSATING), made_at=OLD
        ),
        "not journaled, made recently": _artifact(store, str(uuid.uuid4())),
        "unrecorded, written recently": _unrecorded(store, time.time()),
    }
    return Given(removed, kept)


def _gc(journal: Journal, store: ArtifactStore, tmp_path: Path, *args: str) -> Any:
    """`toolfleet artifacts gc ARGS --json` on the journal and store; its report."""
    env = {
        "TOOLFLEET_DATABASE_URL": journal.engine.url.render_as_string(hide_password=False),
        "TOOLFLEET_ARTIFACT_URL": store.url,
    }
    result = toolfleet("artifacts", "gc", *args, "--json", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert f"the artifact store at {store.url}" in result.stderr
    return json.loads(result.stdout)


def test_gc_removes_what_ended_or_aged_and_keeps_what_an_invocation_may_still_need(
    journal: Journal, store: ArtifactStore, tmp_path: Path
) -> None:
    # given: an artifact of each case, and their sizes
    given = _given(journal, store)
    # when
    report = _gc(journal, store, tmp_path, "--older-than", "1d")
    # then: exactly the artifacts past the age go, record and bytes; the others stay, whatever their age
    assert {case for case, i in given.removed.items() if _exists(store, i)} == set()
    assert {case for case, i in given.kept.items() if not _exists(store, i)} == set()
    # and the report counts them, with their bytes, and says why each kept one stayed
    assert report["removed"] == {"artifacts": 4, "bytes": 4000}
    assert report["unrecorded"] == {"removed": 1, "bytes": 500}
    assert report["kept"] == {
        "artifacts": 5,
        "why": {
            "its invocation ended too recently": 1,
            "its invocation is compensating": 1,
            "its invocation is paused": 1,
            "its invocation is running": 1,
            "made too recently, its invocation not journaled": 1,
        },
    }
    assert (report["dry_run"], report["older_than_s"], report["failed"]) == (False, DAY_S, 0)


def test_a_dry_run_says_what_would_go_and_removes_nothing(
    journal: Journal, store: ArtifactStore, tmp_path: Path
) -> None:
    # given
    given = _given(journal, store)
    # when
    report = _gc(journal, store, tmp_path, "--older-than", "24h", "--dry-run")
    # then: every artifact is still there, and the report counts what a real run removes
    assert all(_exists(store, i) for i in [*given.removed.values(), *given.kept.values()])
    assert (report["dry_run"], report["removed"], report["unrecorded"]["removed"]) == (
        True,
        {"artifacts": 4, "bytes": 4000},
        1,
    )


@pytest.mark.parametrize("kind", KINDS[:1])
def test_the_report_in_words_says_what_went_and_why_the_rest_stayed(
    kind: str, store: ArtifactStore, tmp_path: Path
) -> None:
    # given: an artifact of a running invocation and one nobody journaled, both made long ago
    with fresh_database(kind, tmp_path) as url:
        journal = Journal(url)
        _artifact(store, _invocation(journal, InvocationState.RUNNING), made_at=OLD)
        _artifact(store, None, made_at=OLD)
        env = {"TOOLFLEET_DATABASE_URL": url, "TOOLFLEET_ARTIFACT_URL": store.url}
        # when
        result = toolfleet("artifacts", "gc", "--older-than", "30d", cwd=tmp_path, env=env)
        journal.engine.dispose()
    # then: 30 days is not past: both stay, the report saying why
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "removed 0 artifact(s), 0 bytes",
        "removed 0 write(s) without a record, 0 bytes",
        "kept 2 artifact(s):",
        "  1: its invocation is running",
        "  1: made too recently, its invocation not journaled",
    ]


@pytest.mark.parametrize("age", ["3x", "d", "-1d", "1.5.2h", ""])
def test_an_age_that_is_not_one_is_refused_saying_how_to_write_one(age: str, tmp_path: Path) -> None:
    # when
    result = toolfleet("artifacts", "gc", f"--older-than={age}", cwd=tmp_path)
    # then: a usage error, naming the forms an age takes; nothing was read
    assert result.returncode == 2
    assert f"argument --older-than: {age!r} is not an age" in result.stderr
    assert "(30d, 12h, 45m, 90s)" in result.stderr
    assert not (tmp_path / "toolfleet.db").exists()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30d", 30 * DAY_S),
        ("12h", 43200.0),
        ("45m", 2700.0),
        ("90s", 90.0),
        ("3600", 3600.0),
        (" 1.5H ", 5400.0),
    ],
)
def test_ages_read_in_their_units(text: str, seconds: float) -> None:
    assert gc_command.parse_age(text) == seconds


def test_an_artifact_store_url_that_names_no_store_is_refused(tmp_path: Path) -> None:
    # when
    env = {"TOOLFLEET_ARTIFACT_URL": "ftp://somewhere/artifacts"}
    result = toolfleet("artifacts", "gc", "--older-than", "1d", cwd=tmp_path, env=env)
    # then
    assert result.returncode == 2
    assert result.stderr == (
        "toolfleet: TOOLFLEET_ARTIFACT_URL='ftp://somewhere/artifacts' is not an artifact store: use a "
        "directory (file:///path, or a path) or s3://bucket/prefix\n"
    )


def test_the_journal_is_asked_about_a_batch_of_invocations_at_a_time(
    journal: Journal, store: ArtifactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: seven artifacts of seven invocations, asked about three at a time
    for _ in range(7):
        _artifact(store, _invocation(journal, InvocationState.SUCCEEDED, ended_at=OLD))
    monkeypatch.setattr(gc_command, "BATCH", 3)
    queries: list[object] = []
    select = journal.select

    def counted(query: Any) -> Any:
        queries.append(query)
        return select(query)

    monkeypatch.setattr(journal, "select", counted)
    # when
    report = gc_command.collect(store, journal, older_than_s=DAY_S, dry_run=False)
    # then: three queries (3 + 3 + 1), not one per artifact, and all seven went
    assert len(queries) == 3
    assert report.removed == 7 and list(store.records()) == []


def test_an_ended_invocation_without_its_end_time_ended_at_its_last_beat(
    journal: Journal, store: ArtifactStore
) -> None:
    # given: two ended invocations whose end time was never written, one beat long ago, one just now
    old, recent = (_invocation(journal, InvocationState.SUCCEEDED) for _ in range(2))
    _rewrite(journal, old, finished_at=None, heartbeat_at=datetime.fromtimestamp(OLD, UTC))
    _rewrite(journal, recent, finished_at=None)
    gone, stays = _artifact(store, old), _artifact(store, recent)
    # when
    report = gc_command.collect(store, journal, older_than_s=DAY_S, dry_run=False)
    # then
    assert (_exists(store, gone), _exists(store, stays)) == (False, True)
    assert report.kept == {"its invocation ended too recently": 1}


def test_an_artifact_that_cannot_be_removed_is_counted_and_the_rest_go_on(
    journal: Journal, store: ArtifactStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # given: two old artifacts of no journaled invocation, the first of which the store refuses to remove
    refused, removable = _artifact(store, None, made_at=OLD), _artifact(store, None, made_at=OLD)
    delete = store.delete

    def refusing(artifact_id: str) -> bool:
        if artifact_id == refused:
            raise PermissionError(f"not allowed to remove {artifact_id}")
        return delete(artifact_id)

    monkeypatch.setattr(store, "delete", refusing)
    # when
    report = gc_command.collect(store, journal, older_than_s=DAY_S, dry_run=False)
    # then: the other one went; the refused one is counted as failed, not as removed, and logged
    assert (_exists(store, refused), _exists(store, removable)) == (True, False)
    assert (report.removed, report.failed) == (1, 1)
    assert f"artifact {refused} could not be removed: not allowed" in caplog.text
    assert report.lines()[-1] == "1 could not be removed (see the warnings above)"


def test_the_age_is_counted_back_from_now(journal: Journal, store: ArtifactStore) -> None:
    # given: an artifact of an invocation that ended an hour ago
    artifact_id = _artifact(
        store, _invocation(journal, InvocationState.SUCCEEDED, ended_at=time.time() - 3600)
    )
    # when: collected as of a day later, then as of now
    later = gc_command.collect(store, journal, older_than_s=DAY_S, dry_run=True, now=time.time() + DAY_S)
    now = gc_command.collect(store, journal, older_than_s=DAY_S, dry_run=True)
    # then
    assert (later.removed, now.removed) == (1, 0)
    assert _exists(store, artifact_id)


def test_what_another_removal_took_first_is_not_counted(
    journal: Journal, store: ArtifactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: bytes without a record, and a record, both listed but removed by someone else before us
    ghost_bytes, ghost_record = uuid.uuid4().hex, _artifact(store, None, made_at=OLD)
    records = list(store.records())
    store.delete(ghost_record)
    monkeypatch.setattr(store, "records", lambda: iter(records))
    monkeypatch.setattr(store, "unrecorded", lambda older_than: {ghost_bytes: 500})
    # when
    report = gc_command.collect(store, journal, older_than_s=DAY_S, dry_run=False)
    # then: nothing failed, and nothing is claimed as removed here
    assert (report.removed, report.unrecorded, report.unrecorded_bytes, report.failed) == (0, 0, 0, 0)


def test_a_store_that_fails_while_listed_ends_the_command_saying_so(
    journal: Journal,
    store: ArtifactStore,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # given: a store whose listing fails (an S3 bucket that refuses, a disk that fails)
    def failing() -> Iterator[ArtifactRecord]:
        raise PermissionError("access denied")

    monkeypatch.setattr(store, "records", failing)
    monkeypatch.setattr("workers.artifacts.store_for", lambda url: store)
    url = journal.engine.url.render_as_string(hide_password=False)
    settings = Settings.from_env({"TOOLFLEET_DATABASE_URL": url, "TOOLFLEET_ARTIFACT_URL": store.url})
    args = argparse.Namespace(artifacts_command="gc", older_than=DAY_S, dry_run=False, json=False)
    # when
    status = gc_command.run(args, settings)
    # then: a setup error, naming the store and what it said
    assert status == 2
    assert f"toolfleet artifacts gc: the artifact store at {store.url} failed: access denied" in (
        capsys.readouterr().err
    )
