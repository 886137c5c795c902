"""`toolfleet worker-health`: whether this host's worker is live, for a container's health check.

A worker publishes its entry in the live catalog when it is ready to take calls and refreshes it
every third of `TOOLFLEET_HEARTBEAT_TTL_S` from its own process; stopped (SIGSTOP), wedged or killed,
it stops beating and its entry expires. This command reads the catalog's index and this host's
entries (two Redis commands, no round trip through the broker to any worker) and answers with its
exit status: 0 when a worker of this host beats, 1 when none does, 2 when Redis cannot be read.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from typing import Any

import redis

from orchestrator.cli.commands._command import SETUP_ERROR_STATUS, add_command
from orchestrator.cli.commands.tools import scrubbed
from workers.redis_client import connect as connect_redis
from workers.runtime.catalog import Catalog
from workers.settings import ENVIRONMENT, Settings

HELP = "exit 0 when this host's worker is live in the catalog: a container's health check"
DESCRIPTION = (
    "Exit 0 when a worker of this host (a worker named NAME@HOST, as `toolfleet worker` names it, HOST "
    "being this host's name) or the worker named --hostname is in the live catalog in Redis "
    "(TOOLFLEET_REDIS_URL) with a heartbeat that has not expired; exit 1 when none is: it stopped, "
    "died or hangs (its heartbeat expires TOOLFLEET_HEARTBEAT_TTL_S after its last beat), or has not "
    "started yet. Exit 2 when Redis cannot be read. Run it where the worker runs: Docker's HEALTHCHECK, "
    "compose's healthcheck, a Kubernetes exec probe."
)
UNHEALTHY_STATUS = 1
_CONNECT_TIMEOUT_S = 2.0
_READ_TIMEOUT_S = 3.0


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "worker-health", HELP, DESCRIPTION)
    parser.add_argument(
        "--hostname",
        default=None,
        metavar="NAME",
        help="the worker's name, as `toolfleet worker --hostname` gave it (default: any worker of this "
        "host, NAME@" + "<this host's name>)",
    )
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    host = socket.gethostname()
    wanted: str | None = args.hostname
    url = settings.redacted()["redis_url"]
    accept = (lambda name: name == wanted) if wanted else (lambda name: name.rpartition("@")[2] == host)
    try:
        client = connect_redis(
            settings.redis_url, socket_connect_timeout=_CONNECT_TIMEOUT_S, socket_timeout=_READ_TIMEOUT_S
        )
        try:
            beating = Catalog(client).beating(accept)
        finally:
            client.close()
    except (redis.RedisError, OSError) as exc:
        print(
            f"toolfleet worker-health: cannot read the catalog from Redis at {url} "
            f"({ENVIRONMENT['redis_url']}): {scrubbed(str(exc) or type(exc).__name__, settings.redis_url)}",
            file=sys.stderr,
        )
        return SETUP_ERROR_STATUS
    whom = f"worker {wanted!r}" if wanted else f"worker of host {host!r}"
    if not beating:
        print(
            f"toolfleet worker-health: no live {whom} in the catalog at {url}: it is not running, has "
            f"not started yet, or has not beaten for {ENVIRONMENT['heartbeat_ttl_s']} "
            f"({settings.heartbeat_ttl_s:g} s)",
            file=sys.stderr,
        )
        return UNHEALTHY_STATUS
    now = time.time()
    for entry, expires_at in sorted(beating, key=lambda found: found[0].hostname):
        print(
            f"{entry.hostname}: live (pools {','.join(entry.pools)}, pid {entry.pid}; "
            f"its heartbeat expires in {max(expires_at - now, 0.0):.1f} s)"
        )
    return 0
