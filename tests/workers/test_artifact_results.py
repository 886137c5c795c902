"""Artifacts in a tool's result: what the model reads of one (`describe`, `size_text`), and a call's run
storing the artifacts its tool returns, and a result over the inline limit, instead of failing."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.artifact_stores import ArtifactStoreUrl
from workers import OutcomeKind, ToolExecutionRequest, ToolOutcome, tool
from workers.artifacts import (
    PREVIEW_CHARS,
    Artifact,
    ArtifactRef,
    ArtifactSink,
    ArtifactStore,
    describe,
    refs_in,
    size_text,
)
from workers.calls.invocation import Invocation, InvocationContext
from workers.calls.runner import arun_tool, run_tool
from workers.contents import Image, ImageContent, TextContent
from workers.tools import discover_tools

ID = "0123456789abcdef0123456789abcdef"


def ref(media_type: str, size: int, name: str = "out") -> ArtifactRef:
    return ArtifactRef(ID, name, media_type, size, "0" * 64, f"file:///store/{ID}")


NOTE_TEXT = f"[artifact out (text/plain, 5 bytes): artifact:{ID}]"


# describe(): what the model reads of an artifact


def test_a_short_text_is_read_whole_then_its_note() -> None:
    assert describe(ref("text/plain", 5), b"hello") == f"hello\n{NOTE_TEXT}"


@pytest.mark.parametrize(
    ("media_type", "head"),
    [
        pytest.param("text/plain", None, id="text without its first bytes"),
        pytest.param("image/png", b"\x89PNG\r\n", id="an image"),
        pytest.param("application/octet-stream", b"hello", id="other bytes"),
        pytest.param("application/pdf", b"%PDF-1.7", id="a document"),
    ],
)
def test_anything_but_text_with_its_first_bytes_is_read_as_its_note_alone(
    media_type: str, head: bytes | None
) -> None:
    assert describe(ref(media_type, 5), head) == f"[artifact out ({media_type}, 5 bytes): artifact:{ID}]"


@pytest.mark.parametrize(
    "media_type", ["text/csv", "application/json", "application/vnd.api+json", "application/x-yaml; x=y"]
)
def test_every_kind_of_text_is_previewed(media_type: str) -> None:
    assert describe(ref(media_type, 3), b"a,b").startswith("a,b\n[artifact out")


def test_a_long_text_is_cut_after_the_preview_saying_where_the_rest_is() -> None:
    text = "x" * (PREVIEW_CHARS + 500)

    described = describe(ref("text/plain", len(text)), text.encode())

    shown, cut, note = described.split("\n")
    assert shown == "x" * PREVIEW_CHARS
    assert cut == f"[… the first {PREVIEW_CHARS} characters of 2.5 KB; the whole text is artifact:{ID}]"
    assert note == f"[artifact out (text/plain, 2.5 KB): artifact:{ID}]"


def test_a_text_longer_than_its_first_bytes_is_cut_even_when_they_fit_the_preview() -> None:
    described = describe(ref("text/plain", 50_000_000), b"first line")

    assert described.split("\n") == [
        "first line",
        f"[… the first 10 characters of 50.0 MB; the whole text is artifact:{ID}]",
        f"[artifact out (text/plain, 50.0 MB): artifact:{ID}]",
    ]


def test_the_preview_counts_characters_not_bytes_and_drops_a_cut_character() -> None:
    text = "é" * PREVIEW_CHARS  # two bytes each
    head = text.encode()[:-1]  # the first bytes end inside a character

    described = describe(ref("text/plain", len(text.encode())), head)

    assert described.split("\n")[0] == "é" * (PREVIEW_CHARS - 1)
    assert f"the first {PREVIEW_CHARS - 1} characters of 4.0 KB" in described


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 bytes"),
        (812, "812 bytes"),
        (999, "999 bytes"),
        (1000, "1.0 KB"),
        (4200, "4.2 KB"),
        (50_000_000, "50.0 MB"),
        (3_500_000_000, "3.5 GB"),
        (2_000_000_000_000, "2.0 TB"),
    ],
)
def test_sizes_read_in_decimal_units(size: int, text: str) -> None:
    assert size_text(size) == text


# A call's run: artifacts returned by a tool, and results over the inline limit

RETURNED: list[Any] = []


@tool("Returns what the test set")
def give() -> Any:
    return RETURNED[-1]


@tool("Returns what the test set, awaiting")
async def agive() -> Any:
    return RETURNED[-1]


@pytest.fixture(params=["dir", "s3"])
def where(request: pytest.FixtureRequest) -> ArtifactStoreUrl:
    shared: ArtifactStoreUrl = request.getfixturevalue(f"{request.param}_artifact_url")
    return shared.under(uuid.uuid4().hex[:12])


@pytest.fixture
def sink(where: ArtifactStoreUrl) -> ArtifactSink:
    return ArtifactSink(where.url, inline_result_bytes=1000)


INVOCATION = Invocation(InvocationContext(), {"tenant": "acme"})


def returning(value: Any, sink: ArtifactSink | None, *, function: Any = give) -> ToolOutcome:
    RETURNED.append(value)
    definition = discover_tools(function)[0]
    return run_tool(
        definition, ToolExecutionRequest("call-7", definition.name, "{}"), INVOCATION, artifacts=sink
    )


def stored_bytes(sink: ArtifactSink, result_object: dict[str, Any]) -> bytes:
    return b"".join(sink.store.chunks(ArtifactRef.from_json(result_object).id))


def test_a_returned_artifact_is_stored_and_the_result_is_its_reference(sink: ArtifactSink) -> None:
    outcome = returning(Artifact(b"\x00\x01" * 3000, name="blob.bin"), sink)

    assert outcome.kind is OutcomeKind.SUCCESS
    stored = ArtifactRef.from_json(outcome.result_object)
    assert outcome.result_object == stored.to_json()
    assert (stored.name, stored.size, stored.sha256) == (
        "blob.bin",
        6000,
        hashlib.sha256(b"\x00\x01" * 3000).hexdigest(),
    )
    assert outcome.text == describe(stored)
    assert stored_bytes(sink, outcome.result_object) == b"\x00\x01" * 3000
    record = sink.store.record(stored.ref)
    assert (record.call_id, record.tool, record.tenant) == ("call-7", "give", "acme")
    assert record.invocation_id == str(INVOCATION.context.invocation_id)


def test_a_returned_text_artifact_is_previewed_for_the_model(sink: ArtifactSink) -> None:
    outcome = returning(Artifact("line one\nline two", name="log.txt"), sink)

    assert outcome.text.startswith("line one\nline two\n[artifact log.txt (text/plain")


def test_a_list_of_artifacts_is_a_list_of_references(sink: ArtifactSink) -> None:
    outcome = returning([Artifact(b"a", name="a.bin"), Artifact(b"bb", name="b.bin")], sink)

    assert [item["name"] for item in outcome.result_object] == ["a.bin", "b.bin"]
    assert [stored_bytes(sink, item) for item in outcome.result_object] == [b"a", b"bb"]
    assert outcome.text.count("[artifact ") == 2


def test_an_artifact_nested_in_a_result_is_replaced_by_its_reference(sink: ArtifactSink) -> None:
    outcome = returning({"count": 2, "files": [{"report": Artifact(b"%PDF", name="report.pdf")}]}, sink)

    assert outcome.kind is OutcomeKind.SUCCESS
    nested = outcome.result_object["files"][0]["report"]
    assert nested["type"] == "artifact" and nested["media_type"] == "application/pdf"
    assert outcome.result_object["count"] == 2
    assert stored_bytes(sink, nested) == b"%PDF"
    assert json.loads(outcome.text) == outcome.result_object


def test_an_image_artifact_reaches_the_model_as_image_content(sink: ArtifactSink) -> None:
    outcome = returning(Artifact(b"\x89PNG\r\n\x1a\n", name="chart.png"), sink)

    assert outcome.contents is not None
    text, image = outcome.contents
    assert isinstance(text, TextContent) and text.text.startswith("[artifact chart.png (image/png")
    assert isinstance(image, ImageContent)
    assert image.image.url == outcome.result_object["ref"]
    assert image.image.mime_type == "image/png"


def test_an_artifact_that_cannot_be_stored_is_an_error_of_the_call(
    sink: ArtifactSink, tmp_path: Path
) -> None:
    outcome = returning(Artifact(path=tmp_path / "missing.csv"), sink)

    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert "artifact 'missing.csv' could not be stored" in outcome.text
    assert list(sink.store.records()) == []


def test_a_stream_that_fails_is_an_error_of_the_call_and_leaves_no_record(sink: ArtifactSink) -> None:
    def failing() -> Any:
        yield b"half"
        raise RuntimeError("the source went away")

    outcome = returning(Artifact(stream=failing(), name="half.bin"), sink)

    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert "the source went away" in outcome.text
    assert list(sink.store.records()) == []


def test_an_async_tools_artifact_is_stored_too(sink: ArtifactSink) -> None:
    RETURNED.append({"big": Artifact(b"z" * 5000, name="z.bin")})
    definition = discover_tools(agive)[0]
    request = ToolExecutionRequest("call-8", definition.name, "{}")

    outcome = asyncio.run(arun_tool(definition, request, INVOCATION, artifacts=sink))

    assert outcome.kind is OutcomeKind.SUCCESS
    assert stored_bytes(sink, outcome.result_object["big"]) == b"z" * 5000


@pytest.mark.parametrize("size", [10, 999, 1000])
def test_a_result_within_the_inline_limit_stays_inline(sink: ArtifactSink, size: int) -> None:
    outcome = returning("y" * size, sink)

    assert (outcome.kind, outcome.text, outcome.result_object) == (
        OutcomeKind.SUCCESS,
        "y" * size,
        "y" * size,
    )
    assert list(sink.store.records()) == []


def test_a_text_within_the_limit_in_bytes_stays_inline_though_its_characters_could_be_wider(
    sink: ArtifactSink,
) -> None:
    outcome = returning("a" * 400, sink)  # 400 bytes; 4 bytes a character would be 1,600

    assert outcome.text == "a" * 400
    assert list(sink.store.records()) == []


def test_a_text_over_the_limit_in_bytes_is_stored_though_its_characters_are_within(
    sink: ArtifactSink,
) -> None:
    text = "☃" * 400  # 400 characters, 1,200 bytes

    outcome = returning(text, sink)

    assert outcome.result_object["type"] == "artifact"
    assert stored_bytes(sink, outcome.result_object) == text.encode()


def test_a_text_over_the_limit_becomes_a_text_artifact_the_model_reads_the_beginning_of(
    sink: ArtifactSink,
) -> None:
    text = "".join(f"row {n}\n" for n in range(2000))  # about 15 KB

    outcome = returning(text, sink)

    assert outcome.kind is OutcomeKind.SUCCESS
    stored = ArtifactRef.from_json(outcome.result_object)
    assert (stored.name, stored.media_type, stored.size) == (
        "give-result.txt",
        "text/plain; charset=utf-8",
        len(text),
    )
    assert stored_bytes(sink, outcome.result_object) == text.encode()
    assert outcome.text.startswith(text[:PREVIEW_CHARS])
    assert f"the whole text is {stored.ref}" in outcome.text
    assert len(outcome.text) < PREVIEW_CHARS + 300


def test_a_structured_result_over_the_limit_becomes_a_json_artifact(sink: ArtifactSink) -> None:
    rows = [{"n": n, "name": f"item {n}"} for n in range(200)]

    outcome = returning(rows, sink)

    stored = ArtifactRef.from_json(outcome.result_object)
    assert (stored.name, stored.media_type) == ("give-result.json", "application/json")
    assert json.loads(stored_bytes(sink, outcome.result_object)) == rows


def test_a_result_of_references_over_the_limit_is_not_stored_again(sink: ArtifactSink) -> None:
    many = [Artifact(b"x", name=f"{n:03}-with-a-long-name-to-fill-the-note.bin") for n in range(30)]

    outcome = returning(many, sink)

    assert len(outcome.text) > 1000  # the notes alone are over the limit
    assert len(outcome.result_object) == 30
    assert len(list(sink.store.records())) == 30


def test_the_limit_and_the_store_come_from_the_environment_when_no_sink_is_given(
    where: ArtifactStoreUrl, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLFLEET_ARTIFACT_URL", where.url)
    monkeypatch.setenv("TOOLFLEET_INLINE_RESULT_BYTES", "100")

    small, large = returning("s" * 100, None), returning("l" * 101, None)

    assert small.result_object == "s" * 100
    assert large.kind is OutcomeKind.SUCCESS
    stored = ArtifactRef.from_json(large.result_object)
    assert stored.uri.startswith(ArtifactStore.from_url(where.url).url)
    assert b"".join(ArtifactStore.from_url(where.url).chunks(stored.id)) == b"l" * 101


def test_an_image_given_as_data_over_the_limit_becomes_an_image_artifact(sink: ArtifactSink) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8  # 2 KB: over the 1,000-byte limit
    inline = Image(base64_data=base64.b64encode(png).decode(), mime_type="image/png")

    outcome = returning([TextContent("the chart:"), ImageContent(inline, "low")], sink)

    # the bytes are stored, the contents name them, and the result object lists them
    assert outcome.kind is OutcomeKind.SUCCESS
    (stored,) = refs_in(outcome.result_object)
    assert (stored.name, stored.media_type, stored.size) == ("give-image-2.png", "image/png", len(png))
    assert stored_bytes(sink, stored.to_json()) == png
    text, note, image = outcome.contents or []
    assert text == TextContent("the chart:") and note == TextContent(describe(stored))
    assert image == ImageContent(Image(url=stored.ref, mime_type="image/png"), "low")
    assert outcome.text == f"the chart:\n{describe(stored)}"


def test_a_small_image_given_as_data_stays_inline(sink: ArtifactSink) -> None:
    inline = Image(base64_data=base64.b64encode(b"\x89PNG tiny").decode(), mime_type="image/png")

    outcome = returning(inline, sink)

    assert outcome.contents == [ImageContent(inline)] and outcome.result_object is None


# refs_in(..., text=): a result's text names every artifact its result object holds


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(lambda: Artifact(b"a", name="one.bin"), id="one artifact"),
        pytest.param(lambda: [Artifact(b"a", name="a.txt"), Artifact(b"b", name="b.png")], id="a list"),
        pytest.param(lambda: {"rows": 3, "deep": [{"file": Artifact(b"c", name="c.csv")}]}, id="nested"),
        pytest.param(lambda: "t" * 5000, id="over the inline limit"),
        pytest.param(
            lambda: ImageContent(
                Image(base64_data=base64.b64encode(b"p" * 2000).decode(), mime_type="image/png")
            ),
            id="an image over the limit",
        ),
    ],
)
def test_a_results_text_names_each_artifact_its_object_holds(sink: ArtifactSink, value: Any) -> None:
    outcome = returning(value(), sink)

    held = refs_in(outcome.result_object)
    assert held, outcome
    assert refs_in(outcome.result_object, text=outcome.text) == held


def test_a_result_whose_text_names_no_artifact_is_not_walked() -> None:
    tree = {"file": ref("text/plain", 5).to_json()}

    assert refs_in(tree, text="no reference here") == []
    assert refs_in(tree, text=f"see artifact:{ID}") == [ref("text/plain", 5)]
