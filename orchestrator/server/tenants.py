"""Tenants of the service: each API key is one tenant's, and a tenant sees only its own invocations.

Keys come from `TOOLFLEET_API_KEYS` (comma-separated; an item `tenant:key` is that tenant's, a plain
`key` the default tenant's; split at the first ':' only, so a key may hold ':' itself) and from the
JSON file `TOOLFLEET_API_KEYS_FILE` names, which also gives scopes:

    {"keys": [{"key": "…", "tenant": "acme"}, {"key": "…", "tenant": "ops", "scopes": ["admin"]}]}

A key with the `admin` scope sees and acts on every tenant's invocations (the run view's operators).
A request with a key is its key's tenant (`Viewer`); with no key configured at all (loopback only),
every request is the default tenant's, and sees everything, as an operator does.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.errors import SettingsError
from workers.priorities import check_priority
from workers.tenants import DEFAULT_TENANT, TENANT_NAME

__all__ = [
    "ADMIN_SCOPE",
    "DEFAULT_TENANT",
    "KEYS_FILE_VARIABLE",
    "KEYS_VARIABLE",
    "OPERATOR",
    "SCOPES",
    "ApiKey",
    "Viewer",
    "checked_tenant",
    "configured_keys",
    "matching_key",
    "parse_keys",
    "read_keys_file",
    "unique_keys",
]

KEYS_VARIABLE = "TOOLFLEET_API_KEYS"
KEYS_FILE_VARIABLE = "TOOLFLEET_API_KEYS_FILE"
ADMIN_SCOPE = "admin"
SCOPES = frozenset({ADMIN_SCOPE})
MAX_KEYS_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class ApiKey:
    """One bearer key: the tenant whose it is, and its scopes (`admin`: sees every tenant)."""

    key: str = field(repr=False)
    tenant: str = DEFAULT_TENANT
    scopes: frozenset[str] = frozenset()
    priority: int | None = None  # its invocations' priority, and the highest a request may ask

    def __post_init__(self) -> None:
        checked_tenant(self.tenant, where="a key's tenant")
        if self.priority is not None:
            try:
                check_priority(self.priority, f"the priority of a key of tenant {self.tenant!r}")
            except ValueError as exc:
                raise SettingsError(str(exc)) from None
        if not self.key:
            raise SettingsError("an API key must not be empty")
        unknown = sorted(set(self.scopes) - SCOPES)
        if unknown:
            raise SettingsError(
                f"unknown scope {unknown[0]!r} of a key of tenant {self.tenant!r}: "
                f"the scopes are {', '.join(sorted(SCOPES))}"
            )

    @property
    def viewer(self) -> Viewer:
        """Who a request with this key is."""
        return Viewer(self.tenant, admin=ADMIN_SCOPE in self.scopes, priority=self.priority)


@dataclass(frozen=True)
class Viewer:
    """Who asks: a tenant, and whether it sees every tenant's invocations (the `admin` scope)."""

    tenant: str
    admin: bool = False
    priority: int | None = None  # its key's priority: its invocations' unless they ask for a lower one

    def sees(self, tenant: str | None) -> bool:
        """Whether an invocation of `tenant` (None: nobody's known) is this viewer's to see and act on."""
        return self.admin or tenant == self.tenant

    @property
    def only(self) -> str | None:
        """The tenant a listing is filtered to (None: every tenant's rows)."""
        return None if self.admin else self.tenant


# Who asks when no key is configured (a loopback service, an open run view) or the view's basic
# authentication lets a person in: an operator, of the default tenant.
OPERATOR = Viewer(DEFAULT_TENANT, admin=True)


def checked_tenant(name: str, *, where: str) -> str:
    """`name` if it is a tenant's name (letters, digits, `_`, `.`, `-`; 1 to 64), else a SettingsError."""
    if not TENANT_NAME.fullmatch(name):
        raise SettingsError(
            f"{where} {name!r} is not a tenant name: 1 to 64 letters, digits, '_', '.' or '-'"
        )
    return name


def parse_keys(value: str) -> tuple[ApiKey, ...]:
    """The keys of `TOOLFLEET_API_KEYS`: comma-separated items, `tenant:key` or a plain `key` (the
    default tenant's); an item is split at its first ':' only."""
    keys: list[ApiKey] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        tenant, colon, key = item.partition(":")
        if not colon:
            keys.append(ApiKey(item))
            continue
        checked_tenant(tenant.strip(), where=f"{KEYS_VARIABLE}: the tenant of an item")
        if not key.strip():
            raise SettingsError(f"{KEYS_VARIABLE}: the item of tenant {tenant.strip()!r} has no key")
        keys.append(ApiKey(key.strip(), tenant.strip()))
    return tuple(keys)


def read_keys_file(path: str) -> tuple[ApiKey, ...]:
    """The keys of the JSON file at `path`: `{"keys": [{"key", "tenant", "scopes", "priority"}, …]}`
    (`tenant` is optional, the default tenant's; `scopes` too, none; `priority` too, the service's)."""
    where = f"{KEYS_FILE_VARIABLE} ({path})"
    try:
        with Path(path).open("rb") as file:
            raw = file.read(MAX_KEYS_FILE_BYTES + 1)
    except OSError as exc:
        raise SettingsError(f"{where} cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_KEYS_FILE_BYTES:
        raise SettingsError(f"{where} is larger than {MAX_KEYS_FILE_BYTES} bytes")
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{where} is not JSON: {exc}") from None
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise SettingsError(f'{where} must be a JSON object with a list "keys"')
    return tuple(_file_key(entry, f"{where}: keys[{index}]") for index, entry in enumerate(entries))


def _file_key(entry: Any, where: str) -> ApiKey:
    if not isinstance(entry, dict):
        raise SettingsError(f'{where} must be an object with "key", "tenant", "scopes" and "priority"')
    unknown = sorted(set(entry) - {"key", "tenant", "scopes", "priority"})
    if unknown:
        raise SettingsError(f"{where} has an unknown field {unknown[0]!r}")
    key, tenant, scopes = entry.get("key"), entry.get("tenant", DEFAULT_TENANT), entry.get("scopes", [])
    if not isinstance(key, str) or not key.strip():
        raise SettingsError(f'{where} needs "key", a non-empty string')
    if not isinstance(tenant, str):
        raise SettingsError(f'{where}: "tenant" must be a string')
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        raise SettingsError(f'{where}: "scopes" must be a list of strings')
    checked_tenant(tenant, where=f"{where}: the tenant")
    unknown = sorted(set(scopes) - SCOPES)
    if unknown:
        raise SettingsError(
            f"{where}: unknown scope {unknown[0]!r}: the scopes are {', '.join(sorted(SCOPES))}"
        )
    priority = entry.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise SettingsError(f'{where}: "priority" must be a whole number from 0 to 9')
    return ApiKey(key.strip(), tenant, frozenset(scopes), priority)


def configured_keys(env: Mapping[str, str]) -> tuple[ApiKey, ...]:
    """Every key of `TOOLFLEET_API_KEYS` and of the file `TOOLFLEET_API_KEYS_FILE` names; a key given
    twice is refused (it would be two tenants' or the same one's twice)."""
    keys = parse_keys(env.get(KEYS_VARIABLE, ""))
    path = env.get(KEYS_FILE_VARIABLE, "").strip()
    if path:
        keys += read_keys_file(path)
    return unique_keys(keys)


def unique_keys(keys: Iterable[ApiKey]) -> tuple[ApiKey, ...]:
    """`keys`, refused when one key is given twice."""
    seen: set[str] = set()
    for key in keys:
        if key.key in seen:
            raise SettingsError(
                f"an API key is given twice (tenant {key.tenant!r}): each key is one tenant's, once"
            )
        seen.add(key.key)
    return tuple(keys)


def matching_key(keys: Iterable[ApiKey], presented: str) -> ApiKey | None:
    """The configured key equal to `presented`, compared in constant time against every key (no
    early exit: how long it takes tells nothing of which key, if any, matched)."""
    given = presented.encode()
    matched: ApiKey | None = None
    for key in keys:
        if hmac.compare_digest(given, key.key.encode()):
            matched = key
    return matched
