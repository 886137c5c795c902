"""What discovery makes of a tool: its definition, its parameters and its compensation."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from workers.calls.invocation import ToolCallIdentity
from workers.calls.progress import ToolProgressReporter
from workers.tools._decorators import ToolOptions
from workers.tools.specification import ReturnBehavior, SearchBehavior, ToolSpecification
from workers.tools.versions import tool_digest

__all__ = ["Compensation", "ToolDefinition", "ToolParameter"]

NO_DEFAULT: Any = inspect.Parameter.empty


@dataclass(frozen=True)
class ToolParameter:
    """One parameter of a tool: visible to the model, or injected by the runtime."""

    attribute: str
    name: str
    annotation: Any
    description: str | None
    required: bool
    default: Any = NO_DEFAULT
    injected: type | None = None
    positional_only: bool = False

    @property
    def has_default(self) -> bool:
        return self.default is not NO_DEFAULT


@dataclass(frozen=True)
class Compensation:
    """A method that undoes a tool's side effect."""

    tool_name: str
    function: Callable[..., Any]
    parameters: tuple[ToolParameter, ...]
    is_async: bool


@dataclass(frozen=True)
class ToolDefinition:
    """A discovered tool: its specification, the callable, its parameters and options."""

    specification: ToolSpecification
    function: Callable[..., Any]
    parameters: tuple[ToolParameter, ...]
    options: ToolOptions
    returns_none: bool
    is_async: bool
    compensation: Compensation | None = None
    raw_arguments: bool = False
    """The function takes the model's parsed arguments whole, as `arguments=` (tools proxied to
    another system, such as an MCP server, that validates them itself)."""
    takes_identity: bool = field(init=False, repr=False, compare=False)
    """Whether the function has a `ToolCallIdentity` parameter: a call builds one only then."""
    takes_reporter: bool = field(init=False, repr=False, compare=False)
    """Whether the function has a `ToolProgressReporter` parameter: a worker makes one only then."""
    version: str | None = field(default=None, compare=False)
    """The version calls of it are routed by, when it came from the live catalog (the digest its
    workers advertise); None: the digest of this definition (`workers.tools.versions`)."""

    def __post_init__(self) -> None:
        injected = set() if self.raw_arguments else {p.injected for p in self.parameters}
        object.__setattr__(self, "takes_identity", ToolCallIdentity in injected)
        object.__setattr__(self, "takes_reporter", ToolProgressReporter in injected)

    @cached_property
    def digest(self) -> str:
        """The digest of its specification and options (`workers.tools.versions.tool_digest`)."""
        return tool_digest(self)

    @property
    def name(self) -> str:
        return self.specification.name

    @property
    def pool(self) -> str:
        return self.options.pool

    @property
    def timeout(self) -> float | None:
        return self.options.timeout

    @property
    def heartbeat_timeout_s(self) -> float | None:
        """Seconds the tool may go without a heartbeat before its call is declared lost; None: unwatched."""
        return self.options.heartbeat_timeout_s

    @property
    def requires_approval(self) -> bool:
        """Whether every call waits for a person's approval before it runs."""
        return self.options.requires_approval

    @property
    def return_behavior(self) -> ReturnBehavior:
        return self.options.return_behavior

    @property
    def search_behavior(self) -> SearchBehavior:
        return self.options.search_behavior
