"""What the service and the run view make of an artifact, without a process: the download headers (a
tool's name and media type made safe for a header), and a page's view of a call's artifacts (a text's
beginning read as its first bytes alone, another tenant's or a removed one unlinked, a bounded number
read per page); and a store URL that names no store, refused as the service is made."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.server.artifacts import disposition, safe_media_type
from orchestrator.server.tenants import Viewer
from orchestrator.server.ui import artifacts as ui_artifacts
from workers.artifacts import Artifact, ArtifactRef, ArtifactStore, store_for
from workers.errors import SettingsError
from workers.settings import Settings


@pytest.mark.parametrize(
    ("name", "header"),
    [
        ("report.csv", "attachment; filename=\"report.csv\"; filename*=UTF-8''report.csv"),
        ('a "b" \\c.txt', "attachment; filename=\"a _b_ _c.txt\"; filename*=UTF-8''a%20%22b%22%20%5Cc.txt"),
        (
            "x\r\nSet-Cookie: y",
            "attachment; filename=\"x__Set-Cookie: y\"; filename*=UTF-8''x%0D%0ASet-Cookie%3A%20y",
        ),
        ("ünï.md", "attachment; filename=\"_n_.md\"; filename*=UTF-8''%C3%BCn%C3%AF.md"),
        ("\ud800.bin", "attachment; filename=\"_.bin\"; filename*=UTF-8''%3F.bin"),
        ("", "attachment; filename=\"artifact\"; filename*=UTF-8''artifact"),
    ],
    ids=["plain", "quotes", "crlf", "unicode", "lone-surrogate", "empty"],
)
def test_the_download_name_is_quoted_for_a_header(name: str, header: str) -> None:
    assert disposition(name) == header


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        ("text/csv", "text/csv"),
        ("text/plain; charset=utf-8", "text/plain; charset=utf-8"),
        ('multipart/mixed; boundary="a b"', 'multipart/mixed; boundary="a b"'),
        ("image/svg+xml", "image/svg+xml"),
        ("text/html\r\nX-Injected: 1", "application/octet-stream"),
        ("text/plain; charset=utf-8\n", "text/plain; charset=utf-8"),
        ("text", "application/octet-stream"),
        ("", "application/octet-stream"),
        ('text/plain; name="a\nb"', "application/octet-stream"),
        ("täxt/plain", "application/octet-stream"),
    ],
)
def test_a_media_type_no_header_may_carry_is_sent_as_bytes(given: str, sent: str) -> None:
    assert safe_media_type(given) == sent


class ReadsSpied:
    """Every read of the store's filesystem: (path, start, end, bytes returned)."""

    def __init__(self, store: ArtifactStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads: list[tuple[str, Any, Any, int]] = []
        real = store.fs.cat_file

        def cat_file(path: str, start: Any = None, end: Any = None, **kwargs: Any) -> bytes:
            data: bytes = real(path, start=start, end=end, **kwargs)
            self.reads.append((str(path), start, end, len(data)))
            return data

        def refused_open(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"a page opened an artifact's bytes whole: {args}")

        monkeypatch.setattr(store.fs, "cat_file", cat_file)
        monkeypatch.setattr(store.fs, "open", refused_open)


def _views(
    url: str, viewer: Viewer, result_objects: dict[int, Any]
) -> dict[int, list[ui_artifacts.ArtifactView]]:
    context: Any = SimpleNamespace(settings=SimpleNamespace(artifact_url=url))
    calls: Any = [SimpleNamespace(id=row, result_object=value) for row, value in result_objects.items()]
    return asyncio.run(ui_artifacts.artifact_views(context, viewer, calls))


def _put(store: ArtifactStore, artifact: Artifact, tenant: str) -> ArtifactRef:
    return store.put(artifact, tenant=tenant)[0].ref


def test_a_page_reads_a_texts_first_bytes_only_and_lists_what_it_may_not_show(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given: acme's 3.6 MB text, its picture, globex's text, and a removed one, in one call's result
    url = f"memory://views-{uuid.uuid4().hex}"
    store = store_for(url)
    text = "".join(f"{n:06d} ünïcødé line\n" for n in range(150_000))
    long = _put(store, Artifact(text, name="long.txt"), "acme")
    picture = _put(store, Artifact(b"\x89PNG....", name="p.png"), "acme")
    theirs = _put(store, Artifact("globex's", name="theirs.txt"), "globex")
    removed = _put(store, Artifact("soon gone", name="gone.txt"), "acme")
    assert store.delete(removed.id)
    spied = ReadsSpied(store, monkeypatch)

    # when: acme's page shows the call
    views = _views(
        url, Viewer("acme"), {7: [r.to_json() for r in (long, picture, theirs, removed)], 8: "plain"}
    )

    # then: the text's first 2,000 characters, from its first 8,000 bytes alone
    shown = views[7]
    assert [(v.ref.name, v.state, v.linked) for v in shown] == [
        ("long.txt", "ready", True),
        ("p.png", "ready", True),
        ("theirs.txt", "gone", False),
        ("gone.txt", "gone", False),
    ]
    assert shown[0].preview == text[:2000] and shown[0].cut
    assert shown[0].url == f"/ui/artifacts/{long.id}" and shown[0].size == "3.6 MB"
    assert shown[1].preview is None and shown[2].preview is None
    assert 8 not in views
    byte_reads = [read for read in spied.reads if not read[0].endswith(".json")]
    assert [(start, end, size) for _, start, end, size in byte_reads] == [(0, 8000, 8000)]
    # and: an operator sees globex's too
    assert _views(url, Viewer("ops", admin=True), {7: [theirs.to_json()]})[7][0].state == "ready"


def test_a_short_text_is_shown_whole_and_a_page_reads_a_bounded_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"memory://views-{uuid.uuid4().hex}"
    store = store_for(url)
    refs = [_put(store, Artifact(f"text {n}", name=f"{n}.txt"), "acme") for n in range(3)]
    monkeypatch.setattr(ui_artifacts, "MAX_READ", 2)

    views = _views(url, Viewer("acme"), {1: [refs[0].to_json()], 2: [r.to_json() for r in refs[1:]]})

    assert [(v.state, v.preview, v.cut) for v in views[1] + views[2]] == [
        ("ready", "text 0", False),
        ("ready", "text 1", False),
        ("unknown", None, False),  # past the page's limit: listed and linked, not read
    ]
    assert views[2][1].linked


def test_a_store_url_that_names_no_store_lists_the_artifacts_unread() -> None:
    ref = ArtifactRef(uuid.uuid4().hex, "a.txt", "text/plain", 3, "0" * 64, "ftp://x/a")

    views = _views("ftp://nowhere", Viewer("acme"), {1: ref.to_json()})

    assert [(v.ref.name, v.state, v.linked) for v in views[1]] == [("a.txt", "unreadable", False)]


@pytest.mark.parametrize("url", ["ftp://nowhere", "s3://", "gs://bucket/prefix"])
def test_an_artifact_url_that_names_no_store_is_refused_with_the_settings(url: str) -> None:
    # refused where every process reads its settings: no command starts with it
    with pytest.raises(SettingsError, match=f"TOOLFLEET_ARTIFACT_URL='{url}' is not an artifact store"):
        Settings.from_env({"TOOLFLEET_ARTIFACT_URL": url})
