"""Tools: `@tool`, `@compensate_for`, their definitions, and discovery from objects and modules."""

from workers.tools import _discovery
from workers.tools._discovery import *  # noqa: F403 - the names listed once in `_discovery.__all__`

__all__ = list(_discovery.__all__)
