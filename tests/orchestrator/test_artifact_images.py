"""Image artifacts in tool results, as a model is sent them: read from the store for a model that takes
images, left to the result's text for one that does not, a note where the image cannot be sent."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

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
    return ArtifactStore.from_url(url)


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
