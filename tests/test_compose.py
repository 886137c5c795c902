"""The deployment files: docker-compose.yml and Dockerfile agree with the CLI and the settings.

Docker does not run where the tests run, and PyYAML is no dependency: the compose file is kept in a
plain YAML subset (block mappings and sequences, quoted or plain scalars, flow sequences of quoted
strings, comments) that `parse_yaml` below reads strictly — anything else is an error, so the file
cannot drift into YAML this parser would misread.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli import COMMANDS
from orchestrator.cli import build_parser as _parser
from orchestrator.server.settings import SERVE_ENVIRONMENT, ServeSettings
from orchestrator.service import AiService
from workers.settings import ENVIRONMENT

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"

# Variables a toolfleet service may set besides the settings' TOOLFLEET_* ones, and why.
ALLOWED_ENVIRONMENT = {
    "FLOWER_BASIC_AUTH": "Flower reads it natively: USER:PASSWORD of its web UI and REST API",
    "FLOWER_UNAUTHENTICATED_API": "Flower reads it natively (only without authentication)",
    "PYTHONUNBUFFERED": "logs reach `docker compose logs` at once",
    "TOOLFLEET_EXAMPLES_SLOW": "workers.examples.travel reads it: the demo's slow car rental",
    "OPENAI_API_KEY": "workers.examples.agents reads it: OpenAI's model instead of the scripted one",
    "OPENAI_MODEL": "workers.examples.agents reads it: the model's name",
    "OPENAI_BASE_URL": "workers.examples.agents reads it: an OpenAI-compatible server",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "OpenTelemetry reads it natively: where spans go (tracing on when set)",
}
# Variables whose values are secrets: required (`${VAR:?message}`) wherever they are used.
SECRETS = (
    *("REDIS_PASSWORD", "POSTGRES_PASSWORD", "FLOWER_BASIC_AUTH", "TOOLFLEET_API_KEYS"),
    "TOOLFLEET_JOURNAL_KEYS",
)
# Secrets that may be left out: passed on from the environment as `${VAR:-}`, never given a value.
OPTIONAL_SECRETS = ("OPENAI_API_KEY",)
BALANCER_CONFIG = "./deploy/nginx.conf"
TOOLFLEET_IMAGE = "toolfleet"


# --- a strict reader of the YAML subset the compose file uses -------------------------------------


class YamlSubsetError(ValueError):
    pass


_KEY = re.compile(r"^([A-Za-z0-9_.-]+):(?: (.*))?$")
_INTEGER = re.compile(r"^-?(0|[1-9][0-9]*)$")
_AMBIGUOUS = {"yes", "no", "on", "off", "y", "n", "null", "~", "true", "false"}


def parse_yaml(text: str) -> Any:
    """Parse the subset; raise `YamlSubsetError` with the line number on anything outside it."""
    lines: list[tuple[int, int, str]] = []  # (line number, indent, content)
    for number, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw:
            raise YamlSubsetError(f"line {number}: tab character")
        content = _strip_comment(raw, number).rstrip()
        if not content.strip():
            continue
        if content.strip() in ("---", "..."):
            raise YamlSubsetError(f"line {number}: document markers are not supported")
        indent = len(content) - len(content.lstrip(" "))
        lines.append((number, indent, content.strip()))
    if not lines:
        return None
    if lines[0][1] != 0:
        raise YamlSubsetError(f"line {lines[0][0]}: the document must start at column 0")
    value, end = _block(lines, 0, 0)
    if end != len(lines):
        raise YamlSubsetError(f"line {lines[end][0]}: unexpected indentation")
    return value


def _strip_comment(raw: str, number: int) -> str:
    quote: str | None = None
    for index, char in enumerate(raw):
        if quote is None:
            if char in "\"'":
                quote = char
            elif char == "#" and (index == 0 or raw[index - 1] == " "):
                return raw[:index]
        elif char == quote and not (quote == '"' and _escaped(raw, index)):
            quote = None
    if quote is not None:
        raise YamlSubsetError(f"line {number}: unterminated quoted string (multi-line strings unsupported)")
    return raw


def _escaped(text: str, index: int) -> bool:
    backslashes = 0
    while index - backslashes - 1 >= 0 and text[index - backslashes - 1] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _block(lines: list[tuple[int, int, str]], start: int, indent: int) -> tuple[Any, int]:
    if lines[start][2] == "-" or lines[start][2].startswith("- "):
        return _sequence(lines, start, indent)
    return _mapping(lines, start, indent)


def _mapping(lines: list[tuple[int, int, str]], start: int, indent: int) -> tuple[dict[str, Any], int]:
    result: dict[str, Any] = {}
    index = start
    while index < len(lines) and lines[index][1] == indent:
        number, _, content = lines[index]
        match = _KEY.match(content)
        if match is None:
            raise YamlSubsetError(f"line {number}: expected `key: value` or `key:`, got {content!r}")
        key, rest = match.group(1), match.group(2)
        if key in result:
            raise YamlSubsetError(f"line {number}: duplicate key {key!r}")
        index += 1
        if rest is not None and rest.strip():
            result[key] = _scalar(rest.strip(), number)
        elif index < len(lines) and lines[index][1] > indent:
            result[key], index = _block(lines, index, lines[index][1])
        else:
            result[key] = None
    if index < len(lines) and lines[index][1] > indent:
        raise YamlSubsetError(f"line {lines[index][0]}: unexpected indentation")
    return result, index


def _sequence(lines: list[tuple[int, int, str]], start: int, indent: int) -> tuple[list[Any], int]:
    result: list[Any] = []
    index = start
    while index < len(lines) and lines[index][1] == indent:
        number, _, content = lines[index]
        if not content.startswith("- "):
            raise YamlSubsetError(f"line {number}: expected a `- item` of the sequence")
        item = content[2:].strip()
        if _KEY.match(item) or item.endswith(":"):
            raise YamlSubsetError(f"line {number}: mappings inside sequences are not supported")
        result.append(_scalar(item, number))
        index += 1
    if index < len(lines) and lines[index][1] > indent:
        raise YamlSubsetError(f"line {lines[index][0]}: unexpected indentation")
    return result, index


def _scalar(text: str, number: int) -> Any:
    if text.startswith('"'):
        if not text.endswith('"') or len(text) < 2:
            raise YamlSubsetError(f"line {number}: text after a quoted string: {text!r}")
        try:
            value: str = json.loads(text)  # JSON string escapes are a subset of YAML's double-quoted ones
        except json.JSONDecodeError as exc:
            raise YamlSubsetError(f"line {number}: unsupported double-quoted string {text!r}") from exc
        return value
    if text.startswith("'"):
        if not text.endswith("'") or len(text) < 2 or "'" in text[1:-1].replace("''", ""):
            raise YamlSubsetError(f"line {number}: unsupported single-quoted string {text!r}")
        return text[1:-1].replace("''", "'")
    if text.startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise YamlSubsetError(
                f"line {number}: a flow sequence must hold double-quoted strings only: {text!r}"
            ) from exc
        if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
            raise YamlSubsetError(f"line {number}: a flow sequence must hold strings only: {text!r}")
        return items
    if text[0] in "]{}&*!|>%@`,?:-" and not (text[0] == "-" and _INTEGER.match(text)):
        raise YamlSubsetError(f"line {number}: unsupported YAML syntax {text!r} (quote the value)")
    if ": " in text or text.endswith(":"):
        raise YamlSubsetError(f"line {number}: `: ` inside a plain value: quote it ({text!r})")
    if text in ("true", "false"):
        return text == "true"
    if text.lower() in _AMBIGUOUS:
        raise YamlSubsetError(f"line {number}: {text!r} means different things to YAML 1.1 and 1.2: quote it")
    if _INTEGER.match(text):
        return int(text)
    if re.fullmatch(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|\.(inf|nan)", text, re.I):
        raise YamlSubsetError(f"line {number}: floating-point value {text!r}: quote it")
    return text


# --- the reader itself ------------------------------------------------------------------------------


def test_parser_reads_the_subset() -> None:
    # given
    text = (
        "# comment\n"
        "name: demo  # trailing comment\n"
        "services:\n"
        "  a:\n"
        '    command: "x --y ${Z:?set Z} # not a comment"\n'
        "    init: true\n"
        "    list:\n"
        "      - one\n"
        "      - 'it''s'\n"
        '    test: ["CMD", "a b"]\n'
        "    retries: 10\n"
        "    empty:\n"
        "volumes:\n"
        "  data:\n"
    )
    # then
    assert parse_yaml(text) == {
        "name": "demo",
        "services": {
            "a": {
                "command": "x --y ${Z:?set Z} # not a comment",
                "init": True,
                "list": ["one", "it's"],
                "test": ["CMD", "a b"],
                "retries": 10,
                "empty": None,
            }
        },
        "volumes": {"data": None},
    }


@pytest.mark.parametrize(
    "text",
    [
        "a: &anchor x\n",
        "a: *alias\n",
        "a: |\n  text\n",
        "a: 1\na: 2\n",
        "a:\n  - b: c\n",
        "a: no\n",
        "a: b: c\n",
        "a: 1.5\n",
        "a:\n\tb: c\n",
        'a: "unterminated\n',
        "a: 1\n   b: 2\n",
        "a: {b: c}\n",
        "---\na: 1\n",
    ],
)
def test_parser_rejects_what_it_does_not_understand(text: str) -> None:
    with pytest.raises(YamlSubsetError):
        parse_yaml(text)


# --- the compose file (its secrets and health checks: test_compose_secrets.py, test_compose_health.py)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = parse_yaml(COMPOSE.read_text())
    assert isinstance(document, dict)
    return document


def _services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    services = compose["services"]
    assert isinstance(services, dict)
    return services


def _toolfleet_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in _services(compose).items()
        if "build" in service or str(service.get("image", "")).split(":")[0].endswith(TOOLFLEET_IMAGE)
    }


def _references(text: str) -> list[tuple[str, str, str]]:
    """Every `${NAME<operator>WORD}` reference: (name, operator, word)."""
    return re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:?[-?+]|)([^}]*)\}", text)


def test_the_stack_has_its_services(compose: dict[str, Any]) -> None:
    assert set(_services(compose)) == {
        "redis",
        "postgres",
        "flower",
        "worker-io",
        "worker-heavy",
        "orchestrator",
        "balancer",
        "otel-collector",
        "prometheus",
    }
    assert set(_toolfleet_services(compose)) == {"flower", "worker-io", "worker-heavy", "orchestrator"}
    assert set(compose["volumes"]) == {"redis-data", "postgres-data", "artifacts"}


def test_the_workers_and_the_orchestrator_share_one_artifact_store(compose: dict[str, Any]) -> None:
    # a directory store works across processes only where they all see the same directory
    for name in ("worker-io", "worker-heavy", "orchestrator"):
        service = _services(compose)[name]
        assert (
            service["environment"]["TOOLFLEET_ARTIFACT_URL"] == "${TOOLFLEET_ARTIFACT_URL:-file:///artifacts}"
        )
        assert "artifacts:/artifacts" in service["volumes"], name


def test_every_toolfleet_command_is_one_the_cli_accepts(compose: dict[str, Any]) -> None:
    for name, service in _toolfleet_services(compose).items():
        command = service.get("command")
        assert isinstance(command, str), f"{name}: the command is a string of toolfleet's arguments"
        assert "$" not in command, f"{name}: configuration goes in the environment, not the command"
        words = command.split()
        assert words[0] in COMMANDS, f"{name}: {words[0]!r} is no toolfleet command ({COMMANDS})"
        args = _parser().parse_args(words)  # exits (SystemExit) on anything the CLI would reject
        assert args.command == words[0]


def test_every_tool_has_a_worker_with_its_code_and_its_pool(compose: dict[str, Any]) -> None:
    # given
    from workers.app import registry_from_modules

    loaded: set[str] = {f"workers.examples.{name}" for name in ("math", "weather", "bank", "travel")}
    served: set[str] = set()
    for name, service in _toolfleet_services(compose).items():
        args = _parser().parse_args(service["command"].split())
        if args.command != "worker":
            continue
        pools = set(args.pool.split(","))
        for module in args.tools.split(","):
            tools = {d.name for d in registry_from_modules([module]) if d.pool in pools}
            # then: no module is loaded for nothing
            assert tools, f"{name} loads {module} but consumes none of its tools' pools"
            served |= tools
            loaded.add(module)
    # and every tool of every module (the examples at least) has a worker
    everything = registry_from_modules(sorted(loaded))
    unserved = [f"{d.name} (pool {d.pool})" for d in everything if d.name not in served]
    assert unserved == [], "no worker service serves these tools"


def test_toolfleet_services_set_only_variables_toolfleet_reads(compose: dict[str, Any]) -> None:
    known = set(ENVIRONMENT.values()) | set(SERVE_ENVIRONMENT.values()) | set(ALLOWED_ENVIRONMENT)
    for name, service in _toolfleet_services(compose).items():
        environment = service.get("environment") or {}
        assert isinstance(environment, dict), f"{name}: environment is a mapping"
        unknown = set(environment) - known
        assert not unknown, f"{name} sets variables nothing reads: {sorted(unknown)}"
        for variable, value in environment.items():
            assert isinstance(value, str), f"{name}: {variable} must be a quoted string"


def test_toolfleet_services_reach_the_authenticated_redis(compose: dict[str, Any]) -> None:
    url = "redis://:${REDIS_PASSWORD:?set REDIS_PASSWORD}@redis:6379/0"
    for name, service in _toolfleet_services(compose).items():
        environment = service["environment"]
        for field in ("redis_url", "broker_url", "result_backend"):
            assert environment[ENVIRONMENT[field]] == url, f"{name}: {ENVIRONMENT[field]}"
        assert service["restart"] in ("unless-stopped", "always", "on-failure"), name
        assert service["depends_on"]["redis"] == {"condition": "service_healthy"}, name


def test_the_orchestrator_uses_postgres(compose: dict[str, Any]) -> None:
    orchestrator = _services(compose)["orchestrator"]
    url = orchestrator["environment"][ENVIRONMENT["database_url"]]
    assert url.startswith("postgresql+psycopg://")
    assert "${POSTGRES_PASSWORD:?" in url
    assert url.endswith("@postgres:5432/${POSTGRES_DB:-toolfleet}")
    assert orchestrator["depends_on"]["postgres"] == {"condition": "service_healthy"}


def test_the_workers_have_their_pools(compose: dict[str, Any]) -> None:
    services = _services(compose)
    io = _parser().parse_args(services["worker-io"]["command"].split())
    heavy = _parser().parse_args(services["worker-heavy"]["command"].split())
    assert (io.pool, io.kind, io.concurrency) == ("io", "threads", 32)
    assert (heavy.pool, heavy.kind, heavy.concurrency) == ("heavy", "prefork", 2)
    timeout = float(services["worker-heavy"]["environment"][ENVIRONMENT["default_tool_timeout_s"]])
    assert timeout >= 60


def test_postgres_is_persistent_and_checked(compose: dict[str, Any]) -> None:
    postgres = _services(compose)["postgres"]
    assert postgres["image"].split(":")[0] == "postgres"
    assert set(postgres["environment"]) == {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"}
    assert postgres["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    assert any(volume.endswith(":/var/lib/postgresql/data") for volume in postgres["volumes"])
    assert "pg_isready" in postgres["healthcheck"]["test"]
    assert "ports" not in postgres


def test_flower_requires_basic_auth(compose: dict[str, Any]) -> None:
    flower = _services(compose)["flower"]
    args = _parser().parse_args(flower["command"].split())
    assert args.command == "flower"
    assert args.basic_auth is None, "the credentials come from the environment, not the command line"
    assert not args.unauthenticated_api
    assert flower["environment"]["FLOWER_BASIC_AUTH"].startswith("${FLOWER_BASIC_AUTH:?")
    assert flower["ports"] == ["127.0.0.1:${FLOWER_PORT:-5555}:" + str(args.port)]


def _without_references(value: str) -> str:
    return re.sub(r"\$\{[^}]*\}", "REF", value)


def test_the_orchestrator_serves_its_agents_as_alike_replicas(compose: dict[str, Any]) -> None:
    orchestrator = _services(compose)["orchestrator"]
    args = _parser().parse_args(orchestrator["command"].split())
    assert args.command == "serve"
    assert args.host == "0.0.0.0", "the balancer reaches it over the stack's network"
    # the settings `toolfleet serve` would read there are valid (keys given: it may listen on 0.0.0.0)
    environ = {name: _without_references(value) for name, value in orchestrator["environment"].items()}
    serve = ServeSettings.from_env(args.agent, args.host, args.port, environ=environ)
    assert serve.api_keys, "clients must send a key"
    assert orchestrator["environment"][SERVE_ENVIRONMENT["api_keys"]].startswith("${TOOLFLEET_API_KEYS:?")
    for spec in serve.agents:  # each agent is there (not built: that needs Redis)
        target: Any = importlib.import_module(spec.module)
        for part in spec.attribute.split("."):
            target = getattr(target, part)
        assert isinstance(target, AiService) or callable(target), str(spec)
    # alike replicas: `--scale orchestrator=N` needs no fixed name and no host port
    assert "container_name" not in orchestrator
    assert "ports" not in orchestrator, "replicas are reached through the balancer"
    # Docker waits longer than the drain before it kills the replica
    grace = re.fullmatch(r"(\d+)s", orchestrator["stop_grace_period"])
    assert grace is not None and int(grace[1]) > serve.drain_grace_s
    # its health is the service's own, asked with the image's python (the image has no curl)
    test = orchestrator["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    compile(test[3], "healthcheck", "exec")
    assert re.search(rf"urlopen\('http://127\.0\.0\.1:{args.port}/(readyz|healthz)'", test[3]), test[3]


def _nginx_directives(text: str) -> list[tuple[str, str]]:
    """Every `name arguments;` of an nginx configuration, in order (comments left out)."""
    code = "\n".join(line.partition("#")[0] for line in text.splitlines())
    return [(name, args.strip()) for name, args in re.findall(r"([a-z_0-9]+)\s+([^;{}]*);", code)]


def test_the_balancer_sends_requests_to_every_replica_unbuffered(compose: dict[str, Any]) -> None:
    services = _services(compose)
    balancer = services["balancer"]
    name, _, tag = balancer["image"].partition(":")
    assert name == "nginx"
    assert tuple(int(part) for part in tag.split(".")) >= (1, 27, 3), "`resolve` needs nginx 1.27.3"
    assert f"{BALANCER_CONFIG}:/etc/nginx/conf.d/default.conf:ro" in balancer["volumes"]
    directives = _nginx_directives((ROOT / BALANCER_CONFIG).read_text())
    values: dict[str, list[str]] = {}
    for directive, arguments in directives:
        values.setdefault(directive, []).append(arguments)
    # to every replica of the orchestrator service, found again as replicas come and go
    port = _parser().parse_args(services["orchestrator"]["command"].split()).port
    assert f"orchestrator:{port} resolve" in values["server"]
    assert values["resolver"][0].startswith("127.0.0.11 ")
    upstream = re.search(r"upstream (\w+) \{", (ROOT / BALANCER_CONFIG).read_text())
    assert upstream is not None and values["proxy_pass"] == [f"http://{upstream[1]}"]
    # server-sent events pass as they are written, over HTTP/1.1, and a quiet stream is not cut
    assert values["proxy_buffering"] == ["off"]
    assert values["proxy_http_version"] == ["1.1"]
    read_timeout = re.fullmatch(r"(\d+)s", values["proxy_read_timeout"][0])
    assert read_timeout is not None and int(read_timeout[1]) >= 600
    headers = {value.split()[0].lower(): value.split()[1] for value in values["proxy_set_header"]}
    assert headers["authorization"] == "$http_authorization"
    assert headers["last-event-id"] == "$http_last_event_id"
    # a POST is never sent to a second replica
    assert "non_idempotent" not in values.get("proxy_next_upstream", [""])[0]
    # one host port, on loopback, to the port nginx listens on
    assert balancer["ports"] == [f"127.0.0.1:${{HTTP_PORT:-8000}}:{values['listen'][0]}"]
    assert balancer["depends_on"]["orchestrator"] == {"condition": "service_healthy"}


def test_the_commands_the_comments_show_are_ones_the_cli_accepts(compose: dict[str, Any]) -> None:
    text = COMPOSE.read_text()
    shown = re.findall(r"^#\s+docker compose run --rm (\S+) ([^#\n]*)", text, re.MULTILINE)
    assert {args.split()[0] for _, args in shown} >= {"demo", "tools"}
    for service, args in shown:
        assert service in _toolfleet_services(compose), service
        assert _parser().parse_args(args.split()).command == args.split()[0]
    scaled = re.findall(r"--scale (\S+)=\d+", text)
    assert scaled and set(scaled) == {"orchestrator"}


def test_no_secret_is_written_in_the_file(compose: dict[str, Any]) -> None:
    text = COMPOSE.read_text()
    for name, operator, _ in _references(text):
        if name in SECRETS:
            assert operator == ":?", f"${{{name}}} is a required secret: use ${{{name}:?message}}"
    # No password literal: credentials in URLs, and every password-like variable, are references.
    without_references = re.sub(r"\$\{[^}]*\}", "REF", text)
    urls = re.findall(r"[a-z+]+://[^\s\"']*", without_references)
    assert len(urls) >= 4
    for url in urls:
        credentials = url.split("://", 1)[1].rpartition("@")[0]
        if credentials:
            assert credentials.partition(":")[2] == "REF", f"a literal password in {url}"
    for service in _services(compose).values():
        for variable, value in (service.get("environment") or {}).items():
            if variable in OPTIONAL_SECRETS:
                assert value == f"${{{variable}:-}}", f"{variable} is passed on, never given a value"
            elif re.search(r"PASSWORD|SECRET|TOKEN|AUTH|KEY", variable):
                assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]*\}", value), (
                    f"{variable} must be a ${{...}} reference"
                )


def test_long_running_services_restart_and_are_healthy_first(compose: dict[str, Any]) -> None:
    services = _services(compose)
    for name, service in services.items():
        assert "restart" in service, f"{name} has no restart policy"
        for dependency, condition in (service.get("depends_on") or {}).items():
            assert dependency in services, f"{name} depends on an unknown service {dependency}"
            wanted = "service_healthy" if "healthcheck" in services[dependency] else "service_started"
            assert condition == {"condition": wanted}, f"{name} -> {dependency}"


# --- the Dockerfile -------------------------------------------------------------------------------


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def test_the_image_runs_toolfleet_as_a_non_root_user() -> None:
    instructions = _instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    assert ("ENTRYPOINT", '["toolfleet"]') in instructions
    assert ("CMD", '["--help"]') in instructions
    runs = [rest for keyword, rest in instructions if keyword == "RUN"]
    # the dependencies are the lock's, hash-checked, for the extras the image has; then the package alone
    assert any(
        re.search(r"uv export --locked .*--extra postgres --extra otel --extra s3", run)
        and re.search(r"pip install --require-hashes -r", run)
        and re.search(r"pip install --no-deps \"?\.\[postgres,otel,s3\]\"?", run)
        for run in runs
    ), runs
    assert not any(re.search(r"\[[^\]]*\bdev\b", run) for run in runs), "no development extras"
    users = [rest for keyword, rest in instructions if keyword == "USER"]
    assert users and users[-1] not in ("root", "0"), "the services run as a non-root user"
    # the directory artifact store's mount point belongs to that user (a new volume takes its owner)
    assert any(re.search(r"mkdir /artifacts && chown toolfleet:toolfleet /artifacts", run) for run in runs)
    copied = " ".join(rest for keyword, rest in instructions if keyword == "COPY")
    for needed in ("pyproject.toml", "uv.lock", "README.md", "workers", "orchestrator"):
        assert needed in copied


def test_the_image_installs_with_the_uv_the_makefile_pins() -> None:
    # given: the uv version `make setup` installs
    pinned = re.search(r"^UV_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert pinned, "the Makefile pins uv as UV_VERSION := X.Y.Z"
    # then: the image exports its requirements with that same uv (one lock format, read by one uv)
    runs = " ".join(rest for keyword, rest in _instructions() if keyword == "RUN")
    assert re.findall(r"\buv==(\S+?)\"?\s", runs) == [pinned.group(1)]


def test_the_build_context_leaves_out_what_the_image_does_not_need() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", "everything is excluded unless listed"
    assert {p.lstrip("!").rstrip("/") for p in patterns if p.startswith("!")} == {
        "pyproject.toml",
        "uv.lock",
        "README.md",
        "workers",
        "orchestrator",
    }


def test_the_image_installs_what_the_redis_broker_needs() -> None:
    # kombu's Redis transport imports `packaging`, which only the `redis` extra of celery (or kombu)
    # installs; a development virtualenv has it from other tools, the image would not. Found by
    # installing the image's build context into a fresh virtualenv: `toolfleet worker` failed with
    # "No module named 'packaging'".
    import tomllib

    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~; ]", dependency, maxsplit=1)[0].lower() for dependency in dependencies}
    assert names & {"celery[redis]", "kombu[redis]", "packaging"}, (
        f"pyproject.toml: declare celery[redis] (or packaging); dependencies are {dependencies}"
    )
