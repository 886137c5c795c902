"""A set of tools with unique names, built from objects, classes, modules and functions."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from workers.errors import ToolDefinitionError
from workers.tools import ToolDefinition, discover_tools
from workers.tools.specification import ToolSpecification

__all__ = ["ToolRegistry", "instantiate"]


class ToolRegistry:
    """Tools by name. Adding a second tool with a name already present is a `ToolDefinitionError`."""

    def __init__(self, sources: Iterable[object] = ()) -> None:
        self._tools: dict[str, ToolDefinition] = {}
        for source in sources:
            self.add(source)

    def add(self, source: object) -> list[ToolDefinition]:
        """Register every tool of `source`; a class is instantiated with no arguments."""
        if isinstance(source, ToolDefinition):
            definitions = [source]
        elif (
            isinstance(source, list | tuple) and source and all(isinstance(d, ToolDefinition) for d in source)
        ):
            definitions = list(source)
        else:
            definitions = discover_tools(instantiate(source) if isinstance(source, type) else source)
        for definition in definitions:
            if definition.name in self._tools:
                raise ToolDefinitionError(f"Duplicated definition for tool: {definition.name}")
        for definition in definitions:
            self._tools[definition.name] = definition
        return definitions

    def get(self, name: str) -> ToolDefinition | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolDefinition]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def specifications(self) -> list[ToolSpecification]:
        return [definition.specification for definition in self._tools.values()]


def instantiate(cls: type) -> object:
    """An instance of a tool class made with no arguments, or a clear error saying to pass one."""
    try:
        return cls()
    except TypeError as exc:
        raise ToolDefinitionError(
            f"Class '{cls.__qualname__}' needs constructor arguments: pass an instance of it instead ({exc})"
        ) from None
