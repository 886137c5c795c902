"""`toolfleet flower`: Flower, the Celery monitor, on toolfleet's broker and result backend."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import threading
import time
from typing import Any

from orchestrator.cli.commands._command import add_command
from workers.settings import Settings
from workers.telemetry.logs import notice

log = logging.getLogger(__name__)

HELP = "run Flower, the web monitor of every tool call and compensation"
DESCRIPTION = (
    "Run Flower for toolfleet's Celery app (broker TOOLFLEET_BROKER_URL, result backend "
    "TOOLFLEET_RESULT_BACKEND). Authentication: --basic-auth or the FLOWER_BASIC_AUTH environment "
    "variable (preferred: it keeps the password out of the process list); Flower's other "
    "FLOWER_* variables (e.g. FLOWER_URL_PREFIX, FLOWER_AUTH with FLOWER_AUTH_PROVIDER for OAuth) "
    "are honoured too. Listening on anything but a loopback address requires authentication."
)

BASIC_AUTH_ENV = "FLOWER_BASIC_AUTH"
UNAUTHENTICATED_API_ENV = "FLOWER_UNAUTHENTICATED_API"
OAUTH_ENV = "FLOWER_AUTH"

# Once Flower has stopped serving (SIGTERM, Ctrl-C), the process ends within this time even if
# Flower's inspection threads are still waiting on the broker: a container runtime expects a
# prompt exit, and interpreter shutdown would wait for those threads.
EXIT_GRACE_S = 1.0


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "flower", HELP, DESCRIPTION)
    parser.add_argument("--port", type=int, default=5555, help="port to listen on (default 5555)")
    parser.add_argument(
        "--address",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface, with authentication)",
    )
    parser.add_argument(
        "--basic-auth",
        metavar="USER:PASSWORD[,USER:PASSWORD]",
        default=None,
        help="HTTP basic authentication of the web UI and the REST API (default: $FLOWER_BASIC_AUTH); "
        "a password may not contain a comma",
    )
    parser.add_argument(
        "--unauthenticated-api",
        action="store_true",
        help="serve Flower's REST API without authentication when no authentication is configured "
        "(sets FLOWER_UNAUTHENTICATED_API=true); only on a trusted network",
    )
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.server.settings import is_loopback  # here: the server's package imports FastAPI

    if not 0 < args.port < 65536:
        return _fail(f"--port must be between 1 and 65535, got {args.port}")
    credentials = args.basic_auth if args.basic_auth is not None else os.environ.get(BASIC_AUTH_ENV, "")
    users = _users(credentials)
    if users is None:
        source = "--basic-auth" if args.basic_auth is not None else BASIC_AUTH_ENV
        return _fail(f"{source} must be USER:PASSWORD (several separated by commas), each part non-empty")
    authenticated = bool(users) or bool(os.environ.get(OAUTH_ENV))
    if not authenticated and not is_loopback(args.address):
        return _fail(
            f"refusing to serve Flower on {args.address or 'every interface'} without authentication: "
            f"set {BASIC_AUTH_ENV}=USER:PASSWORD (or --basic-auth), or listen on 127.0.0.1"
        )

    # Flower reads its options from FLOWER_* variables too: passing the credentials that way keeps
    # them out of any argument list, log line or banner.
    if users:
        os.environ[BASIC_AUTH_ENV] = credentials
    if args.unauthenticated_api:
        os.environ[UNAUTHENTICATED_API_ENV] = "true"

    from workers.app import make_app

    app = make_app(settings)
    # Flower inspects queues through the broker URL's scheme (redis://, amqp://); toolfleet's faster
    # publishing transport would hide it, and Flower publishes nothing that needs it.
    app.conf.broker_transport = None
    redacted = settings.redacted()
    auth = f"basic auth for {', '.join(users)}" if users else ("OAuth" if authenticated else "no auth")
    notice(
        log,
        f"toolfleet flower: http://{args.address or '0.0.0.0'}:{args.port} ({auth}); "
        f"broker {redacted['broker_url']}, result backend {redacted['result_backend']}",
    )
    status = 1
    try:
        code = app.start(["flower", f"--port={args.port}", f"--address={args.address}"])
        status = int(code or 0)
    except OSError as exc:
        status = _fail(f"cannot listen on {args.address}:{args.port}: {exc.strerror or exc}")
    except SystemExit as exc:  # Flower's SIGTERM handler, outside its serving loop
        status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    finally:
        _exit_within(EXIT_GRACE_S, status)
    return status


def _exit_within(grace_s: float, status: int) -> None:
    """End the process `grace_s` from now with `status`, whatever threads are still running."""

    def leave() -> None:
        time.sleep(grace_s)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(status)

    threading.Thread(target=leave, name="toolfleet-flower-exit", daemon=True).start()


def _users(credentials: str) -> list[str] | None:
    """The user names of `USER:PASSWORD[,USER:PASSWORD]`, or None when it is malformed."""
    if not credentials.strip():
        return []
    users = []
    for pair in credentials.split(","):
        user, colon, password = pair.partition(":")
        if not colon or not user.strip() or not password:
            return None
        users.append(user.strip())
    return users


def _fail(message: str) -> int:
    notice(log, f"toolfleet flower: {message}", logging.ERROR)
    return 2
