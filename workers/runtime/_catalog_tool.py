"""A tool as a worker advertises it in the live catalog: enough to call it without its code, and to
say how it behaves (approval, heartbeat, idempotence, compensation, version).

A worker of an earlier toolfleet may still be beating while a newer one reads its entry: a fact its
entry leaves out is read as unknown (`CatalogTool.unknown`), never guessed and never an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workers.tools import Compensation, ToolDefinition, ToolOptions
from workers.tools.specification import ReturnBehavior, SearchBehavior, ToolSpecification
from workers.tools.versions import tool_version, version_digest

__all__ = ["ADVERTISED_FACTS", "CatalogTool"]

# The facts about a tool's behaviour a reader shows, as each is named in an entry; absent from an
# entry, each is unknown.
ADVERTISED_FACTS = ("requires_approval", "heartbeat_timeout_s", "idempotent", "compensable", "compensation")


@dataclass(frozen=True)
class CatalogTool:
    """A tool as a worker advertises it: enough to call it without its code."""

    specification: ToolSpecification
    options: ToolOptions
    compensable: bool
    version: str | None = None  # None: advertised by a worker that names no versions
    compensation: str | None = None  # the function that undoes its calls; None: none, or unknown
    unknown: frozenset[str] = field(default=frozenset(), compare=False)
    """Which of `ADVERTISED_FACTS` its worker did not advertise: their values here are defaults."""

    @classmethod
    def of(cls, definition: ToolDefinition, build_id: str | None = None) -> CatalogTool:
        """`definition` as a worker of build `build_id` advertises it, with its version."""
        return cls(
            definition.specification,
            definition.options,
            definition.compensation is not None,
            tool_version(definition, build_id),
            compensation=compensation_name(definition.compensation),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "specification": self.specification.to_dict(),
            "pool": self.options.pool,
            "timeout": self.options.timeout,
            "retries": self.options.retries,
            "idempotent": self.options.idempotent,
            "heartbeat_timeout_s": self.options.heartbeat_timeout_s,
            "requires_approval": self.options.requires_approval,
            "concurrency": self.options.concurrency,
            "concurrency_key": self.options.concurrency_key,
            "rate_limit": self.options.rate_limit,
            "rate_limit_key": self.options.rate_limit_key,
            "return_behavior": self.options.return_behavior.value,
            "search_behavior": self.options.search_behavior.value,
            "compensable": self.compensable,
            "compensation": self.compensation,
            "version": self.version,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CatalogTool:
        spec = ToolSpecification.from_json(data["specification"])
        options = ToolOptions(
            name=spec.name,
            description=spec.description,
            return_behavior=ReturnBehavior(data.get("return_behavior", "TO_LLM")),
            search_behavior=SearchBehavior(data.get("search_behavior", "SEARCHABLE")),
            metadata=dict(spec.metadata),
            pool=str(data.get("pool", "default")),
            timeout=data.get("timeout"),
            retries=int(data.get("retries", 0)),
            idempotent=bool(data.get("idempotent", False)),
            heartbeat_timeout_s=data.get("heartbeat_timeout_s"),
            requires_approval=bool(data.get("requires_approval", False)),
            concurrency=data.get("concurrency"),
            concurrency_key=data.get("concurrency_key"),
            rate_limit=data.get("rate_limit"),
            rate_limit_key=data.get("rate_limit_key"),
        )
        version = data.get("version")
        compensable = bool(data.get("compensable", False))
        compensation = data.get("compensation")
        unknown = {name for name in ADVERTISED_FACTS if name not in data}
        if "compensable" in data and not compensable:
            unknown.discard("compensation")  # a tool without a compensation: there is no name to know
        return cls(
            spec,
            options,
            compensable,
            str(version) if version else None,
            compensation=str(compensation) if compensable and compensation else None,
            unknown=frozenset(unknown),
        )

    def definition(self) -> ToolDefinition:
        """A definition that can be dispatched to a pool but not run in this process; calls of it go to
        the workers of any build serving its digest (the build id is not part of what the model sees)."""
        return ToolDefinition(
            specification=self.specification,
            function=_remote_only(self.specification.name),
            parameters=(),
            options=self.options,
            returns_none=False,
            is_async=False,
            compensation=(
                Compensation(self.specification.name, _remote_only(self.specification.name), (), False)
                if self.compensable
                else None
            ),
            version=version_digest(self.version) if self.version else None,
        )


def compensation_name(compensation: Compensation | None) -> str | None:
    """How a compensation is named in the catalog: its function's qualified name (`Class.method` for a
    method), None without one."""
    if compensation is None:
        return None
    function = compensation.function
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None)
    return str(name) if name else type(function).__name__


def _remote_only(name: str) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"Tool '{name}' comes from the worker catalog: it runs only on its pool")

    run.__name__ = name
    return run
