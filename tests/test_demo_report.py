"""The demo's report story, in this process: the outlook is rendered from the forecasts the conversation
gathered, stored as an artifact, and linked by the answer; the demo says where it is."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import workers.examples.report as report
import workers.examples.weather as weather
from orchestrator.cli.demo import STORIES
from orchestrator.cli.demo_report import (
    REPORT_CITIES,
    REPORT_DAYS,
    REPORT_QUESTION,
    REPORT_STORY,
    report_script,
    shared_artifact_url,
    skipped_because,
    write_artifacts,
)
from orchestrator.executors.local import LocalExecutor
from orchestrator.models.scripted import ScriptedChatModel
from orchestrator.result import Result
from orchestrator.service import AiService
from workers.artifacts import ArtifactStore
from workers.settings import Settings


def _story(store_url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Result, ScriptedChatModel]:
    """The report story run here, its calls storing artifacts at `store_url`."""
    monkeypatch.setenv("TOOLFLEET_ARTIFACT_URL", store_url)
    model = ScriptedChatModel(report_script)
    service = AiService(chat_model=model, tools=[weather, report], executor=LocalExecutor())
    return service.chat(REPORT_QUESTION), model


def test_the_outlook_is_rendered_from_the_forecasts_and_the_answer_links_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: the story, as the demo tells it
    assert (REPORT_STORY, REPORT_QUESTION, report_script) in STORIES
    store = ArtifactStore.from_url(f"file://{tmp_path}/artifacts")
    # when
    result, _ = _story(store.url, monkeypatch)
    # then: a forecast per city, then one outlook of them all, made from what the forecasts said
    calls = [(e.request.name, json.loads(e.request.arguments)) for e in result.tool_executions]
    assert [name for name, _ in calls] == ["get_weather"] * len(REPORT_CITIES) + ["render_outlook"]
    outlook = calls[-1][1]
    assert outlook["days"] == REPORT_DAYS
    assert [f["city"] for f in outlook["forecasts"]] == list(REPORT_CITIES)
    lisbon = weather.get_weather("Lisbon")
    assert outlook["forecasts"][0] == {
        "city": "Lisbon",
        "temperature": lisbon.temperature,
        "summary": lisbon.summary,
    }
    # the outlook is an artifact in the store, and the answer gives its reference and its route
    (ref,) = result.tool_executions[-1].artifacts
    assert store.record(ref.id).tool == "render_outlook"
    assert result.content == (
        f"Your outlook is ready: outlook.md ({ref.size / 1000:.1f} KB), {ref.ref}. Download it from "
        f"`toolfleet serve` with GET /v1/artifacts/{ref.id}, or open it in the artifact store."
    )
    text = (Path(store.root) / ref.id).read_text()
    assert f"| {lisbon.temperature:.1f} °C, {lisbon.summary} |" in text
    assert text.count("\n| 20") == len(REPORT_CITIES) * REPORT_DAYS * 24  # an hourly row of each day
    # and the demo says where it is
    out = io.StringIO()
    write_artifacts(out, result, store)
    assert out.getvalue() == (
        f"    artifact {ref.ref}: outlook.md (text/markdown; charset=utf-8, {ref.size / 1000:.1f} KB) "
        f"made by render_outlook, stored at {store.root}/{ref.id}; `toolfleet serve` gives it at "
        f"GET /v1/artifacts/{ref.id}\n"
    )


def test_an_outlook_larger_than_the_tool_renders_is_refused_and_the_answer_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a tool that renders at most a few days
    monkeypatch.setattr(report, "MAX_DAYS", 7)
    # when
    result, _ = _story(f"file://{tmp_path}/artifacts", monkeypatch)
    # then: nothing is stored, and the answer says why there is no report
    assert result.tool_executions[-1].has_failed
    assert (
        result.content
        == f"The report could not be rendered: an outlook covers 1 to 7 days, not {REPORT_DAYS}"
    )
    assert not any((tmp_path / "artifacts").glob("*"))


@pytest.mark.parametrize("forecasts", [[], [{"city": f"C{i}", "temperature": 1.0} for i in range(21)]])
def test_an_outlook_of_no_city_or_too_many_is_refused(forecasts: list[dict[str, object]]) -> None:
    with pytest.raises(report.OutlookRefused, match=f"1 to 20 cities, not {len(forecasts)}"):
        report.render_outlook("t", [report.CityForecast(**f) for f in forecasts])  # type: ignore[arg-type]


def test_an_artifact_in_another_store_is_said_to_be_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: the story's artifact stored by its "workers" in one store, the demo reading another
    result, _ = _story(f"file://{tmp_path}/theirs", monkeypatch)
    (ref,) = result.tool_executions[-1].artifacts
    ours = ArtifactStore.from_url(f"file://{tmp_path}/ours")
    # when
    out = io.StringIO()
    write_artifacts(out, result, ours)
    # then
    assert out.getvalue() == f"    {ref.ref} is not in {ours.url}: its worker stores artifacts elsewhere\n"


def test_the_story_is_skipped_when_no_live_pool_serves_its_tool() -> None:
    # the live pools of a stack deployed without the report module
    assert skipped_because(report_script, ["get_weather", "squareRoot"]) == (
        "skipped: no live pool serves render_outlook (the heavy pool serves render_outlook with "
        "--tools workers.examples.report)"
    )
    assert skipped_because(report_script, ["get_weather", "render_outlook"]) is None
    _, _, weather_script = STORIES[1]
    assert skipped_because(weather_script, []) is None  # other stories run on what they find


@pytest.mark.parametrize(
    ("configured", "shared"),
    [
        ("", "file://{cwd}/toolfleet-artifacts"),
        ("reports", "file://{cwd}/reports"),
        ("file:///srv/artifacts", "file:///srv/artifacts"),
        (
            "s3://bucket/demo?endpoint_url=http://127.0.0.1:9000",
            "s3://bucket/demo?endpoint_url=http://127.0.0.1:9000",
        ),
    ],
)
def test_the_demo_s_processes_share_one_store_whatever_their_directory(
    configured: str, shared: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: the demo run from a directory, the store configured (or not)
    monkeypatch.chdir(tmp_path)
    settings = Settings.from_env({"TOOLFLEET_ARTIFACT_URL": configured} if configured else {})
    # then: a directory is named absolutely; an S3 URL keeps its endpoint
    assert shared_artifact_url(settings) == shared.format(cwd=tmp_path)


def test_a_rendered_outlook_is_removed_by_its_compensation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: an outlook stored for a call
    result, _ = _story(f"file://{tmp_path}/artifacts", monkeypatch)
    execution = result.tool_executions[-1]
    (ref,) = execution.artifacts
    assert (tmp_path / "artifacts" / ref.id).exists()
    # when: the call is undone
    report.discard_outlook(execution)
    # then
    assert not (tmp_path / "artifacts" / ref.id).exists()
