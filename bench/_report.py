"""The benchmark's report: the table it prints and the JSON it writes to `bench/results/`.

The table's columns and the JSON's shape are what earlier results are compared against: change
them only together with bench/README.md ("Reading the JSON").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from bench._timing import Measure, ms
from workers.settings import redact_url

__all__ = ["COLUMNS", "RESULTS_DIR", "build_report", "table", "write_json"]

RESULTS_DIR = Path(__file__).resolve().parent / "results"
COLUMNS = ("#", "measure", "result (median)", "p90", "target", "verdict")


def _main_p90(measure: Measure) -> str:
    """The p90 of the measure's first side (the toolfleet side), or nothing if it has none."""
    if not measure.sides:
        return ""
    first = next(iter(measure.sides.values()))
    return f"{ms(first.p90):.{2 if first.p90 < 0.1 else 0}f} ms"


def table(measures: Mapping[str, Measure], anchors: Mapping[str, Any]) -> str:
    """One row per measure, then the anchors and a line saying which targets were missed."""
    rows = [COLUMNS]
    for number, m in measures.items():
        rows.append((number, m.title, m.result or str(m.error), _main_p90(m), m.target, m.verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    ping = anchors["redis_ping"]
    publish = anchors["publish_only"]
    lines.append("")
    lines.append(
        f"anchors: Redis PING {ping['median_ms']:.3f} ms (p90 {ping['p90_ms']:.3f}), "
        f"bare Celery publish {publish['median_ms']:.3f} ms (p90 {publish['p90_ms']:.3f})"
    )
    missed = [f"{n}. {m.title}" for n, m in measures.items() if m.verdict not in ("met", "skipped")]
    skipped = [f"{n}. {m.title}" for n, m in measures.items() if m.verdict == "skipped"]
    ran = len(measures) - len(skipped)
    if missed:
        lines.append(f"MISSED {len(missed)} of {ran} targets: " + "; ".join(missed))
    else:
        lines.append(f"all {ran} targets met")
    if skipped:
        lines.append(f"skipped {len(skipped)}: " + "; ".join(skipped))
    return "\n".join(lines)


def build_report(
    *,
    started_at: datetime,
    duration_s: float,
    quick: bool,
    redis_url: str,
    machine: Mapping[str, Any],
    worker: Mapping[str, Any],
    anchors: Mapping[str, Any],
    measures: Mapping[str, Measure],
) -> dict[str, Any]:
    """The JSON document of one run (described in bench/README.md); the Redis URL is stored redacted."""
    return {
        "started_at": started_at.isoformat(timespec="seconds"),
        "duration_s": round(duration_s, 1),
        "quick": quick,
        "redis_url": redact_url(redis_url),
        "machine": dict(machine),
        "worker": dict(worker),
        "anchors": dict(anchors),
        "summary": {
            "met": [n for n, m in measures.items() if m.verdict == "met"],
            "missed": [n for n, m in measures.items() if m.verdict not in ("met", "skipped")],
        },
        "measures": {n: m.to_json() for n, m in measures.items()},
    }


def write_json(
    report: Mapping[str, Any], stamp: str, directory: Path = RESULTS_DIR, *, latest: bool = True
) -> Path:
    """Write `<directory>/<stamp>.json` and, with `latest`, the same as `latest.json`; return the first
    path."""
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    path = directory / f"{stamp}.json"
    path.write_text(text)
    if latest:
        (directory / "latest.json").write_text(text)
    return path
