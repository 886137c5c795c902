"""The benchmark stays runnable without running it: its report, its command line, its worker's tasks,
measure 11's noise band, child environment and child process.

No Redis is needed: the report is rendered from a small made-up result set, `python -m bench --help`
exits before connecting, the worker app is only imported, and measure 11's child is asked for no
invocation (building its executor connects to nothing).
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
from bench._measures.otel_absent import child_environment, noise_band
from bench._report import COLUMNS, build_report, table, write_json
from bench._timing import Measure, summarize
from bench.batch_child import WITHOUT_FLAG
from workers.settings import Settings

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
        parse_args(["--only", "10,99"])

    assert "no measure 99; the measures are 1, 2," in capsys.readouterr().err


def test_every_measure_runs_once_and_the_deadline_last() -> None:
    assert sorted(RUN_ORDER, key=int) == list(MEASURES)
    assert RUN_ORDER[-1] == "3"


def test_a_partial_run_leaves_latest_json_alone(tmp_path: Path) -> None:
    path = write_json({"measures": {}}, "20260102T030405Z", tmp_path, latest=False)

    assert path.exists() and not (tmp_path / "latest.json").exists()


@pytest.mark.parametrize(
    ("controls", "band"),
    [
        # sigma = IQR 0.1 / 1.349; twice the median's standard error: 2 * 1.2533 * sigma / sqrt(5)
        ([0.9, 0.95, 1.0, 1.05, 1.1], 0.0831),
        ([0.999, 1.0, 1.0, 1.001], 0.03),  # the floor
        ([1.19, 1.2, 1.2, 1.21], 0.2),  # the identical pair's own deviation
    ],
)
def test_the_noise_band_is_the_widest_of_floor_standard_error_and_control_deviation(
    controls: list[float], band: float
) -> None:
    assert noise_band(controls) == pytest.approx(band, abs=1e-4)


def test_the_noise_band_widens_to_the_generation_of_processes_that_differed_most() -> None:
    controls = [0.999, 1.0, 1.0, 1.001]
    assert noise_band(controls, [0.99, 1.07, 1.01]) == pytest.approx(0.07, abs=1e-4)
    assert noise_band(controls, [0.99, 1.01]) == pytest.approx(0.03, abs=1e-4)


def test_the_children_get_the_benchmarks_settings_and_no_otel_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "elsewhere")
    monkeypatch.setenv("TOOLFLEET_MAX_FANOUT", "7")
    monkeypatch.setenv("TOOLFLEET_VISIBILITY_TIMEOUT_S", "5")
    url = "redis://127.0.0.1:6379/11"
    settings = Settings(redis_url=url, broker_url=url, result_backend=url, max_fanout=9, trace_content=True)

    env = child_environment(settings)

    assert not [name for name in env if name.startswith("OTEL_")]
    assert env["TOOLFLEET_MAX_FANOUT"] == "9" and env["TOOLFLEET_TRACE_CONTENT"] == "true"
    assert "TOOLFLEET_VISIBILITY_TIMEOUT_S" not in env  # unset in the settings: derived, as in the bench
    assert Settings.from_env(env) == settings
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(REPO)


_LOOK_AROUND = """
import importlib.util, importlib.metadata, json, sys
from bench.batch_child import hide_opentelemetry
if sys.argv[1:] == ["hide"]:
    hide_opentelemetry()
try:
    import opentelemetry.trace
    error = None
except ImportError as exc:
    error = f"{type(exc).__name__}: {exc}"
names = {(d.metadata["Name"] or "").lower() for d in importlib.metadata.distributions()}
print(json.dumps({
    "spec": importlib.util.find_spec("opentelemetry") is not None,
    "error": error,
    "distributions": sorted(n for n in names if n.startswith("opentelemetry")),
    "redis": "redis" in names and importlib.util.find_spec("redis") is not None,
}))
"""


@pytest.mark.parametrize("hide", [False, True])
def test_hidden_opentelemetry_looks_not_installed_and_nothing_else_changes(hide: bool) -> None:
    done = _run("-c", _LOOK_AROUND, *(["hide"] if hide else []))

    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["redis"] is True
    if hide:
        assert seen == {
            "spec": False,
            "error": "ModuleNotFoundError: No module named 'opentelemetry'",
            "distributions": [],
            "redis": True,
        }
    else:  # the dev install has the otel extra
        assert seen["spec"] is True and seen["error"] is None and "opentelemetry-api" in seen["distributions"]


def test_hiding_refuses_once_opentelemetry_is_loaded() -> None:
    done = _run(
        "-c", "import opentelemetry.trace; from bench.batch_child import hide_opentelemetry as h; h()"
    )

    assert done.returncode != 0 and "OpenTelemetry is loaded already" in done.stderr


@pytest.mark.parametrize("flags", [[], [WITHOUT_FLAG]])
def test_the_batch_child_says_ready_then_what_it_loaded(flags: list[str]) -> None:
    # No invocation runs: building the executor needs no Redis.
    done = subprocess.run(
        [sys.executable, "-m", "bench.batch_child", *flags],
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        input="end\n",
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    ready, end = done.stdout.splitlines()
    assert ready.startswith("ready ") and float(ready.split()[1]) > 0
    found = json.loads(end)
    assert found["importable"] is (not flags)
    if flags:
        assert found["loaded"] == []


def test_the_worker_app_serves_the_baseline_tasks_next_to_the_tools() -> None:
    done = _run("-c", "import json, bench.worker as w; print(json.dumps(sorted(w.app.tasks)))")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        "bench.raw_noop",
        "bench.raw_sleep",
        "tool.async_sleep_for",
        "tool.capped_noop",
        "tool.noop",
        "tool.quiet_noop",
        "tool.report_steps",
        "tool.shared_sleep",
        "tool.sleep_for",
    ]
