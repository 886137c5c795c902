"""The Celery app of a worker pool, configured for tool calls: JSON only, explicit reliability.

`celery -A workers.app worker -Q POOL` serves the tools of the modules named in `TOOLFLEET_TOOLS`
(comma-separated), exactly as `toolfleet worker --pool POOL --tools MODULE` does.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import weakref
from collections.abc import Iterable
from typing import Any

from celery import Celery
from celery.signals import worker_init

from workers.errors import ToolfleetError, ToolModuleError
from workers.priorities import MAX_PRIORITY, PRIORITY_STEPS
from workers.redis_client import celery_url, is_sentinel
from workers.settings import Settings, is_amqp
from workers.telemetry.logs import configure_logging
from workers.tools import check_compensations
from workers.tools.registry import ToolRegistry

__all__ = [
    "make_app",
    "make_publisher",
    "registry_from_modules",
    "result_retries",
    "visibility_timeout_s",
]


def _broker_config(settings: Settings) -> dict[str, Any]:
    """What the broker's kind asks for: kombu's Redis transport (a Sentinel group's master named), or
    RabbitMQ's queues as configured.

    On RabbitMQ each pool's queue is declared `quorum` (replicated over the cluster's nodes, the kind
    RabbitMQ recommends where a queue must survive a node) unless `TOOLFLEET_BROKER_QUEUE_TYPE=classic`.
    Quorum queues refuse `x-max-priority` (classic queues order by it) and global QoS: Celery sees the
    quorum queues and sets each consumer's prefetch instead. Their exchanges are `topic`, so a delayed
    retry travels through RabbitMQ's native delayed delivery rather than waiting in a worker's memory.
    Every publish waits for the broker's confirm, so a call the broker did not take is an error.
    """
    if settings.broker_url.startswith(("redis://", "rediss://")):
        return {}  # kombu's Redis transport, as Celery configures it
    if is_sentinel(settings.broker_url):
        return {  # kombu's Sentinel transport (the URL's scheme), told the group's master name
            "broker_transport_options": {
                "priority_steps": list(PRIORITY_STEPS),
                **celery_url(settings.broker_url)[1],
            },
        }
    if not is_amqp(settings.broker_url):
        return {}
    quorum = settings.broker_queue_type == "quorum"
    return {
        "task_default_queue_type": settings.broker_queue_type,
        "task_create_missing_queue_type": settings.broker_queue_type,
        "task_default_exchange_type": "topic" if quorum else "direct",
        "task_create_missing_queue_exchange_type": "topic" if quorum else None,
        "task_queue_max_priority": None if quorum else MAX_PRIORITY,
        "broker_transport_options": {"confirm_publish": True},
    }


def _base_config(settings: Settings) -> dict[str, Any]:
    return {
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "event_serializer": "json",
        "task_default_queue": "default",
        "task_create_missing_queues": True,
        "task_send_sent_event": settings.send_sent_events and settings.task_events,
        "broker_connection_retry_on_startup": True,
        "broker_connection_max_retries": 3,
        "broker_connection_timeout": 4,
        "enable_utc": True,
        # Priorities (`workers.priorities`): a classic RabbitMQ queue is declared with `x-max-priority`;
        # the Redis transport keeps one list per priority.
        "task_queue_max_priority": MAX_PRIORITY,
        "broker_transport_options": {"priority_steps": list(PRIORITY_STEPS)},
        **_broker_config(settings),
    }


def visibility_timeout_s(settings: Settings, registry: ToolRegistry | None) -> float:
    """How long the Redis broker waits before redelivering an unacknowledged message.

    It must exceed the longest queue wait plus run time, or a long tool would be delivered to a
    second worker while the first still runs; a call's deadline bounds both, so the longest deadline
    (with its retries) plus a margin is enough.
    """
    if settings.visibility_timeout_s is not None:
        return settings.visibility_timeout_s
    longest = settings.default_tool_timeout_s
    for definition in registry or ():
        timeout = definition.timeout or settings.default_tool_timeout_s
        longest = max(longest, timeout * (1 + definition.options.retries))
    return longest * 2 + 30


RESULT_RETRY_BASE_MS = 20
RESULT_RETRY_MAX_MS = 500


def result_retries(settings: Settings, registry: ToolRegistry | None) -> int:
    """How many times a worker retries storing a result while Redis is unreachable.

    Enough to span the broker's visibility timeout (no call outlives it) at the mean interval
    between attempts (half the longest, jitter being uniform), and never fewer than 20.
    """
    mean_interval_s = RESULT_RETRY_MAX_MS / 2000
    return max(20, math.ceil(visibility_timeout_s(settings, registry) / mean_interval_s))


def make_app(settings: Settings, registry: ToolRegistry | None = None, *, name: str = "toolfleet") -> Celery:
    """The worker-side app: result backend on, task events on (unless `TOOLFLEET_TASK_EVENTS=false`: no
    Flower then), one task per tool of `registry`. Its worker program (`app.Worker`,
    `workers.runtime._program`) lists in its banner only the tools of the pools it serves, and writes
    nothing but JSON lines when the process logs JSON."""
    backend_url, backend_options = celery_url(settings.result_backend)
    app = Celery(name, broker=celery_url(settings.broker_url)[0], backend=backend_url, set_as_current=False)
    if settings.result_backend.startswith(("redis://", "rediss://")):
        from workers.runtime._backend import ResultBackend

        app.backend_cls = ResultBackend  # Celery's Redis backend, one round trip per stored state
    elif is_sentinel(settings.result_backend):
        from workers.runtime._backend import SentinelResultBackend

        app.backend_cls = SentinelResultBackend
    base = _base_config(settings)
    app.conf.update(
        base,
        # A result written while Redis is down waits for it, retried every half second at most, so
        # it is stored within a fraction of a second of Redis answering again (Celery's default
        # backoff grows to 10 s, which let results reach the backend seconds after their deadline).
        result_backend_always_retry=True,
        result_backend_base_sleep_between_retries_ms=RESULT_RETRY_BASE_MS,
        result_backend_max_sleep_between_retries_ms=RESULT_RETRY_MAX_MS,
        result_backend_max_retries=result_retries(settings, registry),
        result_expires=settings.result_expires_s,
        task_track_started=True,
        worker_send_task_events=settings.task_events,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        # Reconnects within half a second of the broker answering again, and announces it.
        worker_consumer="workers.runtime._consumer:Consumer",
        # A worker outlives broker outages: it reconnects for as long as it takes (the publisher, in
        # the orchestrator, keeps the short limit so calls fail fast instead).
        broker_connection_max_retries=None,
        broker_transport_options={
            **base["broker_transport_options"],
            "visibility_timeout": visibility_timeout_s(settings, registry),
            # Look for messages past their visibility timeout every 10 s (kombu scans only on
            # every tenth 10 s tick by default: up to 100 s late).
            "unacked_restore_interval": 10,
            "unacked_restore_throttle": 1,
        },
        result_backend_transport_options={"retry_policy": {"timeout": 5.0}, **backend_options},
    )
    from workers.runtime._program import Worker

    app.Worker = app.subclass_with_self(Worker)  # what `celery worker` and `worker_main` start
    _worker_apps.add(app)
    if registry is not None:
        from workers.runtime.tasks import register_tasks

        register_tasks(app, registry, settings)
    return app


CELERY_TRACE_LOGGER = "celery.app.trace"
_worker_apps: weakref.WeakSet[Celery] = weakref.WeakSet()


def _keep_results_out_of_logs(sender: Any = None, **_: Any) -> None:
    """Keep Celery's per-task lines, which carry the task's return value, out of a worker's log.

    Celery logs "Task ... succeeded in ...: <result>" at INFO (up to 1024 characters of it), and a
    result holds whatever the tool read. Once a worker of an app of `make_app` starts (never merely
    where such an app is built, as in Flower), Celery's trace logger keeps warnings and errors only;
    each call's line is toolfleet's own (`workers.calls.runner.log_call`): tool, ids, outcome,
    duration, and the content at DEBUG only, cut short.
    """
    if getattr(sender, "app", None) in _worker_apps:
        logging.getLogger(CELERY_TRACE_LOGGER).setLevel(logging.WARNING)


worker_init.connect(_keep_results_out_of_logs, weak=False)


def make_publisher(settings: Settings) -> Celery:
    """The orchestrator-side app: publishes only, with no result backend.

    Results are read by toolfleet's own collector; a backend here would make Celery subscribe to
    every task's channel too and leave unread messages piling up in Redis.
    """
    app = Celery(
        "toolfleet-publisher",
        broker=celery_url(settings.broker_url)[0],
        backend="disabled://",
        set_as_current=False,
    )
    app.conf.update(_base_config(settings), task_ignore_result=True)
    return app


def registry_from_modules(modules: Iterable[str]) -> ToolRegistry:
    """A registry of every tool of the named modules (`package.module` or `package.module:attribute`).

    Every compensation is checked first: a worker never serves a tool while ignoring its
    compensation, however it was started. A module that cannot be loaded raises `ToolModuleError`
    naming it; a misnamed or misshapen compensation raises `ToolDefinitionError`.
    """
    registry = ToolRegistry()
    for spec in (s.strip() for s in modules):
        if spec:
            source = _tool_source(spec)
            check_compensations(source)
            registry.add(source)
    return registry


def _tool_source(spec: str) -> object:
    """What `module` or `module:attribute` names, imported once, or `ToolModuleError` saying why not."""
    module_name, colon, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ToolModuleError(
                f"--tools {spec}: no module named {exc.name!r} (looked in {os.getcwd()} and on the "
                "Python path)"
            ) from None
        raise ToolModuleError(f"--tools {spec}: importing {module_name} failed: {exc}") from exc
    except Exception as exc:  # the module's own code failed: say where, in one line
        raise ToolModuleError(
            f"--tools {spec}: importing {module_name} failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not colon:
        return module
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ToolModuleError(
            f"--tools {spec}: module {module_name} has no attribute {attribute!r}"
        ) from None


def _app_from_environment() -> Celery:
    """The app of `celery -A workers.app`: settings and tools from the environment, and the log lines
    `toolfleet worker` writes (`TOOLFLEET_LOG_FORMAT`). A setting or a tool module it cannot use ends
    the command with one line saying why, not Celery's traceback of this module."""
    try:
        settings = Settings.from_env()
        configure_logging(settings.log_format, logging.WARNING)
        return make_app(settings, registry_from_modules(settings.tools.split(",")))
    except ToolfleetError as exc:
        raise SystemExit(f"celery -A workers.app: {exc}") from None


def __getattr__(name: str) -> Any:
    # `celery -A workers.app` looks up `app`; build it only then, so importing this module is cheap.
    if name in ("app", "celery"):
        value = _app_from_environment()
        globals()["app"] = globals()["celery"] = value
        return value
    raise AttributeError(name)
