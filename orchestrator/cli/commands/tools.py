"""`toolfleet tools`: the live catalog — which workers are up, and the tools they serve: how each behaves
(approval, heartbeat, idempotence, compensation) and at which versions."""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from collections.abc import Sequence
from typing import Any, TextIO
from urllib.parse import urlsplit

import redis

from orchestrator.cli.commands._command import add_command
from workers.redis_client import connect as connect_redis
from workers.runtime.builds import RollingPool, rolling_pools
from workers.runtime.catalog import (
    Catalog,
    CatalogTool,
    MixedPool,
    WorkerEntry,
    mixed_pools,
    newest_first,
    served_text,
)
from workers.settings import ENVIRONMENT, Settings

HELP = "list the live workers and the tools they serve"
DESCRIPTION = (
    "Show the live catalog in Redis (TOOLFLEET_REDIS_URL): every worker whose heartbeat "
    "has not expired, with its pools, pool kind and concurrency, and every tool those workers serve: "
    "whether a person approves its calls first, its heartbeat timeout, whether it is idempotent, the "
    "compensation that undoes it, and its version (a digest of its schema and options, +build id); "
    "'?' marks what a worker of an earlier toolfleet did not advertise. "
    "Pools whose workers serve different tools are flagged: a call lands on any worker of its pool; "
    "so are pools whose workers serve different versions of a tool (a rolling deploy), where each call "
    "goes to a worker of the version its model was given. "
    "Exits 2 when Redis cannot be reached."
)

_DESCRIPTION_WIDTH = 72
TOOL_COLUMNS = (
    *("NAME", "POOL", "TIMEOUT", "APPROVAL", "HEARTBEAT", "IDEMPOTENT", "COMPENSATION", "WORKERS"),
    *("VERSION", "DESCRIPTION"),
)
UNKNOWN = "?"  # a fact the tool's worker did not advertise


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "tools", HELP, DESCRIPTION)
    parser.add_argument(
        "--pool", default=None, help="only these pools (comma-separated): their workers and their tools"
    )
    parser.add_argument("--json", action="store_true", help="print the catalog as JSON")
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    pools = _pools(args.pool)
    url = str(settings.redacted()["redis_url"])
    try:
        workers = _read_workers(settings.redis_url)
    except (redis.RedisError, OSError, ValueError) as exc:
        reason = scrubbed(str(exc) or type(exc).__name__, settings.redis_url)
        print(
            f"toolfleet tools: cannot read the catalog from Redis at {url} "
            f"({ENVIRONMENT['redis_url']}): {reason}",
            file=sys.stderr,
        )
        return 2
    if pools is not None:
        workers = [w for w in workers if pools.intersection(w.pools)]
    tools = _tools(workers, pools)
    mixed = [m for m in mixed_pools(workers) if pools is None or m.pool in pools]
    rolling = [r for r in rolling_pools(workers) if pools is None or r.pool in pools]
    if args.json:
        json.dump(_as_json(url, pools, workers, tools, mixed), sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        _print_text(sys.stdout, url, pools, workers, tools, mixed, rolling)
    return 0


def _pools(raw: str | None) -> set[str] | None:
    if raw is None:
        return None
    pools = {p.strip() for p in raw.split(",") if p.strip()}
    return pools or None


def _read_workers(redis_url: str) -> list[WorkerEntry]:
    client = connect_redis(redis_url, socket_connect_timeout=2, socket_timeout=5)
    try:
        return Catalog(client).workers()
    finally:
        client.close()


def scrubbed(text: str, redis_url: str) -> str:
    """`text` without the password of `redis_url`: error texts should not carry it, but make sure they
    never do."""
    try:
        password = urlsplit(redis_url).password
    except ValueError:
        password = None
    return text.replace(password, "***") if password else text


class _Served:
    """One version of a tool as the live workers serve it: the newest such worker's definition, and who
    serves it (by hostname)."""

    def __init__(self, tool: CatalogTool) -> None:
        self.tool = tool
        self.workers: list[str] = []


def _tools(workers: Sequence[WorkerEntry], pools: set[str] | None) -> list[_Served]:
    """Each tool at each version its live workers serve; a tool's newest version (the one an
    orchestrator reading the catalog gives its model) first."""
    served: dict[tuple[str, str | None], _Served] = {}
    for worker in newest_first(workers):
        for tool in worker.tools:
            if pools is not None and tool.options.pool not in pools:
                continue
            entry = served.setdefault((tool.specification.name, tool.version), _Served(tool))
            entry.workers.append(worker.hostname)
    for entry in served.values():
        entry.workers.sort()
    order = {key: index for index, key in enumerate(served)}
    return sorted(
        served.values(),
        key=lambda s: (
            s.tool.options.pool,
            s.tool.specification.name,
            order[(s.tool.specification.name, s.tool.version)],
        ),
    )


def _by_name(tools: Sequence[_Served]) -> dict[str, list[_Served]]:
    grouped: dict[str, list[_Served]] = {}
    for served in tools:
        grouped.setdefault(served.tool.specification.name, []).append(served)
    return grouped


def _as_json(
    url: str,
    pools: set[str] | None,
    workers: Sequence[WorkerEntry],
    tools: Sequence[_Served],
    mixed: Sequence[MixedPool],
) -> dict[str, Any]:
    return {
        "redis_url": url,
        "pools": sorted(pools) if pools is not None else None,
        "workers": [
            {
                "hostname": w.hostname,
                "pools": w.pools,
                "pool_kind": w.pool_kind,
                "concurrency": w.concurrency,
                "pid": w.pid,
                "started_at": w.started_at,
                "tools": sorted(t.specification.name for t in w.tools),
                "build_id": w.build_id,
                "versions": {t.specification.name: t.version for t in w.tools},
            }
            for w in workers
        ],
        "tools": [
            {
                "name": s.tool.specification.name,
                "pool": s.tool.options.pool,
                "timeout": s.tool.options.timeout,
                "retries": s.tool.options.retries,
                **_behaviour(s.tool),
                "return_behavior": s.tool.options.return_behavior.value,
                "description": s.tool.specification.description,
                "parameters": s.tool.specification.parameters,
                "workers": sorted(w for v in versions for w in v.workers),
                "version": s.tool.version,
                "versions": [{"version": v.tool.version, "workers": v.workers} for v in versions],
            }
            for s, versions in ((versions[0], versions) for versions in _by_name(tools).values())
        ],
        "mixed_pools": [
            {"pool": m.pool, "workers": {name: list(served) for name, served in m.served.items()}}
            for m in mixed
        ],
    }


def _print_text(
    out: TextIO,
    url: str,
    pools: set[str] | None,
    workers: Sequence[WorkerEntry],
    tools: Sequence[_Served],
    mixed: Sequence[MixedPool] = (),
    rolling: Sequence[RollingPool] = (),
) -> None:
    scope = f" for pool(s) {', '.join(sorted(pools))}" if pools is not None else ""
    if not workers:
        out.write(f"No live workers{scope} in the catalog at {url}.\n")
        pool = ",".join(sorted(pools)) if pools is not None else "POOL"
        out.write(f"Start one with: toolfleet worker --pool {pool} --tools MODULE[,MODULE]\n")
        if pools is None:
            out.write("  e.g. toolfleet worker --pool io --tools workers.examples.weather\n")
        out.write(f"  (with the same {ENVIRONMENT['redis_url']}: workers publish the catalog there).\n")
        return
    out.write(f"Catalog at {url}{scope}\n\n")
    out.write(f"Live workers ({len(workers)}):\n")
    builds = any(w.build_id for w in workers)  # a column only when some worker names its build
    _table(
        out,
        ("HOSTNAME", "POOLS", "KIND", "CONCURRENCY", *(("BUILD",) if builds else ())),
        [
            (
                w.hostname,
                ",".join(w.pools),
                w.pool_kind,
                str(w.concurrency),
                *((w.build_id or "-",) if builds else ()),
            )
            for w in workers
        ],
    )
    out.write(f"\nTools ({len(_by_name(tools))}):\n")
    if not tools:
        out.write("  (none: these workers serve no tool of the selected pools)\n")
        _print_mixed(out, mixed)
        return
    pool_sizes = {m.pool: len(m.served) for m in mixed}
    for rolled in rolling:  # a version served by some of its workers: `1 of 2`
        pool_sizes.setdefault(rolled.pool, sum(1 for w in workers if rolled.pool in w.pools))
    _table(
        out,
        TOOL_COLUMNS,
        [
            (
                s.tool.specification.name,
                s.tool.options.pool,
                _timeout(s.tool.options.timeout),
                *_behaviour_cells(s.tool),
                _workers_cell(len(s.workers), pool_sizes.get(s.tool.options.pool)),
                s.tool.version or "-",
                _short(s.tool.specification.description),
            )
            for s in tools
        ],
    )
    if any(s.tool.options.timeout is None for s in tools):
        out.write(
            f"\ntimeout 'default': the orchestrator's {ENVIRONMENT['default_tool_timeout_s']} applies.\n"
        )
    if any(s.tool.unknown for s in tools):
        out.write(f"\n{UNKNOWN}: not in the catalog entry of the worker (an earlier toolfleet's).\n")
    _print_mixed(out, mixed)
    _print_rolling(out, rolling)


def _print_rolling(out: TextIO, rolling: Sequence[RollingPool]) -> None:
    if not rolling:
        return
    out.write(
        f"\nRolling pools ({len(rolling)}): their workers serve different versions of some tools; each "
        "call goes to a worker of the version its model was given (newest first).\n"
    )
    for pool in rolling:
        out.write(f"  pool '{pool.pool}':\n")
        for name, versions in pool.versions.items():
            for version, hosts in versions.items():
                out.write(f"    {name} {version}: {', '.join(repr(h) for h in hosts)}\n")


def _workers_cell(serving: int, pool_workers: int | None) -> str:
    """How many workers serve a tool; `1 of 2` when its pool has workers that do not."""
    if pool_workers is None or serving == pool_workers:
        return str(serving)
    return f"{serving} of {pool_workers}"


def _print_mixed(out: TextIO, mixed: Sequence[MixedPool]) -> None:
    if not mixed:
        return
    out.write(
        f"\nMixed pools ({len(mixed)}): their workers serve different tools, and a call lands on any "
        "worker of its pool: on one that lacks the tool it fails (NotRegistered).\n"
    )
    for pool in mixed:
        out.write(f"  pool '{pool.pool}':\n")
        for name, served in pool.served.items():
            out.write(f"    '{name}' serves {served_text(served)}\n")
    out.write("  Serve the same --tools on every worker of a pool.\n")


def _table(out: TextIO, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns padded to their widest cell as a terminal shows it (a wide character takes two
    columns, a combining one none); the last column is left unpadded."""
    widths = [max(display_width(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [
            cell + " " * (width - display_width(cell)) for cell, width in zip(row[:-1], widths, strict=False)
        ]
        out.write("  " + "  ".join([*cells, row[-1]]).rstrip() + "\n")


def display_width(text: str) -> int:
    """How many terminal columns `text` takes."""
    return sum(
        0 if unicodedata.combining(char) else 2 if unicodedata.east_asian_width(char) in "WF" else 1
        for char in text
    )


def _behaviour(tool: CatalogTool) -> dict[str, Any]:
    """What `--json` says of how a tool behaves; a fact its worker did not advertise is null, and named
    in `unknown`."""
    options = tool.options
    facts: dict[str, Any] = {
        "requires_approval": options.requires_approval,
        "heartbeat_timeout_s": options.heartbeat_timeout_s,
        "idempotent": options.idempotent,
        "compensable": tool.compensable,
        "compensation": tool.compensation,
    }
    return {
        **{name: None if name in tool.unknown else value for name, value in facts.items()},
        "unknown": sorted(tool.unknown),
    }


def _behaviour_cells(tool: CatalogTool) -> tuple[str, str, str, str]:
    """APPROVAL, HEARTBEAT, IDEMPOTENT and COMPENSATION: `?` where its worker did not say."""
    options, unknown = tool.options, tool.unknown
    if "compensable" in unknown:
        compensation = UNKNOWN
    elif not tool.compensable:
        compensation = "-"
    else:  # compensable; its name is unknown when an earlier worker advertised it
        compensation = tool.compensation or "yes"
    return (
        UNKNOWN if "requires_approval" in unknown else _yes_no(options.requires_approval),
        UNKNOWN if "heartbeat_timeout_s" in unknown else _seconds(options.heartbeat_timeout_s, "-"),
        UNKNOWN if "idempotent" in unknown else _yes_no(options.idempotent),
        compensation,
    )


def _timeout(value: float | None) -> str:
    return _seconds(value, "default")


def _seconds(value: float | None, none: str) -> str:
    return none if value is None else f"{value:g} s"


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"


def _short(description: str | None) -> str:
    if not description:
        return ""
    line = " ".join(description.split())
    return line if len(line) <= _DESCRIPTION_WIDTH else line[: _DESCRIPTION_WIDTH - 1] + "…"
