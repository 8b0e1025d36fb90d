"""Streaming state: incremental == from scratch, serialisation round trips, redelivery, numbering."""

from __future__ import annotations

import statistics
from typing import Any

import orjson
import pytest

from pipeline.core.brain import BrainIndex
from pipeline.core.extract import extract_candidates
from pipeline.core.op import decide
from pipeline.core.pages import Page
from pipeline.core.session import (
    EMISSIONS_KEPT_TURNS,
    DecisionOptions,
    SessionState,
    parse_watch_line,
    step,
)
from pipeline.core.types import VolunteeredPage
from tests.unit.core.conftest import WATCH_CASES


def options_of(case: dict[str, Any]) -> DecisionOptions:
    flags = case["flags"]
    return DecisionOptions(
        window_turns=flags.get("window_turns", 4),
        max_pages=flags.get("max_pages"),
        min_confidence=flags.get("min_confidence"),
        lexical_arms=flags.get("lexical_arms", True),
    )


def turns_of(case: dict[str, Any]) -> list[tuple[str, str]]:
    return [t for t in (parse_watch_line(line) for line in case["lines"]) if t is not None]


def from_scratch(case: dict[str, Any], brain: BrainIndex) -> list[list[VolunteeredPage]]:
    """A deliberately naive watch: keeps raw texts and re-extracts the whole window every turn."""
    options = options_of(case)
    size = options.effective_window_turns
    window: list[tuple[str, str]] = []
    pushed: set[str] = set()
    out = []
    for role, text in turns_of(case):
        window = [*window, (role, text)][-size:]
        pages = decide(
            [(r, extract_candidates(t)) for r, t in window],
            brain,
            source_ids=[case["flags"].get("source", "default")],
            max_pages=options.max_pages,
            min_confidence=options.min_confidence,
            lexical_arms=options.lexical_arms,
            exclude_slugs=pushed,
        )
        pushed.update(p.slug for p in pages)
        out.append(pages)
    return out


def incremental(case: dict[str, Any], brain: BrainIndex, *, roundtrip: bool) -> list[list[VolunteeredPage]]:
    state = SessionState()
    out = []
    for role, text in turns_of(case):
        result = step(state, role, text, brain, source_id=case["flags"].get("source", "default"), options=options_of(case))
        assert not result.duplicate
        out.append(result.pages)
        if roundtrip:
            data = state.to_bytes()
            state = SessionState.from_bytes(data)
            assert state.to_bytes() == data
    return out


def test_incremental_equals_from_scratch_on_every_session(conformance_brain: BrainIndex) -> None:
    differing = [c["id"] for c in WATCH_CASES if incremental(c, conformance_brain, roundtrip=False) != from_scratch(c, conformance_brain)]
    assert differing == []


def test_state_round_trip_after_every_turn_changes_nothing(conformance_brain: BrainIndex) -> None:
    differing = [
        c["id"]
        for c in WATCH_CASES
        if incremental(c, conformance_brain, roundtrip=True) != incremental(c, conformance_brain, roundtrip=False)
    ]
    assert differing == []


def test_saving_after_every_turn_writes_what_a_fresh_encoding_writes(conformance_brain: BrainIndex) -> None:
    """Each window turn keeps its encoded part (``_WindowTurn.encoded``); a state saved after every
    turn, as a worker saves it, must be byte for byte what encoding a decoded copy from scratch gives."""
    differing = []
    for case in WATCH_CASES:
        state = SessionState()
        for role, text in turns_of(case):
            step(state, role, text, conformance_brain, source_id=case["flags"].get("source", "default"),
                 options=options_of(case))
            saved = state.to_bytes()
            fresh = SessionState.from_bytes(saved)
            assert all(wt.encoded is None for wt in fresh.window)
            if saved != fresh.to_bytes() or saved != state.to_bytes():
                differing.append(case["id"])
                break
    assert differing == []


def test_state_holds_no_raw_turn_text_and_stays_small(conformance_brain: BrainIndex) -> None:
    sizes = []
    for case in WATCH_CASES:
        state = SessionState()
        texts = []
        for role, text in turns_of(case):
            step(state, role, text, conformance_brain, source_id=case["flags"].get("source", "default"), options=options_of(case))
            texts.append(text)
        data = state.to_bytes()
        sizes.append(len(data))
        stored = data.decode("utf-8")
        for text in texts:
            if len(text) >= 25 and " " in text:
                assert orjson.dumps(text).decode()[1:-1] not in stored, case["id"]
    assert statistics.median(sizes) < 2048
    assert max(sizes) < 16 * 1024


def _brain() -> BrainIndex:
    return BrainIndex.build(
        [
            Page(1, "people/alice-example", "Alice Example", compiled_truth="Alice is a founder."),
            Page(2, "people/bob-sample", "Bob Sample", compiled_truth="Bob is an engineer."),
            Page(3, "people/carol-demo", "Carol Demo", compiled_truth="Carol runs sales."),
        ]
    )


OPTS = DecisionOptions()


def test_redelivered_turn_re_emits_exactly_and_leaves_state_alone() -> None:
    brain = _brain()
    state = SessionState()
    first = step(state, "user", "ping Alice Example", brain, source_id="default", options=OPTS, turn_no=1, now_ms=10)
    assert [p.slug for p in first.pages] == ["people/alice-example"]
    second = step(state, "user", "and Bob Sample", brain, source_id="default", options=OPTS, turn_no=2, now_ms=20)
    assert [p.slug for p in second.pages] == ["people/bob-sample"]
    before = state.to_bytes()

    again = step(state, "user", "ping Alice Example", brain, source_id="default", options=OPTS, turn_no=1, now_ms=99)
    assert again.duplicate and again.turn == 1 and again.pages == first.pages
    again2 = step(state, "user", "and Bob Sample", brain, source_id="default", options=OPTS, turn_no=2, now_ms=99)
    assert again2.duplicate and again2.pages == second.pages
    assert state.to_bytes() == before

    restored = SessionState.from_bytes(before)
    assert step(restored, "user", "x", brain, source_id="default", options=OPTS, turn_no=2).pages == second.pages


def test_redelivery_after_restart_then_continuing_equals_an_uninterrupted_run(conformance_brain: BrainIndex) -> None:
    """Crash after turn k with the state of turn n >= k saved: turns k..n come again, then the rest."""
    case = max(WATCH_CASES, key=lambda c: len(c["lines"]))
    turns = turns_of(case)
    opts = options_of(case)
    src = case["flags"].get("source", "default")
    clean_state = SessionState()
    clean = [step(clean_state, r, t, conformance_brain, source_id=src, options=opts, turn_no=i).pages for i, (r, t) in enumerate(turns, 1)]
    assert any(clean)

    cut = len(turns) // 2
    state = SessionState()
    for i, (r, t) in enumerate(turns[:cut], 1):
        step(state, r, t, conformance_brain, source_id=src, options=opts, turn_no=i)
    state = SessionState.from_bytes(state.to_bytes())
    replayed = []
    for i, (r, t) in enumerate(turns, 1):
        if i <= cut - 3:
            continue
        res = step(state, r, t, conformance_brain, source_id=src, options=opts, turn_no=i)
        assert res.duplicate == (i <= cut)
        replayed.append(res.pages)
    assert replayed == clean[cut - 3 :]


def test_emissions_of_old_turns_are_dropped_eventually() -> None:
    brain = _brain()
    state = SessionState()
    step(state, "user", "ping Alice Example", brain, source_id="default", options=OPTS)
    for _ in range(EMISSIONS_KEPT_TURNS + 2):
        step(state, "user", "nothing here", brain, source_id="default", options=OPTS)
    assert 1 not in state.emissions
    res = step(state, "user", "ping Alice Example", brain, source_id="default", options=OPTS, turn_no=1)
    assert res.duplicate and res.pages == []


def test_session_dedupe_and_gaps_in_numbering() -> None:
    brain = _brain()
    state = SessionState()
    assert step(state, "user", "Alice Example?", brain, source_id="default", options=OPTS, turn_no=3).turn == 3
    res = step(state, "assistant", "Alice Example and Carol Demo", brain, source_id="default", options=OPTS, turn_no=7)
    assert res.turn == 7 and [p.slug for p in res.pages] == ["people/carol-demo"]
    assert state.window_turns == [3, 7]
    assert state.surfaced == {"people/alice-example": 3, "people/carol-demo": 7}
    assert step(state, "user", "next", brain, source_id="default", options=OPTS).turn == 8


def test_blank_text_is_not_a_turn() -> None:
    state = SessionState()
    res = step(state, "user", " \u00a0\ufeff ", _brain(), source_id="default", options=OPTS)
    assert res.skipped and res.pages == [] and state.last_turn == 0 and state.window == []


def test_window_size_follows_options() -> None:
    brain = _brain()
    state = SessionState()
    opts = DecisionOptions(window_turns=2.7)
    for text in ("one", "two", "three"):
        step(state, "user", text, brain, source_id="default", options=opts)
    assert state.window_turns == [2, 3]


def test_unknown_role_is_rejected() -> None:
    with pytest.raises(ValueError, match="role"):
        step(SessionState(), "system", "hi", _brain(), source_id="default", options=OPTS)


@pytest.mark.parametrize(
    "data",
    [b"", b"[]", b'{"v": 99, "t": 1}', b'{"v": 1}', b'{"v": 1, "t": 1, "w": [[1, 5, [], []]]}'],
)
def test_corrupt_state_is_a_clear_value_error(data: bytes) -> None:
    with pytest.raises(ValueError, match="invalid session state"):
        SessionState.from_bytes(data)


def test_activity_time_is_only_what_the_caller_passes() -> None:
    state = SessionState()
    step(state, "user", "hello", _brain(), source_id="default", options=OPTS)
    assert state.last_activity_ms is None
    step(state, "user", "hello again", _brain(), source_id="default", options=OPTS, now_ms=1234)
    assert SessionState.from_bytes(state.to_bytes()).last_activity_ms == 1234


def test_a_candidate_that_only_names_a_title_still_labels_the_page() -> None:
    """The label of a page pushed by its alias comes from the window's candidate whose norm is the
    page title's norm, even when that candidate resolves to nothing itself (a fullwidth letter in the
    title: its lowercase is not its norm). Such a norm must survive the relevance filter of step."""
    brain = BrainIndex.build([Page(1, "companies/acme", "\uff21cme Labs", type="company", frontmatter={"aliases": ["acme"]})])
    state = SessionState()
    result = step(state, "user", "Acme is ahead. The Acme Labs team agreed.", brain, source_id="default",
                  options=DecisionOptions())
    assert [(p.slug, p.display) for p in result.pages] == [("companies/acme", "Acme Labs")]


def test_the_bare_builders_set_every_field_like_the_constructors() -> None:
    """``_window_turn``, ``_result`` and ``new_page`` skip the dataclasses' ``__init__`` in the
    compiled core: every field (also those not compared) must hold what the constructor puts there,
    so a field added to the class without its builder fails here."""
    from dataclasses import fields

    from pipeline.core.session import StepResult, _result, _window_turn, _WindowTurn
    from pipeline.core.types import VolunteeredPage, new_page

    cands = [("Ada", "Ada", "ada", False)]
    for built, plain in [
        (_window_turn(3, "user", cands), _WindowTurn(3, "user", cands)),
        (_result(4, [], False, True, []), StepResult(4, [], False, True, [])),
        (new_page("s", "default", "D", 0.85, "title", "r", "syn"),
         VolunteeredPage("s", "default", "D", 0.85, "title", "r", "syn")),
    ]:
        assert type(built) is type(plain)
        assert [getattr(built, f.name) for f in fields(plain)] == [getattr(plain, f.name) for f in fields(plain)]
        assert built == plain and repr(built) == repr(plain)
