"""The serve tests' `assistant`, from a module that warns as it is loaded: what a replica writes of a
Python warning (not imported by the tests themselves, whose warnings are errors)."""

from __future__ import annotations

import warnings

from tests.integration.serve_agents import assistant

__all__ = ["assistant"]

WARNING = "this agent module is deprecated\nuse tests.integration.serve_agents"

warnings.warn(WARNING, UserWarning, stacklevel=1)
