"""The service's keys and their tenants, read once at start: `tenant:key` items of
`TOOLFLEET_API_KEYS`, the keys file `TOOLFLEET_API_KEYS_FILE` names (with scopes), and what is refused
with a clear error."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.server import tenants
from orchestrator.server.settings import AgentSpec, ServeSettings
from orchestrator.server.tenants import OPERATOR, ApiKey, Viewer, configured_keys, matching_key, parse_keys
from orchestrator.server.ui import UiSettings
from workers.errors import SettingsError

AGENT = "bank=myapp.agents:bank"


def _serve(**env: str) -> ServeSettings:
    return ServeSettings.from_env([AGENT], environ=env)


def test_an_item_names_its_tenant_before_the_first_colon_and_a_plain_key_is_the_default_tenants() -> None:
    keys = parse_keys(" acme:k1 , globex:k2:with:colons ,plain, ,x.y-z_9:sk-3")
    assert [(k.tenant, k.key) for k in keys] == [
        ("acme", "k1"),
        ("globex", "k2:with:colons"),
        ("default", "plain"),
        ("x.y-z_9", "sk-3"),
    ]
    assert all(not k.scopes for k in keys)
    assert [k.viewer for k in keys] == [
        Viewer("acme"),
        Viewer("globex"),
        Viewer("default"),
        Viewer("x.y-z_9"),
    ]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("a b:k1", "TOOLFLEET_API_KEYS: the tenant of an item 'a b' is not a tenant name"),
        (":k1", "TOOLFLEET_API_KEYS: the tenant of an item '' is not a tenant name"),
        ("acme/x:k1", "the tenant of an item 'acme/x' is not a tenant name"),
        (f"{'t' * 65}:k1", "is not a tenant name: 1 to 64 letters, digits, '_', '.' or '-'"),
        ("acme:", "TOOLFLEET_API_KEYS: the item of tenant 'acme' has no key"),
        ("acme:k1,globex:k1", "an API key is given twice (tenant 'globex')"),
    ],
)
def test_a_bad_tenant_name_an_empty_key_or_a_key_given_twice_is_refused(value: str, says: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(says)):
        _serve(TOOLFLEET_API_KEYS=value)


def _file(tmp_path: Path, document: Any) -> str:
    path = tmp_path / "keys.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


def test_the_keys_file_gives_keys_with_their_tenant_and_scopes_beside_the_variables(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        {
            "keys": [
                {"key": "k-admin", "tenant": "ops", "scopes": ["admin"]},
                {"key": "k-acme-2", "tenant": "acme"},
                {"key": "k-plain"},
            ]
        },
    )
    serve = _serve(TOOLFLEET_API_KEYS="acme:k1", TOOLFLEET_API_KEYS_FILE=path)
    assert [(k.key, k.tenant, k.scopes) for k in serve.api_keys] == [
        ("k1", "acme", frozenset()),
        ("k-admin", "ops", frozenset({"admin"})),
        ("k-acme-2", "acme", frozenset()),
        ("k-plain", "default", frozenset()),
    ]
    assert serve.api_keys[1].viewer == Viewer("ops", admin=True)
    # the run view reads the same keys, and the keys file alone is keys enough to listen anywhere
    assert UiSettings.from_env(environ={"TOOLFLEET_API_KEYS_FILE": path}).api_keys == serve.api_keys[1:]
    assert ServeSettings.from_env([AGENT], host="0.0.0.0", environ={"TOOLFLEET_API_KEYS_FILE": path}).api_keys


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ("{not json", "is not JSON"),
        ([{"key": "k"}], 'must be a JSON object with a list "keys"'),
        ({"keys": {"key": "k"}}, 'must be a JSON object with a list "keys"'),
        ({"keys": ["k"]}, 'keys[0] must be an object with "key", "tenant", "scopes" and "priority"'),
        ({"keys": [{"key": ""}]}, 'keys[0] needs "key", a non-empty string'),
        ({"keys": [{"key": "a"}, {"tenant": "acme"}]}, 'keys[1] needs "key", a non-empty string'),
        ({"keys": [{"key": "k", "tenant": "a:b"}]}, "keys[0]: the tenant 'a:b' is not a tenant name"),
        ({"keys": [{"key": "k", "tenant": 7}]}, 'keys[0]: "tenant" must be a string'),
        ({"keys": [{"key": "k", "scopes": "admin"}]}, 'keys[0]: "scopes" must be a list of strings'),
        ({"keys": [{"key": "k", "scopes": ["root"]}]}, "keys[0]: unknown scope 'root': the scopes are admin"),
        ({"keys": [{"key": "k", "tenants": "acme"}]}, "keys[0] has an unknown field 'tenants'"),
        ({"keys": [{"key": "k1", "tenant": "ops"}]}, "an API key is given twice (tenant 'ops')"),
    ],
)
def test_a_keys_file_of_another_shape_is_refused_naming_the_variable_and_the_entry(
    tmp_path: Path, document: Any, says: str
) -> None:
    path = _file(tmp_path, document)
    with pytest.raises(SettingsError, match=re.escape(says)) as refused:
        _serve(TOOLFLEET_API_KEYS="acme:k1", TOOLFLEET_API_KEYS_FILE=path)
    if "given twice" not in says:
        assert str(refused.value).startswith(f"TOOLFLEET_API_KEYS_FILE ({path})")


def test_a_keys_file_that_cannot_be_read_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    with pytest.raises(SettingsError, match=re.escape(f"TOOLFLEET_API_KEYS_FILE ({missing}) cannot be read")):
        _serve(TOOLFLEET_API_KEYS_FILE=str(missing))


def test_plain_strings_given_in_code_are_default_tenant_keys() -> None:
    serve = ServeSettings(agents=(AgentSpec("bank", "m", "a"),), api_keys=("k1",))  # type: ignore[arg-type]
    assert serve.api_keys == (ApiKey("k1"),)
    assert UiSettings(api_keys=("k1",)).api_keys == (ApiKey("k1"),)  # type: ignore[arg-type]


def test_an_agent_name_with_a_colon_is_refused_once_tenants_are_configured() -> None:
    # a tenant's conversation is kept as `tenant:agent/id`: an agent `acme:bank` would read acme's
    assert _serve(TOOLFLEET_API_KEYS="k1", TOOLFLEET_AGENTS="acme:bank=m:a").agents[1].name == "acme:bank"
    with pytest.raises(SettingsError, match=re.escape("agent name 'acme:bank' holds ':'")):
        _serve(TOOLFLEET_API_KEYS="globex:k1", TOOLFLEET_AGENTS="acme:bank=m:a")


def test_a_presented_key_is_compared_with_every_key_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[bytes] = []
    real = tenants.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return real(a, b)

    monkeypatch.setattr(tenants.hmac, "compare_digest", counting)
    keys = parse_keys("acme:k1,globex:k2,k3")
    assert matching_key(keys, "k1") == keys[0]
    assert compared == [b"k1", b"k2", b"k3"]  # no early exit at the first match
    assert matching_key(keys, "k") is None and matching_key(keys, "") is None


def test_a_viewer_sees_its_own_tenants_invocations_and_an_operator_every_ones() -> None:
    acme = Viewer("acme")
    assert acme.sees("acme") and not acme.sees("globex") and not acme.sees(None)
    assert not acme.sees("default") and acme.only == "acme"
    assert OPERATOR.sees("globex") and OPERATOR.sees(None) and OPERATOR.only is None
    assert configured_keys({}) == ()
