"""An `Artifact` argument, bound on the worker: the reference resolved from the store, for the call's
tenant alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.artifacts import Artifact, ArtifactStore
from workers.artifacts._arguments import artifact_argument, reading_artifacts
from workers.errors import ToolArgumentsError


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ArtifactStore:
    monkeypatch.setenv("TOOLFLEET_ARTIFACT_URL", str(tmp_path))
    monkeypatch.setenv("TOOLFLEET_INLINE_RESULT_BYTES", "1024")
    return ArtifactStore.from_url(str(tmp_path))


def _made_by(store: ArtifactStore, tenant: str | None) -> str:
    record, _head = store.put(Artifact(data=f"of {tenant}", name="a.txt"), tenant=tenant)
    return record.ref.ref


@pytest.mark.parametrize(
    ("maker", "reader", "readable"),
    [
        ("acme", "acme", True),
        ("acme", "globex", False),
        (None, "default", True),  # made and read outside any invocation: both the default tenant's
        (None, "globex", False),
        ("default", "globex", False),
    ],
)
def test_a_call_reads_its_own_tenants_artifacts_only(
    store: ArtifactStore, maker: str | None, reader: str, readable: bool
) -> None:
    # given: an artifact made by a call of `maker` (None: of no invocation)
    ref = _made_by(store, maker)

    # when: a call of tenant `reader` is given its reference
    with reading_artifacts(reader):
        if readable:
            # then: its own tenant's reads as the stored artifact
            assert artifact_argument(ref, "source").read_bytes() == f"of {maker}".encode()
        else:
            # then: another's is an arguments error that reads as an artifact that does not exist
            with pytest.raises(ToolArgumentsError, match=r'Argument "source": .*does not exist'):
                artifact_argument(ref, "source")
