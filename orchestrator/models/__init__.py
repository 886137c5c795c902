"""Chat models: the protocol and events (named once, in `base`), a scripted model, and real providers
over httpx."""

from orchestrator.models import base
from orchestrator.models.base import *  # noqa: F403 - the protocol's names, listed once in `base.__all__`

__all__ = list(base.__all__)
