"""The soak's report: faults by kind, invocations and calls by outcome, violations (each with its
invocation's events and the faults near it), latency and throughput per minute; as JSON, as a table
on stdout, and as a plot of throughput and latency over time with the faults marked."""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from bench.soak.checks import INVARIANTS, Violation
from bench.soak.evidence import Evidence
from bench.soak.faults import KINDS, Fault

__all__ = ["build", "plot", "table"]

NEAR_S = 15.0  # the faults "near" a violation: from this long before its invocation to its end


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def build(
    *,
    seed: int,
    minutes: float,
    began: float,
    evidence: Evidence,
    faults: list[Fault],
    violations: list[Violation],
    network: str,
) -> dict[str, Any]:
    requests = evidence.requests
    made = [f for f in faults if f.started is not None and not f.detail.startswith(("skipped", "failed"))]
    latencies = [r["ended"] - r["started"] for r in requests if r.get("invocation")]
    per_minute: dict[int, list[float]] = {}
    for request in requests:
        per_minute.setdefault(int((request["ended"] - began) // 60), []).append(
            request["ended"] - request["started"]
        )
    spans = {r.get("invocation"): (r["started"], r["ended"]) for r in requests if r.get("invocation")}
    return {
        "seed": seed,
        "minutes": minutes,
        "network": network,
        "faults": {kind: sum(1 for f in made if f.kind == kind) for kind in KINDS},
        "faults_not_made": [f.to_json() for f in faults if f.started is None or f not in made],
        "fault_log": [f.to_json() for f in faults],
        "invocations": dict(Counter(str(row["state"]) for row in evidence.invocations.values())),
        "why_failed": dict(
            Counter(
                _masked(str(row["error"]))
                for row in evidence.invocations.values()
                if row["state"] in ("failed", "compensating") and row["error"]
            )
        ),
        "calls": dict(Counter(str(call["state"]) for call in evidence.calls)),
        "requests": dict(Counter(f"{r['mode']}:{_ending(r)}" for r in requests)),
        "ledger": dict(Counter(f"{e['kind']}:{e['tool']}" for e in evidence.ledger)),
        "invariants": {name: sum(1 for v in violations if v.invariant == name) for name in INVARIANTS},
        "violations": [_explained(v, evidence, faults, spans) for v in violations],
        "latency_s": {
            "p50": _quantile(latencies, 0.5),
            "p99": _quantile(latencies, 0.99),
            "mean": statistics.fmean(latencies) if latencies else None,
        },
        "per_minute": [
            {"minute": m, "requests": len(v), "p50_s": _quantile(v, 0.5), "p99_s": _quantile(v, 0.99)}
            for m, v in sorted(per_minute.items())
        ],
        "began": began,
    }


def _masked(error: str) -> str:
    """An invocation's error without its ids and hosts, cut short: errors of one kind count as one."""
    error = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}|vm:\d+|[\w.-]+:\d{3,}|c\d+_\d+|p\d+x[\w.]+", "…", error)
    return error[:90]


def _ending(request: dict[str, Any]) -> str:
    if request.get("outcome"):
        return str(request["outcome"]).removeprefix("invocation.")
    return "answered" if request.get("answer") is not None and not request.get("error") else "no answer"


def _explained(
    violation: Violation, evidence: Evidence, faults: list[Fault], spans: dict[Any, tuple[float, float]]
) -> dict[str, Any]:
    events = evidence.events.get(violation.invocation or "", [])
    start, end = spans.get(violation.invocation, (None, None))
    if start is None and events:
        start, end = int(events[0][0].split("-")[0]) / 1000, int(events[-1][0].split("-")[0]) / 1000
    near = [
        f"{f.kind} {f.target} at {f.started:.1f}"
        for f in faults
        if f.started is not None
        and start is not None
        and end is not None
        and start - NEAR_S <= f.started <= end
    ]
    calls = [c for c in evidence.calls if c["invocation_id"] == violation.invocation]
    requests = [r for r in evidence.requests if r.get("invocation") == violation.invocation]
    return {
        **violation.to_json(),
        "events": [_told(event_id, e) for event_id, e in events],
        "calls": [
            f"{c['call_id']} {c['tool']} {c['state']} {c.get('outcome') or ''} on {c.get('worker') or '-'}"
            for c in calls
        ],
        "attempts": [f"{r['mode']}: {r.get('failures') or []}" for r in requests],
        "faults_near": near,
    }


def _told(event_id: str, event: dict[str, Any]) -> str:
    """One event, in a line: its id, type, call, and how a call or the invocation ended."""
    parts = [event_id, str(event["type"]), str(event.get("call_id") or "")]
    for field in ("outcome", "worker", "replica", "error"):
        if event.get(field):
            parts.append(f"{field}={str(event[field])[:80]}")
    return " ".join(p for p in parts if p)


def table(report: dict[str, Any]) -> str:
    lines = [f"soak: seed {report['seed']}, {report['minutes']:g} min, {report['network']}"]
    lines.append("faults made:  " + ", ".join(f"{k} {v}" for k, v in report["faults"].items()))
    lines.append(f"faults not made: {len(report['faults_not_made'])}")
    lines.append("invocations:  " + ", ".join(f"{k} {v}" for k, v in sorted(report["invocations"].items())))
    for why, count in sorted(report["why_failed"].items(), key=lambda item: -item[1]):
        lines.append(f"  failed or owing, {count}: {why}")
    lines.append("calls:        " + ", ".join(f"{k} {v}" for k, v in sorted(report["calls"].items())))
    lines.append("requests:     " + ", ".join(f"{k} {v}" for k, v in sorted(report["requests"].items())))
    lines.append("ledger:       " + ", ".join(f"{k} {v}" for k, v in sorted(report["ledger"].items())))
    latency = report["latency_s"]
    if latency["p50"] is not None:
        lines.append(f"latency:      p50 {latency['p50']:.2f} s, p99 {latency['p99']:.2f} s")
    lines.append(f"{'minute':>6}  {'requests':>8}  {'p50 s':>7}  {'p99 s':>7}")
    for row in report["per_minute"]:
        lines.append(f"{row['minute']:>6}  {row['requests']:>8}  {row['p50_s']:>7.2f}  {row['p99_s']:>7.2f}")
    lines.append(f"{'invariant':<18} violations")
    for name, count in report["invariants"].items():
        lines.append(f"{name:<18} {count}")
    for violation in report["violations"][:50]:
        lines.append(f"VIOLATION {violation['invariant']}: {violation['invocation']}: {violation['detail']}")
        lines.append(f"    faults near: {', '.join(violation['faults_near']) or 'none'}")
    lines.append(f"violations: {len(report['violations'])}")
    return "\n".join(lines)


def plot(report: dict[str, Any], requests: list[dict[str, Any]], path: Path) -> None:
    """Throughput (requests ended per 10 s) and each request's latency over time, faults marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    began = report["began"]
    ended = sorted(r["ended"] - began for r in requests)
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(12, 7), sharex=True)
    if ended:
        bins = max(int(ended[-1] // 10) + 1, 1)
        top.hist(ended, bins=bins, range=(0, bins * 10), color="#4c72b0")
    top.set_ylabel("requests ended / 10 s")
    points = [(r["ended"] - began, r["ended"] - r["started"]) for r in requests]
    bottom.scatter([p[0] for p in points], [p[1] for p in points], s=6, color="#55a868")
    bottom.set_ylabel("latency (s)")
    bottom.set_xlabel("seconds since the load began")
    colors = dict(zip(KINDS, plt.get_cmap("tab10").colors, strict=False))
    for fault in report["fault_log"]:
        if fault["started"] is None:
            continue
        for axis in (top, bottom):
            axis.axvspan(
                fault["started"] - began,
                (fault["ended"] or fault["started"]) - began,
                color=colors[fault["kind"]],
                alpha=0.15,
                lw=0,
            )
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k], alpha=0.4) for k in KINDS]
    top.legend(handles, KINDS, fontsize=7, ncol=3, loc="upper right")
    top.set_title(f"soak, seed {report['seed']}: violations {len(report['violations'])}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write(report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=2, default=str))
