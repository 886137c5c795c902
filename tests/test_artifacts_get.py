"""`toolfleet artifacts get`: an artifact from the store to a file or stdout, checked against its record."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from orchestrator.cli.commands.artifacts_get import safe_file_name
from tests._cli import TOOLFLEET, environment
from workers.artifacts import Artifact, ArtifactRef, ArtifactStore

DATA = bytes(range(256)) * 5000  # 1.28 MB: more than one chunk


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore.from_url((tmp_path / "store").as_uri())


def _put(store: ArtifactStore, name: str = "../../etc/report.bin") -> ArtifactRef:
    record, _ = store.put(Artifact(DATA, name=name))
    return record.ref


def _get(store: ArtifactStore, cwd: Path, *args: str) -> tuple[int, bytes, str]:
    result = subprocess.run(
        [TOOLFLEET, "artifacts", "get", *args],
        cwd=cwd,
        env=environment({"TOOLFLEET_ARTIFACT_URL": store.url}),
        capture_output=True,
        timeout=60,
        check=False,
    )
    return result.returncode, result.stdout, result.stderr.decode()


def test_an_artifact_is_written_under_its_own_name_in_this_directory_only(
    store: ArtifactStore, tmp_path: Path
) -> None:
    ref = _put(store)
    code, _, err = _get(store, tmp_path, ref.ref)
    assert code == 0, err
    assert (tmp_path / "report.bin").read_bytes() == DATA  # the name's last part: never ../../etc
    assert f"SHA-256 {hashlib.sha256(DATA).hexdigest()}" in err
    # and a second get refuses to write over it
    code, _, err = _get(store, tmp_path, ref.id)
    assert code == 2 and "report.bin exists: give -o PATH" in err
    assert (tmp_path / "report.bin").read_bytes() == DATA


def test_an_artifact_goes_to_a_path_or_to_stdout(store: ArtifactStore, tmp_path: Path) -> None:
    ref = _put(store)
    assert _get(store, tmp_path, ref.ref, "-o", str(tmp_path / "copy"))[0] == 0
    assert (tmp_path / "copy").read_bytes() == DATA
    code, out, _ = _get(store, tmp_path, ref.ref, "-o", "-")
    assert (code, out) == (0, DATA)


def test_a_missing_artifact_is_refused_saying_so(store: ArtifactStore, tmp_path: Path) -> None:
    code, _, err = _get(store, tmp_path, "artifact:" + "0" * 32)
    assert code == 2
    assert err == f"toolfleet artifacts get: artifact {'0' * 32} does not exist (or was removed)\n"


def test_bytes_that_are_not_the_records_are_refused_and_not_left(
    store: ArtifactStore, tmp_path: Path
) -> None:
    ref = _put(store, "report.bin")
    store.fs.pipe_file(f"{store.root}/{ref.id}", DATA[:-1] + b"!")  # changed in the store
    code, _, err = _get(store, tmp_path, ref.ref)
    assert code == 1 and "bytes are not those its record names" in err
    assert not (tmp_path / "report.bin").exists()


@pytest.mark.parametrize(
    ("name", "file"),
    [
        ("a/b/c.txt", "c.txt"),
        ("..", "artifact"),
        ("", "artifact"),
        ("x\x1b[2J.txt", "x_[2J.txt"),
        ("C:\\x\\y.png", "y.png"),
    ],
)
def test_a_name_becomes_a_file_name_of_this_directory(name: str, file: str) -> None:
    assert safe_file_name(name) == file
