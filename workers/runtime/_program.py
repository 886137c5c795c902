"""The worker program of toolfleet's apps (`app.Worker`): Celery's, telling only what the worker serves
and, when the process logs JSON, writing nothing that is not a JSON line.

Celery's banner lists every task of the app; an app holds the tools of every pool of its modules, so
a worker of one pool listed the others' tools too. Here the banner's `[tasks]` are the tasks routed
to the queues the worker consumes: the calls (`tool.<name>`) and compensations (`compensate.<name>`)
of the tools of its pools. Nothing else is listed: Celery's built-in tasks are unregistered from the
app (`workers.runtime.tasks`) and Celery needs none listed, the list being for the reader only.

With JSON logs (`workers.telemetry.logs.configure_logging("json", ...)`):
- the banner is one record (logger of this module) carrying its facts as fields: `hostname`,
  `pools`, `queues`, `pool_kind`, `concurrency`, `tools`, `tasks`, `task_events`, `transport`,
  `results`, `celery_version`;
- Celery leaves logging as configured (`setup_logging` answered): its loggers, `celery.task` and the
  prefork children's included, write through the root logger's JSON handler, at the worker's level;
- standard output and error are still redirected to logging when `worker_redirect_stdouts` asks
  (Celery skips that once logging is configured for it), in the prefork children too;
- the line Celery writes past logging when a signal stops the worker ("worker: Warm shutdown") is
  a record instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any

import celery
from celery import signals
from celery.apps.worker import Worker as CeleryWorker
from celery.apps.worker import (
    install_worker_int_handler,
    install_worker_term_handler,
    install_worker_term_hard_handler,
)
from celery.utils.log import get_multiprocessing_logger

from workers.protocol import tool_of_task
from workers.telemetry.logs import FIELDS, JsonFormatter, json_logging

__all__ = ["Worker", "served_tasks"]

log = logging.getLogger(__name__)

POOL_KINDS = {"thread": "threads"}  # Celery's name of a pool kind -> `toolfleet worker --kind`'s


def served_tasks(tasks: Any, queues: Any) -> list[str]:
    """The names of `tasks` (an app's task registry) routed to one of `queues`, sorted."""
    consumed = set(queues)
    return sorted(name for name, task in list(tasks.items()) if getattr(task, "queue", None) in consumed)


class Worker(CeleryWorker):  # type: ignore[misc]
    """Celery's worker program, its banner listing only the tasks of the queues it consumes; JSON
    throughout when the process logs JSON (see the module's doc)."""

    def on_init_blueprint(self) -> None:
        # The queues given (`-Q`), before the build queues are added to them at start-up.
        self.pools = sorted(self.app.amqp.queues.consume_from)
        self.json_logs = json_logging()
        super().on_init_blueprint()

    def setup_logging(self, colorize: bool | None = None) -> Any:
        if not self.json_logs:
            return super().setup_logging(colorize)
        # Answering `setup_logging` tells Celery the logging is configured: it adds no handler of its
        # own (the parent's, inherited by the prefork children, being JSON already).
        signals.setup_logging.connect(_keep_json_logging, weak=False)
        try:
            return super().setup_logging(colorize)
        finally:
            signals.setup_logging.disconnect(_keep_json_logging)

    def on_start(self) -> None:
        super().on_start()
        if self.json_logs and self.redirect_stdouts:
            # Celery redirects only when it configured logging itself; the prefork children follow.
            self.app.log.redirect_stdouts(self.redirect_stdouts_level)

    def tasklist(self, include_builtins: bool = True, sep: str = "\n", int_: str = "celery.") -> str:
        # Celery's built-in tasks are not in the app (`workers.runtime.tasks`): nothing to leave out.
        names = served_tasks(self.app.tasks, self.app.amqp.queues.consume_from)
        return sep.join(f"  . {name}" for name in names)

    def emit_banner(self) -> None:
        if not self.json_logs:
            super().emit_banner()
            return
        queues = sorted(self.app.amqp.queues.consume_from)
        tasks = served_tasks(self.app.tasks, queues)
        tools = [tool for name in tasks if (tool := tool_of_task(name)) is not None]
        pool_cls = self.pool_cls if isinstance(self.pool_cls, str) else self.pool_cls.__module__
        kind = pool_cls.rsplit(".", 1)[-1]
        facts = {
            "hostname": self.hostname,
            "pools": self.pools,
            "queues": queues,
            "pool_kind": POOL_KINDS.get(kind, kind),
            "concurrency": self.concurrency,
            "tools": tools,
            "tasks": tasks,
            "task_events": bool(self.task_events),
            "transport": self.app.connection().as_uri(),  # its password masked
            "results": self.app.backend.as_uri(),
            "celery_version": celery.__version__,
        }
        # Written whatever the log level, as Celery prints its banner.
        log.handle(
            log.makeRecord(
                log.name,
                logging.INFO,
                __file__,
                0,
                "worker %s starting: pools %s, %s x%s, tools %s",
                (self.hostname, ",".join(self.pools), facts["pool_kind"], self.concurrency, ",".join(tools)),
                None,
                extra={FIELDS: facts},
            )
        )

    def install_platform_tweaks(self, worker: Any) -> None:
        super().install_platform_tweaks(worker)
        if not self.json_logs:
            return
        # Celery's warm shutdown handlers (SIGTERM; SIGINT, as Ctrl-C), told not to write their line
        # past logging: `_say_shutdown` writes it as a record. A cold shutdown (SIGQUIT, a second
        # Ctrl-C) still writes Celery's own lines: they come from deeper inside Celery.
        install_worker_term_handler(worker, verbose=False)
        install_worker_int_handler(worker, verbose=False, callback=_on_first_interrupt)
        signals.worker_shutting_down.connect(_say_shutdown, weak=False, dispatch_uid=__name__)


def _keep_json_logging(loglevel: Any = None, **_: Any) -> None:
    """What Celery sets up besides its handlers: the worker's level on the root logger, and the
    multiprocessing logger at ERROR, its records going to the root logger's handler."""
    if loglevel:
        logging.getLogger().setLevel(loglevel)
    multiprocessing = get_multiprocessing_logger()
    if multiprocessing is not None:
        multiprocessing.setLevel(logging.ERROR)
        multiprocessing.propagate = True


def _on_first_interrupt(worker: Any) -> None:
    """Celery's first Ctrl-C: warm shutdown now, cold at the next one (without its line on stdout)."""
    install_worker_term_hard_handler(worker, sig="SIGINT", verbose=False)


def _say_shutdown(sender: Any = None, sig: str = "", how: str = "", **_: Any) -> None:
    """Celery's "worker: Warm shutdown (MainProcess)" as a record. It runs in the signal handler:
    written in one `os.write`, as Celery writes its line, never through a buffered stream the
    interrupted code may be writing to."""
    record = log.makeRecord(
        log.name,
        logging.INFO,
        __file__,
        0,
        "worker %s: %s shutdown (%s)",
        (sender, how, sig),
        None,
        extra={FIELDS: {"hostname": sender, "signal": sig, "shutdown": how.lower()}},
    )
    line = JsonFormatter().format(record) + "\n"
    # As with Celery's own line, losing it must not stop the shutdown.
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.write(sys.__stderr__.fileno(), line.encode("utf-8"))  # type: ignore[union-attr]
