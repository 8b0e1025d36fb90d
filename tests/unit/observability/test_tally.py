"""The decision tally observes only: every conformance watch session gives the same pages with and
without one, and its counts agree with what the decisions returned."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.core.brain import BrainIndex
from pipeline.core.session import DecisionOptions, SessionState, parse_watch_line, step
from pipeline.core.tally import DecisionTally
from tests.unit.core.conftest import CONFORMANCE, WATCH_CASES


@pytest.fixture(scope="module")
def conformance_brain() -> BrainIndex:
    from pipeline.braindir import load_brain_dir

    return load_brain_dir(CONFORMANCE / "brain")


def options_of(case: dict[str, Any]) -> DecisionOptions:
    flags = case.get("flags") or {}
    return DecisionOptions(window_turns=flags.get("window_turns", 4), max_pages=flags.get("max_pages"),
                           min_confidence=flags.get("min_confidence"),
                           lexical_arms=flags.get("lexical_arms", True))


@pytest.mark.parametrize("chunk", range(3))
def test_tally_never_changes_a_decision_and_counts_add_up(conformance_brain: BrainIndex, chunk: int) -> None:
    cases = WATCH_CASES[chunk::3]
    total = DecisionTally()
    turns = pages_out = 0
    for case in cases:
        opts = options_of(case)
        plain, counted = SessionState(), SessionState()
        tally = DecisionTally()
        for line in case["lines"]:
            parsed = parse_watch_line(line)
            if parsed is None:
                continue
            source = (case.get("flags") or {}).get("source", "default")
            a = step(plain, parsed[0], parsed[1], conformance_brain, source_id=source, options=opts)
            b = step(counted, parsed[0], parsed[1], conformance_brain, source_id=source, options=opts,
                     tally=tally)
            assert a == b, case["session_id"]
            turns += 0 if b.skipped else 1
            pages_out += len(b.pages)
        assert plain.to_bytes() == counted.to_bytes()
        # per session: pages volunteered = pointers - dedupe suppressions - gate drops
        assert sum(tally.volunteered.values()) == (sum(tally.pointers.values()) - tally.suppressed
                                                   - tally.gate_dropped)
        assert min(tally.gate_dropped, tally.suppressed, tally.candidates) >= 0
        total.add(tally)
    assert total.decisions == turns
    assert sum(total.volunteered.values()) == pages_out > 0
    assert total.suppressed > 0 and total.gate_dropped > 0  # the corpus exercises both


def test_blank_and_unresolvable_turns_count_as_decisions_without_pointers(conformance_brain: BrainIndex) -> None:
    tally = DecisionTally()
    state = SessionState()
    step(state, "user", "nothing to see here, just words", conformance_brain, source_id="default",
         options=DecisionOptions(), tally=tally)
    assert tally.decisions == 1 and sum(tally.pointers.values()) == 0 and sum(tally.volunteered.values()) == 0
    step(state, "user", "   ", conformance_brain, source_id="default", options=DecisionOptions(), tally=tally)
    assert tally.decisions == 1  # blank text is not a turn
