"""Artifacts over HTTP: `GET /v1/artifacts/{id}` streams a tool's artifact back from the store, whole,
as a download; `/link` says where to fetch it (this service for a directory store, a presigned URL
good for 15 minutes for S3). A tenant reads its own artifacts only: another's is answered as one that
does not exist. The tool runs on a real worker of pool `artifacts`, the service is a real replica.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit

import httpx
import pytest

from orchestrator.saga.journal import Journal
from tests._waiting import wait_for
from tests.artifact_stores import ArtifactStoreUrl
from tests.integration.serve.artifact_agents import BIG_NAME, POOL, Made, made
from tests.integration.serve.replicas import Replica, replica_env, start_replica
from tests.integration.sse import server_sent_events
from tests.integration.worker_processes import tool_worker
from workers.artifacts import Artifact, ArtifactRef, ArtifactStore, refs_in

pytestmark = pytest.mark.integration

MODULE = "tests.integration.serve.artifact_agents"
ACME, GLOBEX, ADMIN = "k-acme-artifacts", "k-globex-artifacts", "k-ops-artifacts"
KEYS = {"acme": ACME, "globex": GLOBEX, "ops": ADMIN}
FINISHED = ("succeeded", "failed", "cancelled")


def auth(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


def service_env(
    redis_url: str, database_url: str, store: ArtifactStoreUrl, keys_file: Path
) -> dict[str, str]:
    """A replica's whole environment: the tenants' keys, the operator's in a keys file, the store."""
    keys_file.write_text(json.dumps({"keys": [{"key": ADMIN, "tenant": "ops", "scopes": ["admin"]}]}))
    return replica_env(
        redis_url,
        database_url,
        "http://127.0.0.1:9/unused",
        TOOLFLEET_API_KEYS=f"acme:{ACME},globex:{GLOBEX}",
        TOOLFLEET_API_KEYS_FILE=str(keys_file),
        TOOLFLEET_INLINE_RESULT_BYTES="262144",
        **store.worker_env(),
    )


@pytest.fixture(scope="module")
def service(
    redis_url: str,
    database_url: str,
    dir_artifact_url: ArtifactStoreUrl,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Replica]:
    """A replica serving `drawer` on a directory store, and the worker of its tool on the same store."""
    logs = tmp_path_factory.mktemp("artifacts-http")
    env = service_env(redis_url, database_url, dir_artifact_url, logs / "keys.json")
    worker_env = {**dir_artifact_url.worker_env(), "TOOLFLEET_INLINE_RESULT_BYTES": "262144"}
    worker = tool_worker(
        redis_url,
        [POOL],
        [MODULE],
        logs / "worker.log",
        f"artifacts-{uuid.uuid4().hex[:6]}@integration",
        env=worker_env,
    )
    with worker.running(timeout_s=60):
        replica = start_replica(env, logs / "serve.log", "--agent", f"drawer={MODULE}:drawer", agents=())
        try:
            yield replica
        finally:
            replica.stop()


def drawn(service: Replica, database_url: str, tenant: str, ns: str) -> list[ArtifactRef]:
    """The artifacts of a `drawer` invocation `tenant` started with `ns`, once it succeeded (its call's
    journaled result object), in the order `made(ns)` lists them."""
    started = httpx.post(
        f"{service.base_url}/agents/drawer/invocations", json={"input": ns}, headers=auth(tenant), timeout=30
    )
    assert started.status_code == 202, started.text
    invocation_id = started.json()["id"]
    url = f"{service.base_url}/invocations/{invocation_id}"

    def ended() -> str | None:
        story = httpx.get(url, headers=auth(tenant), timeout=10)
        state = story.json().get("state") if story.status_code == 200 else None
        return state if state in FINISHED else None

    assert wait_for(ended, timeout_s=60, what=f"invocation {invocation_id} to end") == "succeeded", (
        service.log()
    )
    journal = Journal(database_url)
    try:
        [call] = journal.calls(invocation_id)
    finally:
        journal.engine.dispose()
    refs = refs_in(call.result_object)
    assert [ref.name for ref in refs] == [item.name for item in made(ns)]
    return refs


@pytest.fixture(scope="module")
def acme_refs(service: Replica, database_url: str) -> tuple[str, list[ArtifactRef]]:
    """acme's invocation's artifacts, and its `ns`."""
    ns = f"acme-{uuid.uuid4().hex[:8]}"
    return ns, drawn(service, database_url, "acme", ns)


def fetched(url: str, headers: dict[str, str] | None = None) -> tuple[httpx.Response, bytes]:
    """The response to GET `url`, its body read as a stream, chunk by chunk."""
    with httpx.stream("GET", url, headers=headers, timeout=60) as response:
        body = b"".join(response.iter_bytes())
    return response, body


def test_an_artifact_is_streamed_back_whole_with_its_headers(
    service: Replica, acme_refs: tuple[str, list[ArtifactRef]]
) -> None:
    ns, refs = acme_refs
    big, expected = refs[0], made(ns)[0]

    # when: acme fetches its multi-megabyte artifact, by its id and by its reference
    response, body = fetched(f"{service.base_url}/artifacts/{big.id}", auth("acme"))
    by_ref, again = fetched(f"{service.base_url}/artifacts/{quote(big.ref, safe='')}", auth("acme"))

    # then: the bytes are the tool's, whole
    assert response.status_code == 200, body[:300]
    assert len(body) == len(expected.data) == big.size
    assert hashlib.sha256(body).hexdigest() == hashlib.sha256(expected.data).hexdigest() == big.sha256
    assert by_ref.status_code == 200 and again == body
    # and: sent as a download, its name quoted safely, its type and digest said
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["content-length"] == str(len(expected.data))
    assert response.headers["etag"] == f'"{big.sha256}"'
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["content-security-policy"] == "default-src 'none'; sandbox"
    assert response.headers["content-disposition"] == (
        'attachment; filename="report _Q1_ _ _n_c_d__ end.bin"; '
        "filename*=UTF-8''" + quote(BIG_NAME.encode(), safe="")
    )
    assert "%22Q1%22" in response.headers["content-disposition"]  # the quotes, encoded, never bare


def test_the_calls_end_in_the_event_stream_gives_its_artifacts(
    service: Replica, dir_artifact_url: ArtifactStoreUrl
) -> None:
    # given: an invocation whose call makes artifacts
    ns = f"events-{uuid.uuid4().hex[:8]}"
    started = httpx.post(
        f"{service.base_url}/agents/drawer/invocations", json={"input": ns}, headers=auth("acme"), timeout=30
    )
    assert started.status_code == 202, started.text
    # when: its events are read to the end
    url = f"{service.base_url}{started.json()['events'].removeprefix('/v1')}"
    with httpx.stream("GET", url, headers=auth("acme"), timeout=60) as response:
        events = [event for _, event in server_sent_events(response.iter_lines())]
    # then: `tool_call.finished` names each artifact, as the store has it
    (finished,) = [event for event in events if event["type"] == "tool_call.finished"]
    assert [ref["name"] for ref in finished["artifacts"]] == [item.name for item in made(ns)]
    store = ArtifactStore.from_url(dir_artifact_url.url)
    for given in finished["artifacts"]:
        assert store.record(given["ref"]).ref.to_json() == given


def test_each_artifact_has_its_own_type_and_head_answers_headers_alone(
    service: Replica, acme_refs: tuple[str, list[ArtifactRef]]
) -> None:
    ns, refs = acme_refs
    by_name = {ref.name: ref for ref in refs}
    for item in made(ns)[1:4]:
        response, body = fetched(f"{service.base_url}/artifacts/{by_name[item.name].id}", auth("acme"))
        assert (response.status_code, body) == (200, item.data)
        assert response.headers["content-type"] == item.media_type  # as the tool named it, no charset added

    # a media type no header may carry is sent as bytes, and the artifact is still whole
    odd = by_name["odd.html"]
    response, body = fetched(f"{service.base_url}/artifacts/{odd.id}", auth("acme"))
    assert (response.status_code, body) == (200, made(ns)[4].data)
    assert response.headers["content-type"] == "application/octet-stream"
    assert "x-injected" not in response.headers

    head = httpx.head(f"{service.base_url}/artifacts/{refs[0].id}", headers=auth("acme"), timeout=30)
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(refs[0].size)
    assert head.headers["etag"] == f'"{refs[0].sha256}"'


def test_another_tenants_artifact_is_answered_as_one_that_does_not_exist(
    service: Replica, acme_refs: tuple[str, list[ArtifactRef]]
) -> None:
    _, refs = acme_refs
    mine, nobodys = refs[2].id, uuid.uuid4().hex

    def told(tenant: str, artifact_id: str, tail: str = "") -> tuple[int, str]:
        response = httpx.get(
            f"{service.base_url}/artifacts/{artifact_id}{tail}", headers=auth(tenant), timeout=30
        )
        return response.status_code, response.text.replace(artifact_id, "<id>")

    # then: to globex, acme's artifact and its link are as unknown as an id nobody made
    for tail in ("", "/link"):
        assert told("globex", mine, tail) == told("globex", nobodys, tail)
        status, text = told("globex", mine, tail)
        assert status == 404
        assert json.loads(text)["error"] == {
            "message": "artifact <id> does not exist (or was removed)",
            "type": "invalid_request_error",
            "param": None,
            "code": "artifact_not_found",
        }
    head = httpx.head(f"{service.base_url}/artifacts/{mine}", headers=auth("globex"), timeout=30)
    assert head.status_code == 404
    # and: acme, and the operator who sees every tenant's, read it
    assert told("acme", mine)[0] == 200
    assert told("ops", mine)[0] == 200
    # and: without a key, nothing
    assert httpx.get(f"{service.base_url}/artifacts/{mine}", timeout=30).status_code == 401


@pytest.mark.parametrize("given", ["not-an-id", "artifact:1234", "ABCDEF" * 6, "artifact%3Axyz"])
def test_a_malformed_id_is_refused_saying_what_an_id_is(service: Replica, given: str) -> None:
    response = httpx.get(f"{service.base_url}/artifacts/{given}", headers=auth("acme"), timeout=30)
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "artifact_not_found"
    assert "is not an artifact id" in error["message"] and "32 hex digits" in error["message"]


def test_the_link_of_a_directory_store_is_the_services_own_url(
    service: Replica, acme_refs: tuple[str, list[ArtifactRef]]
) -> None:
    ns, refs = acme_refs
    short = refs[2]

    link = httpx.get(f"{service.base_url}/artifacts/{short.ref}/link", headers=auth("acme"), timeout=30)

    assert link.status_code == 200, link.text
    assert link.json() == {
        "id": short.id,
        "ref": short.ref,
        "name": "short.txt",
        "media_type": "text/plain; charset=utf-8",
        "size": len(made(ns)[2].data),
        "sha256": short.sha256,
        "url": f"{service.base_url}/artifacts/{short.id}",
        "expires_at": None,
    }
    response, body = fetched(link.json()["url"], auth("acme"))
    assert (response.status_code, body) == (200, made(ns)[2].data)


def test_a_removed_artifact_is_404(
    service: Replica, database_url: str, dir_artifact_url: ArtifactStoreUrl
) -> None:
    # given: an artifact of acme's, removed from the store
    refs = drawn(service, database_url, "acme", f"gone-{uuid.uuid4().hex[:8]}")
    assert ArtifactStore.from_url(dir_artifact_url.url).delete(refs[2].id)

    for tail in ("", "/link"):
        response = httpx.get(
            f"{service.base_url}/artifacts/{refs[2].id}{tail}", headers=auth("acme"), timeout=30
        )
        assert response.status_code == 404
        assert response.json()["error"]["message"] == f"artifact {refs[2].id} does not exist (or was removed)"
    assert (
        httpx.get(f"{service.base_url}/artifacts/{refs[3].id}", headers=auth("acme"), timeout=30).status_code
        == 200
    )


# -- an S3 store ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_service(
    redis_url: str,
    database_url: str,
    s3_artifact_url: ArtifactStoreUrl,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Replica]:
    """A replica on the S3 store (moto's server): what it is asked for, the test puts there itself."""
    logs = tmp_path_factory.mktemp("artifacts-s3")
    env = service_env(redis_url, database_url, s3_artifact_url, logs / "keys.json")
    replica = start_replica(env, logs / "serve.log", "--agent", f"drawer={MODULE}:drawer", agents=())
    try:
        yield replica
    finally:
        replica.stop()


def put(store: ArtifactStore, item: Made, tenant: str) -> ArtifactRef:
    record, _ = store.put(Artifact(item.data, name=item.name, media_type=item.media_type), tenant=tenant)
    return record.ref


def test_an_artifact_whose_bytes_went_after_its_record_was_read_is_404_not_a_cut_200(
    service: Replica, database_url: str, dir_artifact_url: ArtifactStoreUrl
) -> None:
    # given: an artifact whose bytes are gone while its record stays (a removal caught halfway: the
    # record is read, then the bytes are found missing)
    refs = drawn(service, database_url, "acme", f"half-{uuid.uuid4().hex[:8]}")
    store = ArtifactStore.from_url(dir_artifact_url.url)
    store.fs.rm_file(f"{store.root}/{refs[2].id}")
    # when
    response = httpx.get(f"{service.base_url}/artifacts/{refs[2].id}", headers=auth("acme"), timeout=30)
    # then: a clear 404, not a 200 whose body stops short
    assert response.status_code == 404
    assert response.json()["error"]["message"] == f"artifact {refs[2].id} does not exist (or was removed)"


def test_the_link_of_an_s3_store_is_a_presigned_url_read_without_credentials(
    s3_service: Replica, s3_artifact_url: ArtifactStoreUrl
) -> None:
    # given: acme's artifacts in the bucket
    ns = f"s3-{uuid.uuid4().hex[:8]}"
    store = ArtifactStore.from_url(s3_artifact_url.url)
    big, png = (put(store, item, "acme") for item in (made(ns)[0], made(ns)[3]))

    # when: acme asks where to fetch them
    asked = time.time()
    link = httpx.get(f"{s3_service.base_url}/artifacts/{big.id}/link", headers=auth("acme"), timeout=30)

    # then: a presigned URL of the bucket, good for 15 minutes
    assert link.status_code == 200, link.text
    told = link.json()
    assert (told["ref"], told["size"], told["sha256"]) == (big.ref, big.size, big.sha256)
    signed = urlsplit(told["url"])
    query = dict(parse_qsl(signed.query))
    assert signed.path.endswith(f"/artifacts/{big.id}") and not told["url"].startswith(s3_service.root)
    assert "Signature" in query or "X-Amz-Signature" in query, told["url"]
    expires = datetime.fromisoformat(told["expires_at"])
    assert expires.utcoffset() == timedelta(0)
    assert int(asked) + 15 * 60 - 5 <= expires.timestamp() <= time.time() + 15 * 60
    if "Expires" in query:  # the signature's own expiry (SigV2): no earlier than the one told
        assert expires.timestamp() <= int(query["Expires"]) <= expires.timestamp() + 5
    # and: read with no credentials at all, its bytes are the artifact's
    response, body = fetched(told["url"])
    assert response.status_code == 200, body[:300]
    assert hashlib.sha256(body).hexdigest() == big.sha256 and body == made(ns)[0].data
    # and: the service itself streams it from the bucket too
    response, body = fetched(f"{s3_service.base_url}/artifacts/{png.id}", auth("acme"))
    assert (response.status_code, response.headers["content-type"], body) == (
        200,
        "image/png",
        made(ns)[3].data,
    )
    # and: globex is told of neither
    for artifact_id in (big.id, png.id):
        refused = httpx.get(
            f"{s3_service.base_url}/artifacts/{artifact_id}/link", headers=auth("globex"), timeout=30
        )
        assert refused.status_code == 404
