"""Whose an invocation is, in process: the key middleware gives each request its key's tenant (the
refusals' texts as they always were), the journal keeps the invocation parameter `tenant` in a column
of its own (older rows are the default tenant's), and conversations are kept per tenant."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from alembic import command
from fastapi import FastAPI, Request

from orchestrator.saga._journal_writes import Intent, intent_write
from orchestrator.saga.journal import Journal
from orchestrator.saga.migrations import head, upgrade
from orchestrator.saga.migrations._upgrade import alembic_config
from orchestrator.server.app import _BearerKeys
from orchestrator.server.conversations import conversation_key
from orchestrator.server.settings import AgentSpec, ServeSettings
from orchestrator.server.tenants import OPERATOR, parse_keys
from orchestrator.server.ui import data
from orchestrator.server.visibility import VIEWER_SCOPE_KEY, viewer_of
from orchestrator.telemetry.hooks import traced_invocation
from tests._tracing import traced_to_memory
from tests.orchestrator._databases import KINDS, fresh_database
from workers.calls.invocation import InvocationContext, InvocationParameters
from workers.protocol import ToolExecutionRequest
from workers.tenants import tenant_of


def _app(keys: str) -> FastAPI:
    app = FastAPI()
    app.add_middleware(_BearerKeys)
    serve = ServeSettings(agents=(AgentSpec("bank", "m", "a"),), api_keys=parse_keys(keys))
    app.state.toolfleet = SimpleNamespace(serve=serve)

    @app.get("/v1/whoami")
    async def whoami(request: Request) -> dict[str, Any]:
        viewer = viewer_of(request)
        return {"tenant": viewer.tenant, "admin": viewer.admin}

    @app.get("/ui/whoami")  # the run view signs its viewers in itself
    async def page(request: Request) -> dict[str, Any]:
        return {"viewer": repr(request.scope.get(VIEWER_SCOPE_KEY))}

    return app


def _ask(app: Any, headers: dict[str, str], path: str = "/v1/whoami") -> httpx.Response:
    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.get(path, headers=headers)

    return asyncio.run(call())


def test_a_request_is_its_keys_tenant_and_the_refusals_say_what_they_always_said() -> None:
    app = _app("acme:k1:x,plain")
    assert _ask(app, {"Authorization": "Bearer k1:x"}).json() == {"tenant": "acme", "admin": False}
    assert _ask(app, {"Authorization": "Bearer plain"}).json() == {"tenant": "default", "admin": False}
    missing = _ask(app, {})
    assert missing.status_code == 401
    assert missing.json()["error"]["message"] == (
        "missing API key: send the header 'Authorization: Bearer <key>'"
    )
    wrong = _ask(app, {"Authorization": "Bearer k1"})  # the item's tenant is no part of the key
    assert wrong.status_code == 401 and wrong.json()["error"]["message"] == "incorrect API key"


def test_without_keys_every_request_is_an_operator_of_the_default_tenant() -> None:
    assert _ask(_app(""), {}).json() == {"tenant": "default", "admin": True}


def test_a_viewer_put_on_the_scope_before_the_middleware_is_not_taken() -> None:
    app = _app("acme:k1")

    async def forged(scope: Any, receive: Any, send: Any) -> None:
        scope[VIEWER_SCOPE_KEY] = OPERATOR
        await app(scope, receive, send)

    bearer = {"Authorization": "Bearer k1"}
    assert _ask(forged, bearer).json() == {"tenant": "acme", "admin": False}
    assert _ask(forged, {}, "/ui/whoami").json() == {"viewer": "None"}


@pytest.mark.parametrize(
    ("parameters", "tenant"),
    [
        (None, "default"),
        ({}, "default"),
        ({"tenant": None}, "default"),
        ({"tenant": "acme"}, "acme"),
        ({"tenant": "not a name"}, "?"),  # no configured tenant's: only an operator sees it
        ({"tenant": 7}, "?"),
        ({"tenant": "default"}, "default"),
    ],
)
def test_the_journal_keeps_the_tenant_parameter_or_says_it_names_no_tenant(
    parameters: dict[str, Any] | None, tenant: str
) -> None:
    assert tenant_of(parameters) == tenant


def test_the_journal_writes_the_tenant_at_the_start_and_lists_one_tenants_invocations(tmp_path: Path) -> None:
    journal = Journal(f"sqlite:///{tmp_path / 'journal.db'}", keys=())
    ids = {}
    for tenant in ("acme", "globex", None):
        context = InvocationContext(service_name="bank")
        parameters = {} if tenant is None else {"tenant": tenant}
        journal.start_invocation(context, {"context": context.to_json(), "parameters": parameters})
        ids[tenant or "default"] = str(context.invocation_id)
    try:
        assert {t: journal.invocation(i).tenant for t, i in ids.items()} == {  # type: ignore[union-attr]
            "acme": "acme",
            "globex": "globex",
            "default": "default",
        }
        assert [r.id for r in journal.invocations(tenant="acme")] == [ids["acme"]]
        assert len(journal.invocations()) == 3
    finally:
        journal.engine.dispose()


@pytest.mark.parametrize("kind", KINDS)
def test_rows_written_before_the_tenant_column_are_the_default_tenants(kind: str, tmp_path: Path) -> None:
    with fresh_database(kind, tmp_path) as url:
        engine = sa.create_engine(url)
        invocation_id = str(uuid.uuid4())
        try:
            with engine.begin() as connection:
                command.upgrade(alembic_config(connection), "0005")
                connection.execute(
                    sa.text(
                        "INSERT INTO toolfleet_invocations (id, memory_id, state, owner, started_at, "
                        "heartbeat_at) VALUES (:id, 'default', 'succeeded', 'host:1', :now, :now)"
                    ),
                    {"id": invocation_id, "now": "2025-01-01 00:00:00"},
                )
            report = upgrade(engine)
            assert (report.before, report.after) == ("0005", head())
            indexes = {i["name"] for i in sa.inspect(engine).get_indexes("toolfleet_invocations")}
            assert "ix_toolfleet_invocations_tenant" in indexes
            journal = Journal(engine, keys=())
            assert journal.invocation(invocation_id).tenant == "default"  # type: ignore[union-attr]
            assert [r.id for r in journal.invocations(tenant="default")] == [invocation_id]
        finally:
            engine.dispose()


def test_a_tenants_conversation_is_kept_apart_and_the_default_tenants_where_it_always_was() -> None:
    assert conversation_key("default", "bank", "user-42") == "bank/user-42"
    assert conversation_key("acme", "bank", "user-42") == "acme:bank/user-42"
    assert conversation_key("globex", "bank", "user-42") != conversation_key("acme", "bank", "user-42")
    # the default tenant's id that looks like a tenant's names no tenant's conversation
    assert conversation_key("default", "bank", "acme:bank/x") != conversation_key("acme", "bank", "x")


def test_the_invocations_span_names_its_tenant() -> None:
    @traced_invocation
    async def run(config: Any, state: Any) -> Any:
        return SimpleNamespace(finish_reason=None, token_usage=None)

    def state(parameters: dict[str, Any]) -> Any:
        return SimpleNamespace(
            context=InvocationContext(), memory_id="m", parameters=InvocationParameters(parameters)
        )

    with traced_to_memory("tenant-test") as exporter:
        asyncio.run(run(SimpleNamespace(name="bank"), state({"tenant": "acme"})))
        asyncio.run(run(SimpleNamespace(name="bank"), state({"tenant": "no such name!"})))
        spans = exporter.get_finished_spans()
    assert [dict(s.attributes or {}).get("toolfleet.tenant") for s in spans] == ["acme", None]


def test_the_run_views_lists_of_a_tenant_count_only_its_own_invocations(tmp_path: Path) -> None:
    journal = Journal(f"sqlite:///{tmp_path / 'journal.db'}", keys=())
    try:
        for tenant, agent in (("acme", "bank"), ("globex", "shop"), ("globex", "shop")):
            context = InvocationContext(service_name=agent)
            journal.start_invocation(context, {"parameters": {"tenant": tenant}})
            request = ToolExecutionRequest(f"c-{tenant}", "pay", "{}")
            journal.execute_now(
                intent_write(str(context.invocation_id), Intent(1, request, "io", False, "k"), 1)
            )
        assert data.agent_names(journal, "acme") == ["bank"]
        assert data.agent_names(journal, None) == ["bank", "shop"]
        assert data.calls_in_flight(journal, "acme") == {"io": 1}
        assert data.calls_in_flight(journal, "globex") == {"io": 2}
        assert data.calls_in_flight(journal, None) == {"io": 3}
        assert [r.agent for r in data.run_rows(journal, data.RunFilter(), "acme")] == ["bank"]
        assert len(data.run_rows(journal, data.RunFilter(), None)) == 3
    finally:
        journal.engine.dispose()
