"""One partition through a grid: the worker's step per setting, labels, bad lines and silences."""

from __future__ import annotations

import orjson

from pipeline.core.brain import BrainIndex
from pipeline.core.session import DecisionOptions
from pipeline.replay import replay_lines
from pipeline.tuning.grid import Setting
from pipeline.tuning.sweep import Problem, Silence, run_partition

GRID = [Setting(0.6, 3, 4), Setting(0.7, 1, 2), Setting(0.8, 5, 8)]


def numbered(lines: list[bytes]) -> list[tuple[int, bytes]]:
    return list(enumerate(lines, start=1))


def rec(session: str, text: str, turn: int | None = None, **extra: object) -> bytes:
    obj: dict[str, object] = {"session_id": session, "role": "user", "text": text, **extra}
    if turn is not None:
        obj["turn"] = turn
    return orjson.dumps(obj)


def test_each_setting_volunteers_exactly_what_plain_replay_does(brain: BrainIndex, labelled_lines: list[bytes]) -> None:
    result = run_partition(numbered(labelled_lines), brain, GRID, DecisionOptions())
    assert len(result.tallies) == len(GRID)
    for setting, tally in zip(GRID, result.tallies, strict=True):
        plain = replay_lines(labelled_lines, brain, options=setting.options(DecisionOptions()))
        assert tally.pages_by_arm == plain.pages_by_arm
        assert tally.turns == plain.turns
        assert result.sessions == plain.sessions
    assert len({t.volunteered for t in result.tallies}) > 1  # the settings really differ


def test_labels_score_the_pages_of_their_own_turn(brain: BrainIndex) -> None:
    lines = [
        rec("s", "Did Ronan Galewright reply?", 1, expected_slugs=["people/ronan-galewright"]),
        rec("s", "Please ask Jordan Lee too.", 2, expected_slugs=["people/alice-example"]),  # FP + miss
        rec("s", "Alice Example and Ronan Galewright were there.", 3,
            expected_slugs=[], acceptable_slugs=["people/ronan-galewright"]),
    ]
    result = run_partition(numbered(lines), brain, [Setting(0.7, 3, 4)], DecisionOptions())
    tally = result.tallies[0]
    # turn 1: ronan (hit); turn 2: jordan-lee (wrong); turn 3: alice (not allowed; ronan already surfaced)
    assert (tally.volunteered, tally.correct, tally.hits, tally.expected) == (3, 1, 1, 2)
    assert tally.precision == 1 / 3 and tally.recall == 1 / 2


def test_a_bad_label_is_reported_once_and_the_turn_still_replays_unlabelled(brain: BrainIndex) -> None:
    lines = [rec("s", "Did Ronan Galewright reply?", 1, expected_slugs="people/ronan-galewright"),
             rec("s", "ok", 2, expected_slugs=[])]
    result = run_partition(numbered(lines), brain, GRID, DecisionOptions())
    assert result.problems == [Problem(1, "bad_label", "field 'expected_slugs' must be a list of slugs (strings), "
                                                      "got str (the turn replays unlabelled)")]
    for tally in result.tallies:
        assert (tally.turns, tally.labelled_turns, tally.volunteered, tally.scored) == (2, 1, 1, 0)


def test_bad_blank_and_duplicate_lines_are_counted_once_and_their_labels_not_scored(brain: BrainIndex) -> None:
    lines = [
        rec("s", "Did Ronan Galewright reply?", 1),
        b"{broken",
        rec("s", "   ", 2, expected_slugs=["people/alice-example"]),
        rec("s", "Did Ronan Galewright reply?", 1, expected_slugs=["people/ronan-galewright"]),
        b"",
        rec("s", "Alice Example", 3),
    ]
    result = run_partition(numbered(lines), brain, GRID, DecisionOptions())
    assert (result.lines, result.bad, result.blank, result.duplicates, result.unscored_labels) == (5, 1, 1, 1, 2)
    assert [p.lineno for p in result.problems] == [2]
    assert result.problems[0].render().startswith("line 2: invalid_json: ")
    assert all(t.turns == 2 and t.labelled_turns == 0 for t in result.tallies)


def test_a_turn_that_cannot_be_numbered_is_bad_as_in_replay(brain: BrainIndex) -> None:
    """After turn 2147483647 an unnumbered turn has no number left: replay (and the worker) refuse
    it as ``turn_overflow``; the sweep must count it the same way, not score it."""
    lines = [
        rec("s", "Did Ronan Galewright reply?", 2_147_483_647),
        rec("s", "Alice Example", expected_slugs=["people/alice-example"]),
        rec("t", "Alice Example", 1),
    ]
    result = run_partition(numbered(lines), brain, GRID, DecisionOptions())
    plain = replay_lines(lines, brain, options=DecisionOptions())
    assert (result.bad, plain.bad) == (1, 1)
    assert [(p.lineno, p.code) for p in result.problems] == [(2, "turn_overflow")]
    assert result.unscored_labels == 1
    assert all(t.turns == plain.turns == 2 for t in result.tallies)


def test_labelled_turns_without_any_candidate_are_flagged_once(brain: BrainIndex) -> None:
    lines = [
        rec("a", "Did Ronan Galewright reply?", 1, expected_slugs=["people/ronan-galewright"]),
        rec("a", "and who is she?", 2, expected_slugs=["people/alice-example"]),  # no candidate: flagged
        rec("b", "is that her?", 1, expected_slugs=[]),  # expects nothing: a right silence
        rec("b", "who is he?", 2),  # unlabelled
        rec("b", "what did she invest in?", 3, expected_slugs=["people/alice-example"]),  # 'invest' is a candidate
        rec("c", "and him?", 4, expected_slugs=["people/jordan-lee"]),
    ]
    result = run_partition(numbered(lines), brain, GRID, DecisionOptions())
    assert result.silences == [Silence("a", 2, 2), Silence("c", 4, 6)]
    assert result.sessions == 3


def test_progress_reports_every_turn_of_every_setting(brain: BrainIndex, labelled_lines: list[bytes]) -> None:
    reported: list[int] = []
    run_partition(numbered(labelled_lines), brain, GRID, DecisionOptions(), progress=reported.append)
    assert sum(reported) == len(labelled_lines) * len(GRID)
