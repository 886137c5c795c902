"""The `toolfleet` command as a user runs it."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests._cli import CLI, run_command
from workers.artifacts import ArtifactStore


def test_help_lists_the_commands(capsys: object) -> None:
    # when
    result = run_command([*CLI, "--help"])
    # then
    assert result.returncode == 0
    for command in ("demo", "worker"):
        assert command in result.stdout


@pytest.mark.integration
def test_demo_runs_the_eight_stories_and_leaves_no_process_behind(tmp_path: Path) -> None:
    # given: the test Redis (a dedicated database), a journal file and an artifact store of our own
    base = os.environ.get("TOOLFLEET_REDIS_URL", "redis://127.0.0.1:6379/0").rsplit("/", 1)[0]
    env = {
        **os.environ,
        "TOOLFLEET_REDIS_URL": f"{base}/11",
        "TOOLFLEET_DATABASE_URL": f"sqlite:///{tmp_path}/demo.db",
        "TOOLFLEET_ARTIFACT_URL": f"file://{tmp_path}/artifacts",
    }
    env.pop("TOOLFLEET_BROKER_URL", None)
    env.pop("TOOLFLEET_RESULT_BACKEND", None)
    # when
    result = run_command([*CLI, "demo"], env=env, timeout_s=120)
    # then: it succeeds and tells the eight stories
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "The square root of 475695037565 is 689706.486532." in out
    # five forecasts in the weather story, five more for the outlook report
    assert out.count("tool.get_weather         io     io@demo      success") == 10
    assert "compensation of credit: succeeded" in out
    assert (
        "Tool 'credit' was executed successfully but was rolled back due to failure of tool 'withdraw'" in out
    )
    assert "Tool 'rentCar' did not finish within 2 s" in out
    assert out.index("compensation of book_hotel: succeeded") < out.index(
        "compensation of book_flight: succeeded"
    )
    assert "[100% asked Wizz Air]" in out  # the fare search's progress, live
    assert "tool.watch_fare          io     io@demo      cancelled" in out
    assert "I stopped watching the fare: Tool 'watch_fare' was cancelled." in out
    # the large transfer pauses, showing the call that waits, and a second process approves it
    paused = re.search(r"Paused \(invocation ([0-9a-f-]{36})\): the teller holds transfers above 1000", out)
    assert paused is not None, out[-3000:]
    invocation = paused[1]
    assert "transfer call call_transfer on pool io: payer=Olena, payee=Dmytro, amount=1500" in out
    assert (
        f"A second process approves it: toolfleet approve {invocation} call_transfer "
        "--agent bank=workers.examples.teller:teller\n  Its output (exit code 0, " in out
    )
    assert f"    | approved: transfer call call_transfer of invocation {invocation}\n" in out
    # that process goes on with the invocation: the transfer runs once, on its pool, and it answers
    answer = "Done: Transferred 1500 from Olena to Dmytro; balances Olena 248500, Dmytro 1550."
    assert f"    | answer: {answer}\n" in out
    assert "tool.transfer" not in out  # the demo's own process dispatched no transfer
    assert "  The shared journal: invocation succeeded\n" in out
    assert "    transfer ran 1 time on pool io (worker io@demo): succeeded\n" in out
    assert f"  Answer (given in the second process): {answer}\n" in out
    # the outlook is rendered on the heavy pool and stored in the store every process shares; the
    # answer links it, and the demo says where it is
    assert "tool.render_outlook      heavy  heavy@demo   success" in out
    linked = re.search(r"Your outlook is ready: outlook\.md \(([\d.]+) KB\), artifact:([0-9a-f]{32})\. ", out)
    assert linked is not None, out[-3000:]
    artifact_id = linked[2]
    assert f"Download it from `toolfleet serve` with GET /v1/artifacts/{artifact_id}, " in out
    assert f"made by render_outlook, stored at {tmp_path}/artifacts/{artifact_id}; " in out
    record = ArtifactStore.from_url(env["TOOLFLEET_ARTIFACT_URL"]).record(artifact_id)
    assert (record.ref.name, record.tool) == ("outlook.md", "render_outlook")
    assert 200_000 < record.ref.size < 400_000  # a report of a few hundred KB
    report = (tmp_path / "artifacts" / artifact_id).read_text()
    assert report.startswith("# 60-day temperature outlook\n") and "| Lima |" in report
    assert hashlib.sha256(report.encode()).hexdigest() == record.ref.sha256
    assert out.endswith("The demo's worker processes stopped.\nDemo complete.\n"), out[-500:]
    # and no worker process is left behind
    leftovers = subprocess.run(["pgrep", "-f", "--hostname (io|heavy)@demo"], capture_output=True, text=True)
    assert leftovers.stdout.strip() == ""


def test_worker_with_a_pool_no_tool_belongs_to_fails_clearly() -> None:
    # when
    result = run_command([*CLI, "worker", "--pool", "nowhere", "--tools", "workers.examples.math"])
    # then
    assert result.returncode == 2
    assert (
        "No tool of workers.examples.math belongs to pool(s) nowhere; their pools are: heavy" in result.stderr
    )
