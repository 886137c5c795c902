"""What the run view reads from its command line and `TOOLFLEET_*` variables, checked once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.server.settings import SERVE_ENVIRONMENT, is_loopback
from orchestrator.server.tenants import ApiKey, configured_keys, unique_keys
from workers.errors import SettingsError

__all__ = ["UI_DESCRIPTIONS", "UI_ENVIRONMENT", "UiSettings"]

# The run view's own variables (the API keys are the service's: `TOOLFLEET_API_KEYS` and the file
# `TOOLFLEET_API_KEYS_FILE` names).
UI_ENVIRONMENT = {
    "flower_url": "TOOLFLEET_FLOWER_URL",
    "basic_auth": "TOOLFLEET_UI_BASIC_AUTH",
}
# What each of them means: the configuration reference (docs/configuration.md).
UI_DESCRIPTIONS = {
    "flower_url": "Flower's address (e.g. `http://flower.internal:5555`): the run view links each call "
    "and compensation to its task page there",
    "basic_auth": "`user:password`: the run view asks for HTTP basic authentication instead of a "
    "sign-in with one of `TOOLFLEET_API_KEYS`",
}


@dataclass(frozen=True)
class UiSettings:
    """Where `toolfleet ui` listens, who may look (the service's bearer keys, through a login form, or
    HTTP basic authentication with `basic_auth` = `user:password`), and Flower's address for links.
    A person signed in with a key sees its tenant's invocations (every tenant's with the `admin`
    scope); basic authentication and an open view let operators in, who see every tenant's."""

    host: str = "127.0.0.1"
    port: int = 8001
    # A plain string given in code is a default tenant's key.
    api_keys: tuple[ApiKey, ...] = field(default=(), repr=False)
    basic_auth: str = field(default="", repr=False)
    flower_url: str = ""

    def __post_init__(self) -> None:
        keys = tuple(k if isinstance(k, ApiKey) else ApiKey(str(k)) for k in self.api_keys)
        object.__setattr__(self, "api_keys", unique_keys(keys))
        if self.basic_auth and not self.basic_auth.partition(":")[0].strip():
            raise SettingsError(f"{UI_ENVIRONMENT['basic_auth']} must be user:password")
        if self.basic_auth and not self.basic_auth.partition(":")[2]:
            raise SettingsError(f"{UI_ENVIRONMENT['basic_auth']} must be user:password, with a password")
        if self.flower_url and not self.flower_url.startswith(("http://", "https://")):
            raise SettingsError(
                f"{UI_ENVIRONMENT['flower_url']} must be an http:// or https:// address, "
                f"got {self.flower_url!r}"
            )
        if not 0 <= self.port <= 65535:
            raise SettingsError(f"--port must be between 0 and 65535, got {self.port}")

    @property
    def open(self) -> bool:
        """Whether anyone who reaches the view may use it (no keys, no basic authentication)."""
        return not self.api_keys and not self.basic_auth

    def check_listening(self) -> None:
        """Refuse an open view on an address other machines reach."""
        if self.open and not is_loopback(self.host):
            raise SettingsError(
                f"refusing to show the run view on {self.host} to anyone: set "
                f"{SERVE_ENVIRONMENT['api_keys']} or {UI_ENVIRONMENT['basic_auth']}, or listen on 127.0.0.1"
            )

    @classmethod
    def from_env(
        cls, host: str | None = None, port: int | None = None, environ: Mapping[str, str] | None = None
    ) -> UiSettings:
        env = os.environ if environ is None else environ
        keys = configured_keys(env)
        return cls(
            host=host or "127.0.0.1",
            port=8001 if port is None else port,
            api_keys=keys,
            basic_auth=env.get(UI_ENVIRONMENT["basic_auth"], ""),
            flower_url=env.get(UI_ENVIRONMENT["flower_url"], "").rstrip("/"),
        )
