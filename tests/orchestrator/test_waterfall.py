"""The run view's waterfall: an invocation's model turns, calls, approvals and compensations as bars
on one time axis, drawn as SVG on the server, every text escaped.

The stories are built by hand, their moments given in ms from `T0`: the plot is `PLOT_W` (700)
units wide from x = `LABEL_W` (280), so over 7 s one second is 100 units.
"""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from orchestrator.saga._journal_crypto import JournalCipher
from orchestrator.saga._journal_tables import turns
from orchestrator.saga.journal import (
    ApprovalRecord,
    ApprovalState,
    CallRecord,
    CallState,
    CompensationRecord,
    CompensationState,
    InvocationRecord,
    InvocationState,
    Journal,
)
from orchestrator.server.ui import data
from orchestrator.server.ui.data import Story, TurnView
from orchestrator.server.ui.waterfall import LABEL_W, MIN_BAR_W, PLOT_W, waterfall_svg
from orchestrator.server.ui.waterfall_axis import axis_ticks, duration_text
from tests.orchestrator._bank import ROLLED_BACK, invocation_of

SVG = "{http://www.w3.org/2000/svg}"
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
INVOCATION_ID = "0b8f1d2e-5c3a-4e7b-9d1f-2a3b4c5d6e7f"


def at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def invocation(
    state: str, finished_ms: float | None, answer: str | None = None, id: str = INVOCATION_ID
) -> InvocationRecord:
    return InvocationRecord(
        id=id,
        service_name="bank",
        memory_id="m",
        user_message="deposit, credit and pay",
        state=InvocationState(state),
        owner="host:1",
        started_at=T0,
        heartbeat_at=T0,
        finished_at=None if finished_ms is None else at(finished_ms),
        error=None,
        sealed_invocation_json=None,
        cipher=JournalCipher(()),
        final_answer=answer,
    )


def call(
    row: int,
    turn: int | None,
    tool: str,
    start_ms: float,
    end_ms: float | None,
    state: str = "succeeded",
    outcome: str | None = "success",
    *,
    pool: str = "bank",
    worker: str | None = "w1",
    waited_ms: int | None = None,
) -> CallRecord:
    return CallRecord(
        id=row,
        invocation_id=INVOCATION_ID,
        sequence=row,
        turn=turn,
        call_id=f"c{row}",
        tool=tool,
        arguments="{}",
        pool=pool,
        compensable=True,
        idempotency_key=f"k{row}",
        state=CallState(state),
        outcome=outcome,
        result=None,
        result_object=None,
        task_id=f"t{row}",
        worker=worker,
        started_at=at(start_ms),
        finished_at=None if end_ms is None else at(end_ms),
        waited_ms=waited_ms,
        wait_reason=None if waited_ms is None else "concurrency",
    )


def undo(
    row: int, undone: CallRecord, state: str, created_ms: float, updated_ms: float, error: str | None = None
) -> CompensationRecord:
    return CompensationRecord(
        id=row,
        invocation_id=INVOCATION_ID,
        tool_call_id=undone.id,
        tool=undone.tool,
        state=CompensationState(state),
        attempts=1,
        error=error,
        task_id=None,
        reason="tool 'pay' call c3 failed",
        created_at=at(created_ms),
        updated_at=at(updated_ms),
    )


def approval(tool: str, requested_ms: float) -> ApprovalRecord:
    return ApprovalRecord(
        id=1,
        invocation_id=INVOCATION_ID,
        call_id="a1",
        tool=tool,
        pool="bank",
        arguments="{}",
        arguments_hash="h",
        state=ApprovalState.PENDING,
        approved_arguments=None,
        reason=None,
        requested_by="bank/m",
        decided_by=None,
        requested_at=at(requested_ms),
        expires_at=at(requested_ms + 3_600_000),
        decided_at=None,
    )


def story_of(
    record: InvocationRecord,
    calls: list[CallRecord],
    undone: list[CompensationRecord] | None = None,
    waiting: list[ApprovalRecord] | None = None,
) -> Story:
    """The story `data.story` tells of these rows: the calls grouped by turn, in their order."""
    views: list[TurnView] = []
    for item in calls:
        if views and views[-1].turn == item.turn:
            views[-1].calls.append(item)
        else:
            views.append(TurnView(item.turn, [item]))
    return Story(record, views, undone or [], waiting=list(waiting or []))


@dataclass(frozen=True)
class Row:
    label: str
    kind: str
    classes: list[str]
    x: float
    width: float
    hover: str
    element: ET.Element

    def rect(self, name: str) -> ET.Element | None:
        return self.element.find(f"{SVG}g/{SVG}rect[@class='{name}']")

    @property
    def duration(self) -> ET.Element | None:
        return self.element.find(f"{SVG}g/{SVG}text[@class='duration']")


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def rows(root: ET.Element) -> list[Row]:
    found = []
    for group in root.iter(f"{SVG}g"):
        if "data-kind" not in group.attrib:
            continue
        span = group.find(f"{SVG}g/{SVG}rect[@class='span']")
        label = group.find(f"{SVG}text[@class='label']")
        title = group.find(f"{SVG}title")
        assert span is not None and label is not None and title is not None
        found.append(
            Row(
                label=label.text or "",
                kind=group.attrib["data-kind"],
                classes=group.attrib["class"].split(),
                x=float(span.attrib["x"]),
                width=float(span.attrib["width"]),
                hover=title.text or "",
                element=group,
            )
        )
    return found


def ticks(root: ET.Element) -> list[tuple[str, float]]:
    found = []
    for tick in root.iter(f"{SVG}g"):
        if tick.attrib.get("class") == "tick":
            text, line = tick.find(f"{SVG}text"), tick.find(f"{SVG}line")
            assert text is not None and line is not None
            found.append((text.text or "", float(line.attrib["x1"])))
    return found


def layout(found: list[Row]) -> list[tuple[str, str, float, float]]:
    return [(row.label, row.kind, row.x, row.width) for row in found]


# -- a finished saga --------------------------------------------------------------------------------

DEPOSIT = call(1, 1, "deposit", 1000, 2000, "compensated")
CREDIT = call(2, 2, "credit", 2500, 3000, "compensated")
PAY = call(3, 2, "pay", 2500, 3500, "failed", "execution_error", worker="w2")
ROLLED = story_of(
    invocation("succeeded", 7000, answer="The payment was declined."),
    [DEPOSIT, CREDIT, PAY],
    [undo(1, CREDIT, "succeeded", 3600, 4000), undo(2, DEPOSIT, "succeeded", 3600, 4500)],
)


def test_a_rolled_back_saga_shows_each_turn_its_calls_then_the_compensations() -> None:
    # given: turn 1 deposits; turn 2 credits and pays (declined); both are undone, then the model answers
    # when
    root = parse(waterfall_svg(ROLLED, now=at(60_000)))
    # then: x = 280 + ms / 10, width = duration / 10; the answer's turn begins once the undoing ended
    assert layout(rows(root)) == [
        ("model · turn 1", "model", 280, 100),
        ("deposit · bank · w1", "ok", 380, 100),
        ("model · turn 2", "model", 480, 50),
        ("credit · bank · w1", "ok", 530, 50),
        ("pay · bank · w2", "error", 530, 100),
        ("model · turn 3 · answer", "model", 730, 250),
        ("undo credit · bank · w1", "undo-ok", 640, 40),
        ("undo deposit · bank · w1", "undo-ok", 640, 90),
    ]
    assert ticks(root) == [("0", 280)] + [(f"{s} s", 280 + 100 * s) for s in range(1, 8)]


def test_each_compensation_is_linked_to_the_call_it_undoes() -> None:
    # when
    root = parse(waterfall_svg(ROLLED, now=at(60_000)))
    # then: an elbow from the end of the call's bar down to the start of its undo's
    found = rows(root)
    by_row = {row.element.attrib.get("data-call-row"): row for row in found if row.kind == "ok"}
    links = {p.attrib["data-call-row"]: p.attrib["d"] for p in root.iter(f"{SVG}path")}
    assert links == {"2": "M580 103 V169 H640", "1": "M480 59 V191 H640"}
    assert [row.element.attrib["data-call-row"] for row in found if row.kind == "undo-ok"] == ["2", "1"]
    assert by_row["1"].label == "deposit · bank · w1" and by_row["2"].label == "credit · bank · w1"


def test_every_bar_has_hover_text_and_the_svg_says_what_it_shows() -> None:
    # when
    root = parse(waterfall_svg(ROLLED, now=at(60_000)))
    # then
    pay = rows(root)[4]
    assert pay.hover == (
        "pay · bank · w2\nfailed (execution_error)\npool bank · worker w2\nstarts at +2.50 s · took 1.00 s"
    )
    assert root.attrib["role"] == "img"
    assert root.attrib["viewBox"] == f"0 0 1020 {26 + 8 * 22 + 6}"
    assert "width" not in root.attrib and "height" not in root.attrib  # it scales to its container
    assert root.attrib["aria-label"] == (
        f"Timeline of invocation {INVOCATION_ID} (succeeded): 3 model turns, 3 calls (1 failed), "
        "2 compensations; 7.00 s"
    )
    style = root.find(f"{SVG}style")
    assert style is not None and ".waterfall .error rect" in (style.text or "")


def test_a_duration_is_written_inside_a_bar_it_fits_else_beside_it() -> None:
    # given: a bar 100 units wide, one of 10 and one of 10 at the plot's right end
    calls = [call(1, 1, "long", 0, 1000), call(2, 1, "short", 0, 100), call(3, 1, "late", 6900, 7000)]
    # when
    found = rows(parse(waterfall_svg(story_of(invocation("failed", 7000), calls), now=at(7000))))
    # then
    placed = [
        (row.label, d.text, d.attrib["text-anchor"], float(d.attrib["x"]))
        for row in found[1:]
        if (d := row.duration) is not None
    ]
    assert placed == [
        ("long · bank · w1", "1.00 s", "middle", 330),
        ("short · bank · w1", "100 ms", "start", 294),
        ("late · bank · w1", "100 ms", "end", 966),
    ]


@pytest.mark.parametrize(
    ("state", "outcome", "kind"),
    [
        ("succeeded", "success", "ok"),
        ("compensated", "success", "ok"),
        ("kept", "success", "ok"),
        ("failed", "execution_error", "error"),
        ("failed", "arguments_error", "error"),
        ("failed", "timed_out", "timeout"),
        ("succeeded", "worker_lost", "error"),
    ],
)
def test_a_finished_call_is_coloured_by_its_state_and_outcome(state: str, outcome: str, kind: str) -> None:
    story = story_of(invocation("failed", 7000), [call(1, 1, "t", 1000, 2000, state, outcome)])
    [_, row] = rows(parse(waterfall_svg(story, now=at(7000))))
    assert row.kind == kind and row.classes == ["row", kind]


def test_an_abandoned_call_runs_open_to_the_end_its_journal_never_saw() -> None:
    story = story_of(invocation("failed", 7000), [call(1, 1, "slow", 1000, None, "abandoned", None)])
    [_, row] = rows(parse(waterfall_svg(story, now=at(60_000))))
    assert (row.kind, row.classes, row.x, row.width) == ("abandoned", ["row", "abandoned", "open"], 380, 600)
    assert "its end was not journaled" in row.hover and "took 6.00 s so far" in row.hover


def test_a_turn_asked_before_the_previous_turns_calls_ended_thinks_for_no_time() -> None:
    # given: turn 1's call was journaled as ending at 3 s, after turn 2 asked for its call at 2.5 s
    calls = [call(1, 1, "slow", 1000, 3000), call(2, 2, "next", 2500, 4000)]
    # when
    found = rows(parse(waterfall_svg(story_of(invocation("failed", 7000), calls), now=at(7000))))
    # then
    assert layout(found)[2] == ("model · turn 2", "model", 530, MIN_BAR_W)


def test_calls_of_rows_older_than_turns_are_under_a_turn_of_unknown_number() -> None:
    story = story_of(invocation("succeeded", 7000, answer="ok"), [call(1, None, "old", 1000, 2000)])
    found = rows(parse(waterfall_svg(story, now=at(7000))))
    assert [row.label for row in found] == ["model · turn ?", "old · bank · w1", "model · turn 2 · answer"]


def test_a_compensation_of_a_call_the_story_lacks_is_labelled_with_its_tool_alone() -> None:
    missing = call(9, 1, "deposit", 0, 1000)
    story = story_of(invocation("failed", 7000), [], [undo(1, missing, "failed", 2000, 3000, "desk closed")])
    root = parse(waterfall_svg(story, now=at(7000)))
    assert layout(rows(root)) == [("undo deposit", "undo-error", 480, 100)]
    assert rows(root)[0].hover.splitlines()[1:3] == ["undo failed · 1 attempt", "desk closed"]
    assert list(root.iter(f"{SVG}path")) == []


# -- running, paused, empty -------------------------------------------------------------------------


def test_a_running_call_is_an_open_bar_to_now_with_its_wait_as_a_lead_in() -> None:
    # given: turn 1's first call is done; its second waited 300 ms for a slot and still runs
    calls = [
        call(1, 1, "lookup", 500, 1500),
        call(2, 1, "export", 500, None, "dispatched", None, waited_ms=300),
    ]
    # when
    root = parse(waterfall_svg(story_of(invocation("running", None), calls), now=at(7000)))
    # then: no model row after it (the model waits for the call); the bar runs to now
    found = rows(root)
    assert layout(found) == [
        ("model · turn 1", "model", 280, 50),
        ("lookup · bank · w1", "ok", 330, 100),
        ("export · bank · w1", "running", 330, 650),
    ]
    export = found[2]
    assert export.classes == ["row", "running", "open"]
    lead = export.rect("lead")
    assert lead is not None and (float(lead.attrib["x"]), float(lead.attrib["width"])) == (330, 30)
    assert found[1].rect("lead") is None
    assert export.hover.splitlines() == [
        "export · bank · w1",
        "running",
        "pool bank · worker w1",
        "waited 0.30 s for a concurrency slot",
        "starts at +500 ms · took 6.50 s so far",
    ]
    assert root.attrib["aria-label"].endswith("; 7.00 s so far")


def test_a_wait_longer_than_its_call_stays_within_the_bar() -> None:
    calls = [call(1, 1, "export", 1000, 2000, waited_ms=5000)]
    [_, row] = rows(parse(waterfall_svg(story_of(invocation("failed", 7000), calls), now=at(7000))))
    lead = row.rect("lead")
    assert lead is not None and float(lead.attrib["width"]) == row.width == 100


def test_a_running_invocation_whose_calls_are_done_shows_the_model_thinking_now() -> None:
    # given: turn 1's call ended at 3 s, the model has not answered yet
    story = story_of(invocation("running", None), [call(1, 1, "lookup", 1000, 3000)])
    # when
    found = rows(parse(waterfall_svg(story, now=at(7000))))
    # then
    assert layout(found)[-1] == ("model · turn 2", "model", 580, 400)
    assert found[-1].classes == ["row", "model", "open"]


def test_a_paused_invocation_waits_for_approval_until_now() -> None:
    # given: turn 1's lookup ran; its transfer waits for a person since 2 s
    story = story_of(
        invocation("paused", None), [call(1, 1, "lookup", 1000, 1500)], waiting=[approval("transfer", 2000)]
    )
    # when
    root = parse(waterfall_svg(story, now=at(7000)))
    # then: nothing thinks while it is paused
    found = rows(root)
    assert layout(found) == [
        ("model · turn 1", "model", 280, 100),
        ("lookup · bank · w1", "ok", 380, 50),
        ("approval · transfer", "approval", 480, 500),
    ]
    assert found[2].classes == ["row", "approval", "open"]
    assert found[2].hover.startswith(
        "approval · transfer\nwaiting for approval\npool bank · expires 2025-03-01"
    )
    assert ", 1 waiting for approval; 7.00 s so far" in root.attrib["aria-label"]


def test_an_invocation_with_no_calls_is_its_model_answering() -> None:
    story = story_of(invocation("succeeded", 7000, answer="Hello."), [])
    root = parse(waterfall_svg(story, now=at(60_000)))
    assert layout(rows(root)) == [("model · turn 1 · answer", "model", 280, 700)]
    assert "0 calls (0 failed), 0 compensations" in root.attrib["aria-label"]


def test_an_invocation_with_nothing_journaled_says_so() -> None:
    root = parse(waterfall_svg(story_of(invocation("failed", 7000), []), now=at(60_000)))
    assert rows(root) == []
    empty = root.find(f"{SVG}text[@class='empty']")
    assert empty is not None and empty.text == "nothing journaled yet"
    assert root.attrib["viewBox"] == f"0 0 1020 {26 + 22 + 6}"


def test_a_running_compensation_runs_to_now_and_a_pending_one_waits_there() -> None:
    deposit, credit = call(1, 1, "deposit", 0, 1000), call(2, 1, "credit", 0, 1000, "failed", "timed_out")
    undos = [undo(1, deposit, "running", 2000, 3000), undo(2, credit, "pending", 2000, 2000)]
    story = story_of(invocation("compensating", None), [deposit, credit], undos)
    found = rows(parse(waterfall_svg(story, now=at(7000))))
    assert [(r.kind, r.classes[-2:], r.x, r.width) for r in found[-2:]] == [
        ("undo-running", ["open", "undo"], 480, 500),
        ("undo-pending", ["open", "undo"], 480, 500),
    ]


# -- escaping ---------------------------------------------------------------------------------------


def test_hostile_names_are_text_never_markup() -> None:
    # given: a tool, a pool and a worker named to break out of the SVG, and an id to break an attribute
    hostile = '<script>alert("x")</script>'
    calls = [call(1, 1, hostile, 1000, 2000, pool="p&q", worker="'><g onload='x")]
    record = invocation("succeeded", 7000, answer="ok", id='x" onload="alert(1)')
    # when
    svg = waterfall_svg(story_of(record, calls, [undo(1, calls[0], "failed", 2500, 3000)]), now=at(7000))
    # then: it parses, nothing of theirs became an element or an attribute, and it reads as written
    root = parse(svg)
    assert "<script" not in svg and "&lt;script&gt;" in svg
    assert list(root.iter(f"{SVG}script")) == [] and "onload" not in root.attrib
    assert all("onload" not in e.attrib for e in root.iter())
    found = rows(root)
    said = f"{hostile} · p&q · '><g onload='x"
    assert found[1].hover.startswith(f"{said}\n")
    assert found[1].label == said[:39] + "…"  # cut at the label column's width
    assert found[-1].label == f"undo {said}"[:41] + "…"
    assert root.attrib["aria-label"].startswith('Timeline of invocation x" onload="alert(1) (succeeded)')


# -- durations: none, and days ----------------------------------------------------------------------


def test_an_invocation_of_no_duration_still_draws_its_bars() -> None:
    # given: everything at one moment
    story = story_of(invocation("succeeded", 0, answer="ok"), [call(1, 1, "instant", 0, 0)])
    # when
    root = parse(waterfall_svg(story, now=at(0)))
    # then: the axis spans 1 ms; each bar is at least `MIN_BAR_W` wide
    assert layout(rows(root)) == [
        ("model · turn 1", "model", 280, MIN_BAR_W),
        ("instant · bank · w1", "ok", 280, MIN_BAR_W),
        ("model · turn 2 · answer", "model", 280, MIN_BAR_W),
    ]
    assert ticks(root) == [("0", 280), ("1 ms", 980)]
    assert "took 0 ms" in rows(root)[1].hover


def test_a_call_journaled_as_ending_before_it_started_is_a_bar_of_none() -> None:
    story = story_of(invocation("failed", 7000), [call(1, 1, "skewed", 3000, 2000)])
    [_, row] = rows(parse(waterfall_svg(story, now=at(7000))))
    assert (row.x, row.width) == (580, MIN_BAR_W) and "took 0 ms" in row.hover


def test_a_call_started_after_now_stretches_the_axis_to_it() -> None:
    # given: another host's clock puts a call's start 1 s after this one's now
    story = story_of(invocation("running", None), [call(1, 1, "ahead", 7000, None, "dispatched", None)])
    # when
    found = rows(parse(waterfall_svg(story, now=at(6000))))
    # then: the axis ends at the call's start, which is drawn at the plot's end
    assert layout(found) == [("model · turn 1", "model", 280, 700), ("ahead · bank · w1", "running", 980, 1)]


def test_a_compensation_stamped_before_the_invocation_started_moves_the_axis_start_to_it() -> None:
    # given: a recoverer whose clock is 1 s behind planned the undoing of a call
    deposit = call(1, 1, "deposit", 1000, 2000)
    story = story_of(invocation("failed", 6000), [deposit], [undo(1, deposit, "succeeded", -1000, 0)])
    # when
    root = parse(waterfall_svg(story, now=at(6000)))
    # then: the axis runs from -1 s to 6 s
    assert layout(rows(root)) == [
        ("model · turn 1", "model", 380, 100),
        ("deposit · bank · w1", "ok", 480, 100),
        ("undo deposit · bank · w1", "undo-ok", 280, 100),
    ]
    assert ticks(root)[:2] == [("0", 280), ("1 s", 380)]


def test_an_approval_waited_on_for_days_is_drawn_on_an_axis_of_days() -> None:
    # given: paused since a call of one second, three days ago
    story = story_of(
        invocation("paused", None), [call(1, 1, "lookup", 0, 1000)], waiting=[approval("transfer", 1000)]
    )
    # when
    root = parse(waterfall_svg(story, now=at(3 * 86_400_000)))
    # then
    found = rows(root)
    assert (found[1].x, found[1].width) == (280, MIN_BAR_W)
    assert found[2].width == pytest.approx(PLOT_W * (1 - 1000 / (3 * 86_400_000)), abs=0.01)
    labels = ["0", "12 h", "1 d", "1 d 12 h", "2 d", "2 d 12 h", "3 d"]
    assert ticks(root) == [(label, round(LABEL_W + PLOT_W * i / 6, 2)) for i, label in enumerate(labels)]
    assert "took 2 d 23 h so far" in found[2].hover


@pytest.mark.parametrize(
    ("span_ms", "labels"),
    [
        (1, ["0", "1 ms"]),
        (45, ["0", "10 ms", "20 ms", "30 ms", "40 ms"]),
        (3500, ["0", "500 ms", "1 s", "1.5 s", "2 s", "2.5 s", "3 s", "3.5 s"]),
        (95_000, ["0", "15 s", "30 s", "45 s", "1 min", "1 min 15 s", "1 min 30 s"]),
        (5_400_000, ["0", "15 min", "30 min", "45 min", "1 h", "1 h 15 min", "1 h 30 min"]),
        (40 * 86_400_000, ["0", *(f"{d} d" for d in range(5, 41, 5))]),
    ],
)
def test_the_axis_ticks_a_round_step_in_the_span_unit(span_ms: float, labels: list[str]) -> None:
    found = axis_ticks(span_ms)
    assert [label for _, label in found] == labels
    steps = {b - a for (a, _), (b, _) in itertools.pairwise(found)}
    assert len(steps) == 1 and span_ms / steps.pop() <= 8


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 ms"),
        (0.0025, "2.5 ms"),
        (0.35, "350 ms"),
        (1.25, "1.25 s"),
        (12.34, "12.3 s"),
        (125, "2 min 5 s"),
        (3 * 3600 + 120, "3 h 2 min"),
        (2 * 86_400 + 3 * 3600, "2 d 3 h"),
    ],
)
def test_a_duration_is_written_in_its_unit(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


# -- from the journal -------------------------------------------------------------------------------


def test_a_journaled_saga_is_drawn_from_its_story(journal: Journal) -> None:
    # given: a saga rolled back, journaled through the service
    invocation_id = invocation_of(journal, ROLLED_BACK, "deposit, credit and pay")
    story = data.story(journal, invocation_id)
    assert story is not None
    # when
    found = rows(parse(waterfall_svg(story, now=datetime.now(UTC))))
    # then
    assert [(row.label, row.kind) for row in found] == [
        ("model · turn 1", "model"),
        ("deposit · default · —", "ok"),
        ("model · turn 2", "model"),
        ("credit · default · —", "ok"),
        ("pay · default · —", "error"),
        ("model · turn 3 · answer", "model"),
        ("undo credit · default · —", "undo-ok"),
        ("undo deposit · default · —", "undo-ok"),
    ]
    # and a turn's response is journaled with its calls' intents: its first call's start is its moment
    query = sa.select(turns.c.turn, turns.c.created_at).where(turns.c.invocation_id == invocation_id)
    moments = {row["turn"]: row["created_at"].replace(tzinfo=UTC) for row in journal.select(query)}
    for view in story.turns:
        assert view.turn is not None
        first = min(c.started_at for c in view.calls)
        assert abs(first - moments[view.turn]) < timedelta(milliseconds=1)
