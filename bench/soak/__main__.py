"""`python -m bench.soak --minutes N --seed S --report FILE`: run the soak, print its table, write its
JSON report and plot (FILE with `.png`), and exit 1 if any invariant was violated (2 if the soak itself
could not run)."""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from urllib.parse import urlparse

import redis
import sqlalchemy as sa

from bench._worker import REPO
from bench.soak import report as reporting
from bench.soak.checks import check
from bench.soak.evidence import gather, unsettled
from bench.soak.faults import KINDS, Injector, schedule
from bench.soak.fleet import API_KEY, REPLICAS, Fleet, Proc
from bench.soak.load import REQUEST_DEADLINE_S
from bench.soak.model import PlanModel
from tests.integration.fake_openai import fake_openai

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
SETTLE_S = 180.0  # after the load: how long the fleet has to bring every invocation to its end


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=2.0, help="how long the load runs (default 2)")
    parser.add_argument("--seed", type=int, default=1, help="the seed of the load and the faults (default 1)")
    parser.add_argument("--report", type=Path, default=REPO / "bench" / "results" / "soak.json")
    parser.add_argument("--clients", type=int, default=6, help="concurrent clients (default 6)")
    parser.add_argument("--fault-every", type=float, default=8.0, help="seconds between faults, on average")
    parser.add_argument(
        "--faults", default=",".join(KINDS), help="the kinds of fault to make, comma-separated (default: all)"
    )
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="a URL of the PostgreSQL server to use")
    parser.add_argument("--loopback", action="store_true", help="every host on loopback (no namespaces)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the run's directory (logs, ledger) and database"
    )
    return parser.parse_args(argv)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # the fleet, its network and its database are removed on the way out


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    signal.signal(signal.SIGTERM, _interrupted)
    directory = Path(tempfile.mkdtemp(prefix="toolfleet-soak-"))
    seconds = args.minutes * 60
    model = PlanModel()
    try:
        with fake_openai(model) as upstream:
            fleet = Fleet(directory, args.postgres, isolated=not args.loopback)
            try:
                return _run(args, fleet, seconds, upstream.base_url, model)
            finally:
                fleet.down(keep_database=args.keep)
    except sa.exc.OperationalError as exc:
        print(
            f"soak: needs a PostgreSQL server (--postgres, now {args.postgres}): {exc.orig}", file=sys.stderr
        )
        return 2
    except Exception:
        traceback.print_exc()
        print(f"soak: could not run; its logs are in {directory}", file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)


def _run(args: argparse.Namespace, fleet: Fleet, seconds: float, model_url: str, model: PlanModel) -> int:
    started = time.monotonic()
    fleet.up(urlparse(model_url).port or 80)
    network = "network namespaces on a bridge" if fleet.network.isolated else "loopback"
    print(
        f"soak: fleet up on {network} in {time.monotonic() - started:.1f} s; load for {seconds:g} s",
        flush=True,
    )
    requests_path = fleet.directory / "requests.jsonl"
    config = {
        "replicas": [fleet.replica_url(name) for name in REPLICAS],
        "api_key": API_KEY,
        "clients": args.clients,
        "seconds": seconds,
        "seed": args.seed,
        "out": str(requests_path),
    }
    (fleet.directory / "load.json").write_text(json.dumps(config))
    load = Proc(
        "load",
        fleet.hosts["load"],
        [sys.executable, "-m", "bench.soak.load", str(fleet.directory / "load.json")],
        fleet.env(),
        fleet.directory / "load.log",
    )
    began = time.time()
    load.start()
    kinds = tuple(kind for kind in args.faults.split(",") if kind)
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise SystemExit(f"soak: unknown fault kinds {unknown}; the kinds are {', '.join(KINDS)}")
    faults = schedule(args.seed, seconds, args.fault_every, kinds)
    injector = Injector(fleet, faults, args.seed).start()
    _wait(load, seconds + REQUEST_DEADLINE_S + 60)
    injector.stop()
    fleet.heal()
    settle_started = time.monotonic()
    while unsettled(fleet.database_url()) and time.monotonic() - settle_started < SETTLE_S:
        time.sleep(1)
    print(f"soak: load done; settled in {time.monotonic() - settle_started:.1f} s", flush=True)
    host, port = fleet.redis_address
    evidence = gather(
        fleet.database_url(), redis.Redis(host=host, port=port), fleet.ledger, requests_path, model.told_ok
    )
    violations = check(evidence)
    report = reporting.build(
        seed=args.seed,
        minutes=args.minutes,
        began=began,
        evidence=evidence,
        faults=faults,
        violations=violations,
        network=network,
    )
    args.report.parent.mkdir(parents=True, exist_ok=True)
    reporting.write(report, args.report)
    reporting.plot(report, evidence.requests, args.report.with_suffix(".png"))
    print(reporting.table(report))
    print(f"soak: report {args.report}, plot {args.report.with_suffix('.png')}")
    if violations and args.keep:
        print(f"soak: logs and ledger kept in {fleet.directory}")
    return 1 if violations else 0


def _wait(proc: Proc, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while proc.alive and time.monotonic() < deadline:
        time.sleep(0.5)
    if proc.alive:
        print("soak: the load generator overran its time; stopped", file=sys.stderr)
    proc.stop()


if __name__ == "__main__":
    sys.exit(main())
