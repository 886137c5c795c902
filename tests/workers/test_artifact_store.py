"""The artifact store, on a directory and on S3 (moto's server): writes from every source, reads,
records, removal, listings, unrecorded bytes, presigned URLs, and a write cut short."""

from __future__ import annotations

import hashlib
import io
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.artifact_stores import ArtifactStoreUrl
from workers.artifacts import Artifact, ArtifactRecord, ArtifactStore
from workers.errors import ArtifactNotFoundError

PAYLOAD = bytes(range(256)) * 4000  # 1,024,000 bytes: more than one chunk of a read
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()


@pytest.fixture(params=["dir", "s3"])
def where(request: pytest.FixtureRequest) -> ArtifactStoreUrl:
    """The module's directory or S3 store, under a prefix of this test's own."""
    shared: ArtifactStoreUrl = request.getfixturevalue(f"{request.param}_artifact_url")
    return shared.under(uuid.uuid4().hex[:12])


@pytest.fixture
def store(where: ArtifactStoreUrl) -> ArtifactStore:
    return ArtifactStore.from_url(where.url)


def put(store: ArtifactStore, artifact: Artifact) -> ArtifactRecord:
    record, _head = store.put(artifact, invocation_id="inv-1", call_id="call-1", tool="maker", tenant="acme")
    return record


def chunked(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_bytes_become_a_record_with_their_size_digest_name_and_type(store: ArtifactStore) -> None:
    record, head = store.put(
        Artifact(PAYLOAD, name="blob.bin"),
        invocation_id="inv-1",
        call_id="call-1",
        tool="maker",
        tenant="acme",
    )

    ref = record.ref
    assert (ref.name, ref.media_type, ref.size, ref.sha256) == (
        "blob.bin",
        "application/octet-stream",
        len(PAYLOAD),
        DIGEST,
    )
    assert ref.uri == f"{store.url}/{ref.id}"
    assert (record.invocation_id, record.call_id, record.tool, record.tenant) == (
        "inv-1",
        "call-1",
        "maker",
        "acme",
    )
    assert time.time() - 60 < record.created_at <= time.time()
    assert head == PAYLOAD[: len(head)] and 0 < len(head) < len(PAYLOAD)
    assert store.record(ref.ref) == record  # the record as stored, by `artifact:<id>` or by id
    assert store.record(ref.id) == record


def test_text_is_stored_as_utf8_plain_text(store: ArtifactStore) -> None:
    ref = put(store, Artifact("née ☃", name="note")).ref

    assert ref.media_type == "text/plain; charset=utf-8"
    assert b"".join(store.chunks(ref.id)) == "née ☃".encode()
    assert ref.size == len("née ☃".encode())


def test_a_path_is_stored_under_its_file_name_and_the_type_its_extension_says(
    store: ArtifactStore, tmp_path: Path
) -> None:
    path = tmp_path / "table.csv"
    path.write_bytes(PAYLOAD)

    ref = put(store, Artifact(path=path)).ref

    assert (ref.name, ref.media_type, ref.size, ref.sha256) == ("table.csv", "text/csv", len(PAYLOAD), DIGEST)
    assert b"".join(store.chunks(ref.id)) == PAYLOAD


def test_a_file_object_is_stored_as_read(store: ArtifactStore) -> None:
    ref = put(store, Artifact(stream=io.BytesIO(PAYLOAD), name="dump.tar.gz")).ref

    assert (ref.name, ref.media_type, ref.size, ref.sha256) == (
        "dump.tar.gz",
        "application/x-tar",
        len(PAYLOAD),
        DIGEST,
    )


def test_an_iterator_of_chunks_is_stored_whole_its_empty_chunks_skipped(store: ArtifactStore) -> None:
    pieces = [b"", *chunked(PAYLOAD, 100_000), b""]

    ref = put(store, Artifact(stream=iter(pieces), name="rows.json")).ref

    assert (ref.media_type, ref.size, ref.sha256) == ("application/json", len(PAYLOAD), DIGEST)


def test_an_empty_artifact_is_stored_too(store: ArtifactStore) -> None:
    ref = put(store, Artifact(b"", name="empty.txt")).ref

    assert (ref.size, ref.sha256) == (0, hashlib.sha256(b"").hexdigest())
    assert list(store.chunks(ref.id)) == []


@pytest.mark.parametrize("size", [1000, 1 << 20, 3 << 20])
def test_chunks_give_back_the_bytes_at_most_size_at_a_time(store: ArtifactStore, size: int) -> None:
    ref = put(store, Artifact(PAYLOAD, name="blob.bin")).ref

    chunks = list(store.chunks(ref.id, size))

    assert all(0 < len(chunk) <= size for chunk in chunks)
    assert b"".join(chunks) == PAYLOAD


def test_a_stored_artifact_reads_back_as_a_file_and_through_its_value(
    store: ArtifactStore, tmp_path: Path
) -> None:
    record = put(store, Artifact(PAYLOAD, name="blob.bin"))

    with store.open(record.ref.id) as file:
        assert file.read() == PAYLOAD
    stored = Artifact.stored(record.ref, store)
    assert stored.read_bytes() == PAYLOAD
    assert Path(stored.save(tmp_path / "copy.bin")).read_bytes() == PAYLOAD
    assert stored.size == len(PAYLOAD) and stored.ref == record.ref


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(uuid.uuid4().hex, id="an unknown id"),
        pytest.param(f"artifact:{uuid.uuid4().hex}", id="an unknown reference"),
        pytest.param("artifact:not-an-id", id="a reference to no id"),
        pytest.param("../../etc/passwd", id="a path"),
        pytest.param("", id="nothing"),
    ],
)
def test_a_record_that_does_not_exist_is_not_found(store: ArtifactStore, name: str) -> None:
    with pytest.raises(ArtifactNotFoundError):
        store.record(name)


def test_opening_bytes_that_do_not_exist_is_not_found(store: ArtifactStore) -> None:
    with pytest.raises(ArtifactNotFoundError):
        b"".join(store.chunks(uuid.uuid4().hex))


def test_delete_removes_the_record_and_the_bytes(store: ArtifactStore) -> None:
    kept = put(store, Artifact(b"kept", name="kept.txt")).ref
    gone = put(store, Artifact(PAYLOAD, name="gone.bin")).ref

    assert store.delete(gone.id) is True

    with pytest.raises(ArtifactNotFoundError):
        store.record(gone.ref)
    with pytest.raises(ArtifactNotFoundError):
        b"".join(store.chunks(gone.id))
    assert not store.fs.exists(f"{store.root}/{gone.id}")
    assert store.record(kept.id).ref == kept


def test_deleting_what_is_not_there_says_so(store: ArtifactStore) -> None:
    gone = put(store, Artifact(b"once", name="once.txt")).ref
    store.delete(gone.id)

    assert store.delete(gone.id) is False
    assert store.delete(uuid.uuid4().hex) is False


def test_records_lists_every_artifact_and_skips_what_is_not_a_record(store: ArtifactStore) -> None:
    refs = {put(store, Artifact(f"number {n}", name=f"{n}.txt")).ref for n in range(3)}
    store.fs.pipe_file(f"{store.root}/{uuid.uuid4().hex}.json", b"{not json")

    assert {record.ref for record in store.records()} == refs


def test_a_store_that_listed_still_finds_what_another_process_wrote_since(store: ArtifactStore) -> None:
    put(store, Artifact(b"before", name="before.txt"))
    assert len(list(store.records())) == 1  # a listing, as a collector's
    # another process's store: a filesystem client of its own
    fs = type(store.fs)(skip_instance_cache=True, **store.fs.storage_options)
    later = put(ArtifactStore(fs, store.root, store.url), Artifact(b"later", name="later.txt")).ref

    assert store.record(later.id).ref == later
    assert b"".join(store.chunks(later.id)) == b"later"


def test_an_empty_store_lists_nothing(store: ArtifactStore) -> None:
    assert list(store.records()) == []
    assert store.unrecorded(time.time() + 3600) == {}


def test_unrecorded_bytes_are_found_only_once_older_than_asked(store: ArtifactStore) -> None:
    recorded = put(store, Artifact(b"whole", name="whole.txt")).ref
    orphan = uuid.uuid4().hex
    store.fs.pipe_file(f"{store.root}/{orphan}", b"a write cut short")
    store.fs.pipe_file(f"{store.root}/notes.txt", b"not an artifact's bytes")
    written = time.time()

    assert store.unrecorded(written - 3600) == {}  # written after that: maybe still being written
    assert store.unrecorded(written + 60) == {orphan: len(b"a write cut short")}  # its size, listed
    assert store.record(recorded.id).ref == recorded


def test_a_write_that_fails_midway_leaves_nothing(store: ArtifactStore) -> None:
    def failing() -> Iterator[bytes]:
        yield PAYLOAD
        raise OSError("the disk left")

    with pytest.raises(OSError, match="the disk left"):
        put(store, Artifact(stream=failing(), name="half.bin"))

    # neither a record nor bytes: the upload aborted, the partial file removed
    assert list(store.records()) == []
    assert store.unrecorded(time.time() + 60) == {}


def test_a_directory_store_presigns_nothing(dir_artifact_url: ArtifactStoreUrl) -> None:
    store = ArtifactStore.from_url(dir_artifact_url.under("presign").url)
    ref = put(store, Artifact(b"local", name="local.txt")).ref

    assert store.presign(ref.id, 60) is None
    assert not store.is_s3


def test_an_s3_store_presigns_a_url_that_reads_the_bytes_without_credentials(
    s3_artifact_url: ArtifactStoreUrl,
) -> None:
    store = ArtifactStore.from_url(s3_artifact_url.under("presign").url)
    ref = put(store, Artifact(PAYLOAD, name="shared.bin")).ref

    url = store.presign(ref.id, 60)

    assert url is not None and store.is_s3
    assert "Signature" in url  # signed: not a public object's plain address
    response = httpx.get(url, timeout=10)  # no credentials, no AWS client: the URL alone
    assert response.status_code == 200
    assert hashlib.sha256(response.content).hexdigest() == DIGEST


def test_an_s3_url_without_a_signature_is_refused(s3_artifact_url: ArtifactStoreUrl) -> None:
    store = ArtifactStore.from_url(s3_artifact_url.under("unsigned").url)
    ref = put(store, Artifact(b"private", name="private.txt")).ref
    signed = store.presign(ref.id, 60)
    assert signed is not None

    assert httpx.get(signed.split("?", 1)[0], timeout=10).status_code == 403
