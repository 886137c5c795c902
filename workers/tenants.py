"""Whose an invocation is: its parameter `tenant` (set by `toolfleet serve` from the request's key),
read one way wherever it counts: the journal's column, concurrency slots' round-robin, daily budgets."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_TENANT", "TENANT_NAME", "TENANT_PARAMETER", "tenant_of"]

TENANT_PARAMETER = "tenant"
# An invocation started with no tenant (and a journal row older than the column) is the default one's.
DEFAULT_TENANT = "default"
TENANT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# Whose an invocation is whose `tenant` parameter is no tenant's name: no configured tenant matches it,
# so only an operator (the admin scope) sees it, and it counts apart from every named tenant.
_UNNAMED_TENANT = "?"


def tenant_of(parameters: Mapping[str, Any] | None) -> str:
    """The tenant an invocation's parameters name (`tenant`): `default` when none, `?` when not a name."""
    given = (parameters or {}).get(TENANT_PARAMETER)
    if given is None:
        return DEFAULT_TENANT
    return given if isinstance(given, str) and TENANT_NAME.fullmatch(given) else _UNNAMED_TENANT
