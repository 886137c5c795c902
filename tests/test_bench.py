"""The benchmark stays runnable without running it: its report, its command line, its worker's tasks.

No Redis is needed: the report is rendered from a small made-up result set, `python -m bench --help`
exits before connecting, and the worker app is only imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import parse_args
from bench._measures import MEASURES, RUN_ORDER
from bench._report import COLUMNS, build_report, table, write_json
from bench._timing import Measure, summarize

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "bench" / "results" / "latest.json"
ANCHORS: dict[str, Any] = {
    "redis_ping": summarize([0.0001, 0.0002, 0.0003]).to_json(),
    "publish_only": summarize([0.001, 0.002]).to_json(),
    "note": "made up",
}


def _measures() -> dict[str, Measure]:
    met = Measure("single_call", "one call", "d", "median ratio <= 1.25", result="x1.05 (2.10 vs 2.00 ms)")
    met.met = True
    met.sides = {"executor": summarize([0.002, 0.0021, 0.0025]), "celery": summarize([0.002, 0.0022])}
    met.cpu = {"executor": {"client_cpu_ms_per_run": 1.0}}
    met.rounds = [{"ratio": 1.05}]
    met.details = {"median_ratio": 1.05, "seconds": 3.2}
    missed = Measure("batch_100", "a batch", "d", "median <= 150 ms", result="180 ms")
    missed.sides = {"executor": summarize([0.18, 0.19, 0.2])}
    failed = Measure("measure_deadline", "deadline", "", "")
    failed.error = "RuntimeError: the worker went away"
    return {"1": met, "2": missed, "3": failed}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=60
    )


def test_the_table_has_a_row_per_measure_with_its_verdict_then_anchors_and_missed_targets() -> None:
    lines = table(_measures(), ANCHORS).splitlines()

    assert lines[0].split("  ")[0] == "#"
    for column in COLUMNS:
        assert column in lines[0]
    assert set(lines[1].replace(" ", "")) == {"-"}
    one, two, three = lines[2:5]
    assert one.startswith("1  one call") and "x1.05 (2.10 vs 2.00 ms)" in one and one.endswith("met")
    assert "  2.42 ms  " in one  # p90 of the first side (2.0, 2.1, 2.5 ms), two decimals below 100 ms
    assert "180 ms" in two and "  198 ms  " in two and two.endswith("MISSED")
    assert "RuntimeError: the worker went away" in three and three.endswith("ERROR")
    assert lines[5] == ""
    assert lines[6].startswith("anchors: Redis PING 0.200 ms (p90 ")
    assert "bare Celery publish 1.500 ms" in lines[6]
    assert lines[7] == "MISSED 2 of 3 targets: 2. a batch; 3. deadline"


def test_the_table_says_so_when_every_target_is_met() -> None:
    only_met = {"1": _measures()["1"]}

    assert table(only_met, ANCHORS).splitlines()[-1] == "all 1 targets met"


def test_the_json_keeps_the_committed_results_shape_and_no_password(tmp_path: Path) -> None:
    measures = _measures()
    report = build_report(
        started_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        duration_s=61.26,
        quick=False,
        redis_url="redis://bench:s3cret@redis.example:6379/7",
        machine={"cpu_count": 2},
        worker={"command": "-m celery -A bench.worker worker", "pool": "threads"},
        anchors=ANCHORS,
        measures=measures,
    )

    path = write_json(report, "20260102T030405Z", tmp_path)

    assert path == tmp_path / "20260102T030405Z.json"
    assert (tmp_path / "latest.json").read_text() == path.read_text()
    written = json.loads(path.read_text())
    assert "s3cret" not in path.read_text()
    assert written["redis_url"] == "redis://bench:***@redis.example:6379/7"
    assert written["started_at"] == "2026-01-02T03:04:05+00:00"
    assert written["duration_s"] == 61.3
    assert written["summary"] == {"met": ["1"], "missed": ["2", "3"]}
    assert written["measures"]["1"]["sides"]["executor"]["p90_ms"] == 2.42
    assert written["measures"]["3"]["verdict"] == "ERROR" and written["measures"]["3"]["met"] is False
    # Earlier results stay comparable: the same keys as the committed results, at every level read.
    committed = json.loads(COMMITTED.read_text())
    assert list(written) == list(committed)
    assert list(written["measures"]["1"]) == list(committed["measures"]["1"])
    assert list(written["measures"]["1"]["sides"]["executor"]) == list(
        committed["measures"]["1"]["sides"]["executor"]
    )
    assert list(written["anchors"]) == list(committed["anchors"])


def test_help_runs_without_redis_and_lists_the_options() -> None:
    done = _run("-m", "bench", "--help")

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m bench")
    assert "--quick" in done.stdout and "--no-save" in done.stdout and "--only" in done.stdout


def test_only_takes_measure_numbers_and_refuses_others(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args([]).only is None
    assert parse_args(["--only", "11, 10"]).only == frozenset({"10", "11"})

    with pytest.raises(SystemExit):
        parse_args(["--only", "10,12"])

    assert "no measure 12; the measures are 1, 2," in capsys.readouterr().err


def test_every_measure_runs_once_and_the_deadline_last() -> None:
    assert sorted(RUN_ORDER, key=int) == list(MEASURES)
    assert RUN_ORDER[-1] == "3"


def test_a_partial_run_leaves_latest_json_alone(tmp_path: Path) -> None:
    path = write_json({"measures": {}}, "20260102T030405Z", tmp_path, latest=False)

    assert path.exists() and not (tmp_path / "latest.json").exists()


def test_the_worker_app_serves_the_baseline_tasks_next_to_the_tools() -> None:
    done = _run("-c", "import json, bench.worker as w; print(json.dumps(sorted(w.app.tasks)))")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        "bench.raw_noop",
        "bench.raw_sleep",
        "tool.async_sleep_for",
        "tool.noop",
        "tool.report_steps",
        "tool.sleep_for",
    ]
