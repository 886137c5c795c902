"""The agent side's errors: one module holds them all, and a provider's transport error stays the cause."""

import ast
import asyncio
from pathlib import Path

import httpx
import pytest

import orchestrator
from orchestrator import errors
from orchestrator.errors import ModelConnectionError, ModelTimeoutError, OrchestratorError
from orchestrator.models._http import Endpoint, RetryPolicy, post_json

PACKAGE = Path(orchestrator.__file__).parent


def _client(failure: httpx.TransportError) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        raise failure

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def _post(client: httpx.AsyncClient) -> None:
    async with client:
        policy = RetryPolicy(max_retries=1, backoff_s=0.001)
        await post_json(Endpoint(client, "http://model.invalid/v1/chat", {}, "openai", policy), {})


@pytest.mark.parametrize(
    ("failure", "mapped"),
    [
        (httpx.ConnectError("[Errno 111] Connection refused"), ModelConnectionError),
        (httpx.ReadTimeout("timed out"), ModelTimeoutError),
    ],
)
def test_a_transport_error_spent_of_its_retries_is_mapped_with_its_cause_kept(
    failure: httpx.TransportError, mapped: type[Exception]
) -> None:
    # given: a provider that cannot be reached on any attempt
    client = _client(failure)
    # when
    with pytest.raises(mapped) as raised:
        asyncio.run(_post(client))
    # then: the httpx exception is the cause, for whoever reads the traceback
    assert raised.value.__cause__ is failure


def test_every_error_class_of_the_package_is_defined_in_the_errors_module() -> None:
    # given: every class of the package that derives from an exception, found in the source
    elsewhere = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "errors.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(base, ast.Name) and (base.id.endswith("Error") or base.id == "Exception")
                for base in node.bases
            ):
                elsewhere.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    # then
    assert elsewhere == []


def test_every_error_in_the_errors_module_derives_from_the_root_and_is_in_its_docstring() -> None:
    # when
    classes = [getattr(errors, name) for name in errors.__all__]
    # then
    assert all(issubclass(cls, OrchestratorError) for cls in classes)
    assert [cls.__name__ for cls in classes if cls.__name__ not in (errors.__doc__ or "")] == []
