"""What `toolfleet serve` reads from its command line and `TOOLFLEET_*` variables, checked once."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.server.tenants import (
    DEFAULT_TENANT,
    KEYS_FILE_VARIABLE,
    KEYS_VARIABLE,
    ApiKey,
    configured_keys,
    unique_keys,
)
from workers.errors import SettingsError

__all__ = [
    "SERVE_DESCRIPTIONS",
    "SERVE_ENVIRONMENT",
    "AgentSpec",
    "ServeSettings",
    "is_loopback",
    "parse_agents",
]

# The service's own settings and the variables they are read from (the rest are `Settings`').
SERVE_ENVIRONMENT = {
    "agents": "TOOLFLEET_AGENTS",
    "api_keys": KEYS_VARIABLE,
    "api_keys_file": KEYS_FILE_VARIABLE,
    "max_body_bytes": "TOOLFLEET_SERVE_MAX_BODY_BYTES",
    "max_messages": "TOOLFLEET_SERVE_MAX_MESSAGES",
    "max_invocations": "TOOLFLEET_SERVE_MAX_INVOCATIONS",
    "drain_grace_s": "TOOLFLEET_SERVE_DRAIN_GRACE_S",
    "turn_wait_s": "TOOLFLEET_SERVE_TURN_WAIT_S",
    "history_messages": "TOOLFLEET_SERVE_HISTORY_MESSAGES",
}
# What each of them means, with its range: the configuration reference (docs/configuration.md).
SERVE_DESCRIPTIONS = {
    "agents": "`toolfleet serve`'s agents, `name=module:attr` comma-separated, after its `--agent`s",
    "api_keys": "bearer keys `toolfleet serve` accepts, comma-separated (several while rotating), each "
    "`key` (the tenant `default`'s) or `tenant:key`; unset (and no keys file): no key asked, and the "
    "service listens on loopback only",
    "api_keys_file": "a JSON file of bearer keys with their tenant, scopes and priority, "
    '`{"keys": [{"key": "…", "tenant": "acme", "scopes": ["admin"], "priority": 3}]}`, read at start '
    "beside `TOOLFLEET_API_KEYS` (`admin`: sees every tenant's invocations; `priority`: its "
    "invocations', and the highest a request may ask)",
    "max_body_bytes": "a larger request body is refused with 413 (>= 1)",
    "max_messages": "a request with more messages is refused with 400 (>= 1)",
    "max_invocations": "invocations one replica runs at once; beyond, 429 with `Retry-After` (>= 1)",
    "drain_grace_s": "on SIGTERM, how long running requests may take to finish (>= 0)",
    "turn_wait_s": "how long a turn of a kept conversation waits for the earlier turns of that "
    "conversation before it is refused with 409 `conversation_busy` (>= 0)",
    "history_messages": "messages of a conversation (`conversation_id`) kept in SQL and sent to the "
    "model (>= 1)",
}


@dataclass(frozen=True)
class AgentSpec:
    """One `NAME=MODULE:ATTRIBUTE` of `--agent`: the name clients use as `model`, and where the
    `AiService` (or a zero-argument callable returning one) is."""

    name: str
    module: str
    attribute: str

    def __str__(self) -> str:
        return f"{self.name}={self.module}:{self.attribute}"


def parse_agents(values: Sequence[str]) -> list[AgentSpec]:
    """Read `NAME=MODULE:ATTRIBUTE` items (each value may hold several, comma-separated); a name given
    twice, or an item of another shape, is refused with the shape expected."""
    specs: list[AgentSpec] = []
    for value in values:
        for item in (part.strip() for part in value.split(",")):
            if not item:
                continue
            name, equals, target = item.partition("=")
            module, colon, attribute = target.partition(":")
            if not (equals and colon and name.strip() and module.strip() and attribute.strip()):
                raise SettingsError(
                    f"agent {item!r} is not NAME=MODULE:ATTRIBUTE (e.g. bank=myapp.agents:bank)"
                )
            spec = AgentSpec(name.strip(), module.strip(), attribute.strip())
            if any(s.name == spec.name for s in specs):
                raise SettingsError(f"agent name {spec.name!r} is given twice")
            specs.append(spec)
    return specs


@dataclass(frozen=True)
class ServeSettings:
    """The HTTP service's settings: where it listens, its agents, its keys and its limits."""

    agents: tuple[AgentSpec, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8000
    # Each key with its tenant and scopes; a plain string given in code is a default tenant's key.
    api_keys: tuple[ApiKey, ...] = field(default=(), repr=False)
    max_body_bytes: int = 1 << 20
    max_messages: int = 500
    max_invocations: int = 256
    drain_grace_s: float = 30.0
    history_messages: int = 100
    turn_wait_s: float = 30.0  # how long a turn waits for the earlier turns of its conversation

    def __post_init__(self) -> None:
        keys = tuple(k if isinstance(k, ApiKey) else ApiKey(str(k)) for k in self.api_keys)
        object.__setattr__(self, "api_keys", unique_keys(keys))
        if any(k.tenant != DEFAULT_TENANT for k in keys):
            # a tenant's conversation is kept as `tenant:agent/id`, the default tenant's as `agent/id`
            clashing = [spec.name for spec in self.agents if ":" in spec.name]
            if clashing:
                raise SettingsError(
                    f"agent name {clashing[0]!r} holds ':', which tells tenants' conversations apart: "
                    "rename the agent"
                )
        for name in ("max_body_bytes", "max_messages", "max_invocations", "history_messages"):
            if getattr(self, name) < 1:
                raise SettingsError(
                    f"{SERVE_ENVIRONMENT[name]} must be at least 1, got {getattr(self, name)}"
                )
        for name in ("drain_grace_s", "turn_wait_s"):
            if getattr(self, name) < 0:
                raise SettingsError(
                    f"{SERVE_ENVIRONMENT[name]} must be at least 0, got {getattr(self, name):g}"
                )
        if not 0 <= self.port <= 65535:
            raise SettingsError(f"--port must be between 0 and 65535, got {self.port}")
        if not self.agents:
            raise SettingsError(
                f"no agent to serve: give --agent NAME=MODULE:ATTRIBUTE or {SERVE_ENVIRONMENT['agents']}"
            )
        if not self.api_keys and not is_loopback(self.host):
            raise SettingsError(
                f"refusing to listen on {self.host} without API keys: set {SERVE_ENVIRONMENT['api_keys']} "
                f"(comma-separated bearer keys) or {SERVE_ENVIRONMENT['api_keys_file']}, "
                "or listen on 127.0.0.1"
            )

    @classmethod
    def from_env(
        cls,
        agents: Sequence[str] = (),
        host: str | None = None,
        port: int | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> ServeSettings:
        """The settings from the command line (`agents`, `host`, `port`) and the environment; `--agent`
        values come before `TOOLFLEET_AGENTS`' items."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for name in ("max_body_bytes", "max_messages", "max_invocations", "history_messages"):
            if env.get(SERVE_ENVIRONMENT[name]):
                values[name] = _number(env, name, int)
        for name in ("drain_grace_s", "turn_wait_s"):
            if env.get(SERVE_ENVIRONMENT[name]):
                values[name] = _number(env, name, float)
        keys = configured_keys(env)
        specs = parse_agents([*agents, env.get(SERVE_ENVIRONMENT["agents"], "")])
        return cls(
            agents=tuple(specs),
            host=host or "127.0.0.1",
            port=8000 if port is None else port,
            api_keys=keys,
            **values,  # type: ignore[arg-type]
        )


def is_loopback(host: str) -> bool:
    """Whether `host` is an address only this machine reaches (`localhost` included)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _number(env: Mapping[str, str], name: str, kind: type[int] | type[float]) -> int | float:
    variable = SERVE_ENVIRONMENT[name]
    try:
        return kind(env[variable])
    except ValueError:
        raise SettingsError(f"{variable} must be a number, got {env[variable]!r}") from None
