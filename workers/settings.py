"""Typed settings, read once from the environment at the process edge and passed down."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.connection import parse_url

from workers.errors import SettingsError
from workers.redis_client import SENTINEL_SCHEME, URL_LIST, is_sentinel, parse_sentinel_url
from workers.telemetry.logs import LOG_FORMATS
from workers.tools.versions import check_build_id

__all__ = ["DESCRIPTIONS", "ENVIRONMENT", "Settings", "is_amqp", "redact_url"]

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


@dataclass(frozen=True)
class Settings:
    """Everything toolfleet reads from `TOOLFLEET_*` variables; `ENVIRONMENT` maps field to variable."""

    redis_url: str = DEFAULT_REDIS_URL
    broker_url: str = DEFAULT_REDIS_URL
    result_backend: str = DEFAULT_REDIS_URL
    database_url: str = "sqlite:///toolfleet.db"
    default_tool_timeout_s: float = 60.0
    visibility_timeout_s: float | None = None
    result_expires_s: int = 24 * 3600
    heartbeat_ttl_s: float = 6.0
    invocation_heartbeat_s: float = 10.0  # how often a running invocation's owner beats in the journal
    liveness_check_interval_s: float = 0.5
    max_fanout: int = 64
    max_argument_bytes: int = 1 << 20
    max_result_bytes: int = 4 << 20
    inline_result_bytes: int = 256 << 10  # larger results become artifacts
    artifact_url: str = ""  # the artifact store; unset: ./toolfleet-artifacts
    compensation_retries: int = 3
    retry_backoff_s: float = 0.2
    retry_backoff_max_s: float = 5.0
    send_sent_events: bool = True
    task_events: bool = True  # Celery task events (worker and task-sent): what Flower shows of each call
    tools: str = ""
    journal_keys: str = ""  # Fernet keys, comma-separated: the first encrypts, all decrypt
    log_format: str = "text"  # `text`, or `json`: one JSON object per line
    trace_content: bool = False  # spans carry tool arguments and results (never secrets' parameters)
    pool_concurrency: int | None = None  # a worker's `--pool-concurrency` when it gives none
    build_id: str | None = None  # a worker's `--build-id` when it gives none: part of its tools' versions
    broker_queue_type: str = "quorum"  # a RabbitMQ broker's queues: `quorum` (replicated) or `classic`

    def __post_init__(self) -> None:
        """Refuse values out of range here, so every process edge (and code) refuses them alike."""
        for name, (minimum, inclusive) in _LOWER_BOUNDS.items():
            _check_bound(name, getattr(self, name), minimum, inclusive)
        if self.liveness_check_interval_s >= self.heartbeat_ttl_s:
            raise SettingsError(
                f"{ENVIRONMENT['liveness_check_interval_s']} must be less than "
                f"{ENVIRONMENT['heartbeat_ttl_s']} ({self.heartbeat_ttl_s:g} s), "
                f"got {self.liveness_check_interval_s:g}: workers' heartbeats must be checked more often "
                "than they expire"
            )
        _check_redis_url(self.redis_url)
        for name in ("broker_url", "result_backend"):
            if is_sentinel(getattr(self, name)):
                _check_redis_url(getattr(self, name), name)
        if self.build_id is not None:
            try:
                check_build_id(self.build_id, ENVIRONMENT["build_id"])
            except ValueError as exc:
                raise SettingsError(str(exc)) from None
        if self.broker_queue_type not in QUEUE_TYPES:
            raise SettingsError(
                f"{ENVIRONMENT['broker_queue_type']} must be one of {', '.join(QUEUE_TYPES)}, "
                f"got {self.broker_queue_type!r}"
            )
        _check_artifact_url(self.artifact_url)
        if self.log_format not in LOG_FORMATS:
            raise SettingsError(
                f"{ENVIRONMENT['log_format']} must be one of {', '.join(LOG_FORMATS)}, "
                f"got {self.log_format!r}"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the settings; `TOOLFLEET_REDIS_URL` is the default for broker and result backend."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for item in fields(cls):
            raw = env.get(ENVIRONMENT[item.name])
            if raw is None or raw == "":
                continue
            values[item.name] = _parse(item.name, raw, item.type)
        redis_url = values.get("redis_url", DEFAULT_REDIS_URL)
        values.setdefault("broker_url", redis_url)
        values.setdefault("result_backend", redis_url)
        return cls(**values)

    def redacted(self) -> dict[str, Any]:
        """The settings with passwords in URLs and the journal's keys masked, for logs and `--help`."""
        values = {item.name: _redact(getattr(self, item.name)) for item in fields(self)}
        if values["journal_keys"]:
            values["journal_keys"] = "***"
        return values

    def __repr__(self) -> str:
        return f"Settings({', '.join(f'{k}={v!r}' for k, v in self.redacted().items())})"


ENVIRONMENT: dict[str, str] = {item.name: f"TOOLFLEET_{item.name.upper()}" for item in fields(Settings)}

# What each setting means, with its range where it has one: the configuration reference
# (docs/configuration.md) is generated from this, the variable and default from the class above.
DESCRIPTIONS: dict[str, str] = {
    "redis_url": "catalog, call states, result subscription; the default broker and result backend "
    "(`redis://`, `rediss://`, `unix://`, or `sentinel://…;sentinel://…/db?master_name=NAME`: see Brokers)",
    "broker_url": "Celery broker (`redis://`, `rediss://`, `sentinel://` or `amqp://`)",
    "result_backend": "Celery result backend (Redis, or Redis behind Sentinel)",
    "database_url": "the saga journal and conversations (PostgreSQL: `postgresql+psycopg://...`; "
    "`postgres://` and `postgresql://` mean the same, through psycopg 3, which needs "
    "`pip install 'toolfleet[postgres]'`)",
    "default_tool_timeout_s": "deadline of a tool without `timeout=` (> 0)",
    "visibility_timeout_s": "Redis broker redelivery delay; default twice the longest deadline plus 30 s "
    "(> 0)",
    "result_expires_s": "how long results and call states stay in Redis (>= 1)",
    "heartbeat_ttl_s": "a worker leaves the catalog this long after its last heartbeat (>= 0.1)",
    "invocation_heartbeat_s": "how often a running invocation's owner beats in the journal (>= 0.01); "
    "recovery takes an invocation over only after three beats missed",
    "liveness_check_interval_s": "how often pending calls' workers and pools are checked "
    "(> 0, below the heartbeat TTL)",
    "max_fanout": "tool calls of one invocation in flight at once: `AiService` (its `max_fanout=` "
    "overrides it) and `execute_batch()` (>= 1)",
    "max_argument_bytes": "larger arguments are an arguments error (>= 1)",
    "max_result_bytes": "larger results are an execution error (>= 1), once over-inline ones have become "
    "artifacts: what stays inline (image contents, a result a tool gave as contents)",
    "inline_result_bytes": "a result whose text is larger is stored as an artifact, the model reading its "
    "beginning and its reference (>= 1)",
    "artifact_url": "the artifact store: a directory (`file:///srv/artifacts` or a path) or an S3-compatible "
    "bucket (`s3://bucket/prefix`, credentials and endpoint from the `AWS_*` variables or "
    "`?endpoint_url=`); unset: the directory `toolfleet-artifacts` under the working directory, which "
    "every process of a machine must share (see Artifacts)",
    "compensation_retries": "retries of a failing compensation (>= 0)",
    "retry_backoff_s": "exponential backoff with jitter for retries: the first delay (>= 0)",
    "retry_backoff_max_s": "exponential backoff with jitter for retries: the longest delay (>= 0)",
    "send_sent_events": "queued calls visible in Flower",
    "task_events": "Celery task events, what Flower shows of each call (worker events and `task-sent`); "
    "`false` where no Flower watches (see Monitoring with Flower)",
    "tools": "tool modules for `celery -A workers.app worker`",
    "journal_keys": "Fernet keys, comma-separated, sealing invocation parameters in the journal: the "
    "first encrypts, all decrypt (see Compensation); unset: stored in clear, with one warning from the "
    "process that writes them",
    "log_format": "`json`: every command logs one JSON object per line, with the call's ids, tool, pool, "
    "worker and trace id (see Tracing and metrics)",
    "trace_content": "spans carry tool arguments and results (never invocation parameters); "
    "only with tracing on",
    "pool_concurrency": "a worker's `--pool-concurrency` when it gives none: at most that many calls of "
    "its pools at once in the fleet (>= 1); unset: no limit",
    "build_id": "a worker's `--build-id` when it gives none (also for `celery -A workers.app worker`): "
    "its tools' versions name this build (1 to 64 letters, digits, `.`, `_`, `-`); an orchestrator "
    "with the tools' code calls only workers of its own build; unset: versions are digests alone "
    "(see Rolling deploys: tool versions)",
    "broker_queue_type": "a RabbitMQ broker's queues: `quorum` (replicated) or `classic` (see Brokers)",
}

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
AMQP_SCHEMES = ("amqp://", "amqps://", "pyamqp://")
QUEUE_TYPES = ("quorum", "classic")


def is_amqp(broker_url: str) -> bool:
    """Whether the broker at `broker_url` is RabbitMQ (an AMQP 0-9-1 URL, or several `;`-separated)."""
    return broker_url.startswith(AMQP_SCHEMES)


# The smallest value of each numeric setting, and whether it is allowed itself; none has a maximum,
# and none may be infinite or NaN. `visibility_timeout_s` may also be unset (derived), and so may
# `pool_concurrency` (no limit).
_LOWER_BOUNDS: dict[str, tuple[float, bool]] = {
    "default_tool_timeout_s": (0, False),
    "visibility_timeout_s": (0, False),
    "result_expires_s": (1, True),
    "heartbeat_ttl_s": (0.1, True),
    "invocation_heartbeat_s": (0.01, True),
    "liveness_check_interval_s": (0, False),
    "max_fanout": (1, True),
    "max_argument_bytes": (1, True),
    "max_result_bytes": (1, True),
    "inline_result_bytes": (1, True),
    "compensation_retries": (0, True),
    "retry_backoff_s": (0, True),
    "retry_backoff_max_s": (0, True),
    "pool_concurrency": (1, True),
}
_INTEGERS = frozenset(item.name for item in fields(Settings) if "int" in str(item.type))


def _check_redis_url(url: str, name: str = "redis_url") -> None:
    reason = f"it must start with {', '.join((*REDIS_SCHEMES, SENTINEL_SCHEME))}"
    if url.startswith((*REDIS_SCHEMES, SENTINEL_SCHEME)):
        try:
            if is_sentinel(url):
                parse_sentinel_url(url)
            else:
                parse_url(url)  # type: ignore[no-untyped-call]
            return
        except ValueError as exc:
            reason = str(exc)
    raise SettingsError(f"{ENVIRONMENT[name]}={redact_url(url)!r} is not a Redis URL: {reason}")


def _check_artifact_url(url: str) -> None:
    """A store `ArtifactStore.from_url` can open: a path, `file://`, `s3://bucket[/prefix]`, `memory://`."""
    parts = urlsplit(url.strip())
    if parts.scheme in ("", "file", "memory") or (parts.scheme in ("s3", "s3a") and parts.netloc):
        return
    raise SettingsError(
        f"{ENVIRONMENT['artifact_url']}={redact_url(url)!r} is not an artifact store: use a directory "
        "(file:///path, or a path) or s3://bucket/prefix"
    )


def _check_bound(name: str, value: object, minimum: float, inclusive: bool) -> None:
    if value is None and name in ("visibility_timeout_s", "pool_concurrency"):
        return
    integer = name in _INTEGERS
    kind = "an integer" if integer else "a number"
    rule = f"{kind} {'>=' if inclusive else '>'} {minimum:g}"
    numeric = isinstance(value, int) if integer else isinstance(value, int | float)
    if (
        not numeric
        or isinstance(value, bool)
        or not math.isfinite(value)  # type: ignore[arg-type]
        or value < minimum  # type: ignore[operator]
        or (value == minimum and not inclusive)
    ):
        raise SettingsError(f"{ENVIRONMENT[name]} must be {rule}, got {value!r}")


def _parse(name: str, raw: str, kind: Any) -> Any:
    text = str(kind)
    try:
        if "bool" in text:
            lowered = raw.strip().lower()
            if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(raw)
            return lowered in ("1", "true", "yes", "on")
        if "float" in text:
            return float(raw)
        if "int" in text:
            return int(raw)
    except ValueError:
        raise SettingsError(
            f"{ENVIRONMENT[name]}={raw!r} is not a valid {text.replace(' | None', '')}"
        ) from None
    return raw


_SECRET_QUERY_KEYS = frozenset({"password", "pass", "pwd", "secret", "token", "key", "api_key", "apikey"})


def redact_url(url: str) -> str:
    """`url` with its password (in the netloc or the query string) replaced by `***`, for logs; each
    part of a `;`-separated list of URLs (Sentinel's) alike."""
    if "://" not in url:
        return url
    listed = URL_LIST.split(url)
    if len(listed) > 1:
        return ";".join(redact_url(part) for part in listed)
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        credentials, _, host = netloc.rpartition("@")
        user, has_password, _ = credentials.partition(":")
        netloc = f"{user}:***@{host}" if has_password else f"***@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(k.lower() in _SECRET_QUERY_KEYS for k, _ in pairs):
            query = urlencode(
                [(k, "***" if k.lower() in _SECRET_QUERY_KEYS else v) for k, v in pairs], safe="*"
            )
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _redact(value: Any) -> Any:
    return redact_url(value) if isinstance(value, str) else value
