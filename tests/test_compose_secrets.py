"""The compose stack's secrets: each one required, none on a command line (where `ps` shows it to
every user of the host), Redis's password read from a config file, and the journal sealed by a key
the file says how to make.

Docker does not run here: the Redis part starts the redis-server the tests use with the service's own
command and the config file the stack writes, as the container would, and checks that it wants the
password.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from orchestrator.cli import COMMANDS
from orchestrator.saga import _journal_crypto
from tests._ports import free_port
from tests._waiting import wait_for
from tests.test_compose import COMPOSE, OPTIONAL_SECRETS, SECRETS, parse_yaml
from workers._devredis import redis_server_executable
from workers.settings import ENVIRONMENT

JOURNAL_KEYS = ENVIRONMENT["journal_keys"]
# The commands that write invocation parameters to the journal: a service running one needs the key.
JOURNALING_COMMANDS = {"serve", "demo", "chat", "recover", "approve", "reject", "cancel", "mcp"}
# Options that would put a password on a command line.
PASSWORD_OPTIONS = ("--requirepass", "--masterauth", "--pass", "-a ", "--password", "--basic-auth")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = parse_yaml(COMPOSE.read_text())
    return document


def _command_lines(service: dict[str, Any]) -> dict[str, str]:
    """Every command line the service's containers run: its command, entrypoint and health check."""
    lines = {}
    for field in ("command", "entrypoint"):
        if field in service:
            value = service[field]
            lines[field] = value if isinstance(value, str) else shlex.join(value)
    test = (service.get("healthcheck") or {}).get("test")
    if test:
        lines["healthcheck"] = shlex.join(test[1:]) if test[0] == "CMD" else " ".join(test[1:])
    return lines


def _secret_references(text: str) -> list[str]:
    return [
        name
        for name in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text)
        if name in SECRETS or name in OPTIONAL_SECRETS
    ]


def test_no_service_runs_a_secret_on_its_command_line(compose: dict[str, Any]) -> None:
    checked = 0
    for name, service in compose["services"].items():
        for field, line in _command_lines(service).items():
            checked += 1
            assert _secret_references(line) == [], f"{name} {field}: a secret on a command line: {line}"
            assert not any(option in f"{line} " for option in PASSWORD_OPTIONS), f"{name} {field}: {line}"
    assert checked >= 8


def test_a_secret_on_a_command_line_is_caught() -> None:
    # given: Redis's password as it used to be passed, and as a health check might pass it
    service = {
        "command": "redis-server --appendonly yes --requirepass ${REDIS_PASSWORD:?set REDIS_PASSWORD}",
        "healthcheck": {"test": ["CMD-SHELL", "redis-cli -a $REDIS_PASSWORD ping"]},
    }
    # then
    lines = _command_lines(service)
    assert _secret_references(lines["command"]) == ["REDIS_PASSWORD"]
    assert _secret_references(lines["healthcheck"]) == ["REDIS_PASSWORD"]


def test_redis_reads_its_password_from_a_config_the_stack_writes(compose: dict[str, Any]) -> None:
    redis_service = compose["services"]["redis"]
    words = shlex.split(redis_service["command"])
    assert words[0] == "redis-server"
    # the config file it names is the stack's config, mounted where the short syntax puts it
    [config_name] = redis_service["configs"]
    assert words[1] == f"/{config_name}" and config_name.endswith(".conf")
    content = compose["configs"][config_name]["content"]
    assert re.fullmatch(r"requirepass \$\{REDIS_PASSWORD:\?[^}]+\}\n", content), content
    # durable, and never evicting a queued call
    assert words[words.index("--appendonly") + 1] == "yes"
    assert words[words.index("--maxmemory-policy") + 1] == "noeviction"
    # its health check authenticates from the environment, not from its command line
    assert redis_service["environment"]["REDISCLI_AUTH"].startswith("${REDIS_PASSWORD:?")
    assert redis_service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL")
    assert "ports" not in redis_service, "Redis stays inside the stack's network"
    assert any(volume.endswith(":/data") for volume in redis_service["volumes"])


PASSWORD = "c0mpose-redis-pw-5e1f"


@pytest.fixture
def stack_redis(compose: dict[str, Any], tmp_path: Path) -> Iterator[int]:
    """redis-server run with the service's command and the config the stack writes (the password
    substituted as Compose does); its port."""
    redis_service = compose["services"]["redis"]
    [config_name] = redis_service["configs"]
    config = tmp_path / config_name
    config.write_text(
        re.sub(r"\$\{REDIS_PASSWORD:\?[^}]*\}", PASSWORD, compose["configs"][config_name]["content"])
    )
    words = shlex.split(redis_service["command"])
    port = free_port()
    command = [redis_server_executable(), str(config), *words[2:]]
    command += ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--save", ""]
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as process:
        try:
            wait_for(lambda: _answers(port), timeout_s=15, what="redis-server answering")
            yield port
        finally:
            process.terminate()
            process.wait(timeout=10)


def _answers(port: int) -> bool:
    client = redis.Redis(port=port, socket_timeout=1)
    try:
        client.ping()
    except redis.AuthenticationError:
        return True  # it answers: it wants a password
    except redis.ConnectionError:
        return False
    finally:
        client.close()
    return True


@pytest.mark.integration
def test_the_stack_redis_wants_the_password_of_its_config(stack_redis: int) -> None:
    port = stack_redis
    # then: no client gets in without the password
    anonymous = redis.Redis(port=port, socket_timeout=5)
    with pytest.raises(redis.AuthenticationError):
        anonymous.ping()
    anonymous.close()
    # and with it, a client finds the server configured as the command says
    client = redis.Redis(port=port, password=PASSWORD, socket_timeout=5)
    try:
        assert client.ping()
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    finally:
        client.close()


# --- the journal's key -------------------------------------------------------------------------------


def _runs_on(compose: dict[str, Any]) -> dict[str, set[str]]:
    """Each toolfleet service and the commands it runs: its own, and those the header says to run in it
    (`docker compose run --rm SERVICE COMMAND`)."""
    text = COMPOSE.read_text()
    runs: dict[str, set[str]] = {}
    for name, service in compose["services"].items():
        if "build" in service:
            runs[name] = {service["command"].split()[0]}
    for name, args in re.findall(r"^#\s+docker compose run --rm (\S+) (\S+)", text, re.MULTILINE):
        runs[name].add(args)
    return runs


def test_every_service_that_journals_requires_the_journal_key(compose: dict[str, Any]) -> None:
    assert set(COMMANDS) >= JOURNALING_COMMANDS, "each name above is a toolfleet command"
    runs = _runs_on(compose)
    journaling = {name for name, commands in runs.items() if commands & JOURNALING_COMMANDS}
    assert journaling == {"orchestrator"}, runs
    for name in journaling:
        value = compose["services"][name]["environment"][JOURNAL_KEYS]
        match = re.fullmatch(rf"\$\{{{JOURNAL_KEYS}:\?([^}}]+)\}}", value)
        assert match is not None, f"{name}: {JOURNAL_KEYS} is required: {value}"
        assert "Fernet key" in match[1] and _journal_crypto.MAKE_KEY in match[1], match[1]
    # the services that do not journal are not given the key
    for name in set(runs) - journaling:
        assert JOURNAL_KEYS not in compose["services"][name]["environment"], name


def test_the_keys_the_file_says_to_make_open_the_journal() -> None:
    # given: each way the file shows to make a key (the header's export and the error message's)
    text = COMPOSE.read_text()
    exported = re.search(rf"^#\s+export {JOURNAL_KEYS}=\$\((.+?)\)\s+#", text, re.MULTILINE)
    assert exported is not None, f"the header shows how to export {JOURNAL_KEYS}"
    # (python: this interpreter, which has the cryptography package the image has)
    recipes = [exported[1], _journal_crypto.MAKE_KEY.replace("python", shlex.quote(sys.executable), 1)]
    for recipe in recipes:
        # when
        made = subprocess.run(["bash", "-c", recipe], capture_output=True, text=True, timeout=30, check=True)
        key = made.stdout.strip()
        # then: a Fernet key, which the journal's cipher takes
        cipher = _journal_crypto.JournalCipher(key)
        sealed = cipher.seal(json.dumps({"api_token": "t0ken"}))
        assert "t0ken" not in sealed
        assert json.loads(cipher.open(sealed, invocation_id="i")) == {"api_token": "t0ken"}
