"""Image artifacts in tool results, as a model is sent them: read from the store for a model that takes
images, left to the result's text for one that does not, a note where the image cannot be sent."""

from __future__ import annotations

import asyncio
import base64
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.loop import artifact_images
from orchestrator.loop.artifact_images import with_artifact_images
from orchestrator.messages import ToolExecutionResultMessage, UserMessage
from workers.artifacts import Artifact, ArtifactStore, describe
from workers.contents import Image, ImageContent, TextContent

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ArtifactStore:
    url = (tmp_path / "artifacts").as_uri()
    monkeypatch.setenv("TOOLFLEET_ARTIFACT_URL", url)
    monkeypatch.setattr(artifact_images, "_cached", OrderedDict())  # what earlier tests' reads kept
    monkeypatch.setattr(artifact_images, "_cached_bytes", 0)
    return ArtifactStore.from_url(url)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The artifacts whose bytes are read from any store, in order."""
    read: list[str] = []
    chunks = ArtifactStore.chunks

    def counted(self: ArtifactStore, artifact_id: str, *args: Any, **kwargs: Any) -> Iterator[bytes]:
        read.append(artifact_id)
        return chunks(self, artifact_id, *args, **kwargs)

    monkeypatch.setattr(ArtifactStore, "chunks", counted)
    return read


def _result(reference: str, note: str) -> ToolExecutionResultMessage:
    parts = (TextContent(note), ImageContent(Image(url=reference, mime_type="image/png"), "high"))
    return ToolExecutionResultMessage("c1", "render", note, contents=parts)


def _sent(
    store: ArtifactStore, takes_images: bool, reference: str | None = None
) -> ToolExecutionResultMessage:
    if reference is None:
        record, _ = store.put(Artifact(PNG, name="chart.png"))
        reference = record.ref.ref
    question = UserMessage.of("draw")
    messages = [question, _result(reference, f"[artifact chart.png: {reference}]")]
    sent = asyncio.run(with_artifact_images(messages, takes_images))
    assert sent[0] is question
    result = sent[1]
    assert isinstance(result, ToolExecutionResultMessage)
    return result


def test_a_model_that_takes_images_is_sent_the_image_read_from_the_store(store: ArtifactStore) -> None:
    sent = _sent(store, takes_images=True)
    assert sent.contents is not None
    note, image = sent.contents
    assert isinstance(note, TextContent) and isinstance(image, ImageContent)
    assert (image.image.mime_type, image.detail, image.image.url) == ("image/png", "high", None)
    assert base64.b64decode(image.image.base64_data or "") == PNG


def test_a_model_without_images_reads_the_text_alone(store: ArtifactStore) -> None:
    sent = _sent(store, takes_images=False)
    assert sent.contents is None and sent.text.startswith("[artifact chart.png: artifact:")


def test_a_removed_image_is_a_note_in_its_place(store: ArtifactStore) -> None:
    missing = "artifact:" + "0" * 32
    sent = _sent(store, takes_images=True, reference=missing)
    assert sent.contents is None  # no image left: the result's text, and nothing fails
    assert sent.text == f"[artifact chart.png: {missing}]"


def test_an_image_too_large_for_a_model_is_not_sent(
    store: ArtifactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(artifact_images, "MAX_IMAGE_BYTES", len(PNG) - 1)
    sent = _sent(store, takes_images=True)
    assert sent.contents is None


def test_messages_without_artifact_images_are_left_as_they_are(store: ArtifactStore) -> None:
    record, head = store.put(Artifact("plain text", name="notes.txt"))
    inline = ImageContent(Image(base64_data=base64.b64encode(PNG).decode(), mime_type="image/png"))
    messages = [
        UserMessage.of("go"),
        ToolExecutionResultMessage("c1", "notes", describe(record.ref, head)),
        ToolExecutionResultMessage("c2", "shot", "", contents=(inline,)),
    ]
    assert asyncio.run(with_artifact_images(messages, True)) == messages


def _image_of(sent: ToolExecutionResultMessage) -> bytes | None:
    images = [part for part in sent.contents or () if isinstance(part, ImageContent)]
    return base64.b64decode(images[0].image.base64_data or "") if images else None


def test_an_image_sent_again_is_not_read_again(store: ArtifactStore, reads: list[str]) -> None:
    record, _ = store.put(Artifact(PNG, name="chart.png"))
    first = _sent(store, takes_images=True, reference=record.ref.ref)
    again = _sent(store, takes_images=True, reference=record.ref.ref)
    assert _image_of(first) == _image_of(again) == PNG
    assert reads == [record.ref.id]


def test_an_image_removed_after_it_was_sent_is_not_sent_again(store: ArtifactStore, reads: list[str]) -> None:
    record, _ = store.put(Artifact(PNG, name="chart.png"))
    assert _image_of(_sent(store, takes_images=True, reference=record.ref.ref)) == PNG
    store.delete(record.ref.id)
    assert _image_of(_sent(store, takes_images=True, reference=record.ref.ref)) is None


def test_the_images_kept_are_bounded_the_least_recently_sent_dropped(
    store: ArtifactStore, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: room for one image's base64
    monkeypatch.setattr(artifact_images, "CACHE_BYTES", len(base64.b64encode(PNG)))
    one, _ = store.put(Artifact(PNG, name="one.png"))
    two, _ = store.put(Artifact(PNG, name="two.png"))

    # when: one, two, then one again are sent
    for record in (one, two, one):
        assert _image_of(_sent(store, takes_images=True, reference=record.ref.ref)) == PNG

    # then: two's kept bytes pushed one's out, so one was read twice
    assert reads == [one.ref.id, two.ref.id, one.ref.id]
    assert list(artifact_images._cached) == [(one.ref.id, one.ref.sha256)]
