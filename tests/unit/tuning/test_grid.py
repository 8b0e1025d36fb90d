"""The --sweep grammar: lists, inclusive decimal ranges, validation, and the grid's order."""

from __future__ import annotations

import pytest

from pipeline.core.session import DecisionOptions
from pipeline.tuning.grid import GridError, Setting, base_setting, build_grid, parse_sweeps, parse_values


def test_lists_are_sorted_and_deduplicated() -> None:
    assert parse_values("min_confidence", "0.8,0.6, 0.7,0.6") == [0.6, 0.7, 0.8]
    assert parse_values("max_pages", "5,1,3") == [1, 3, 5]


def test_ranges_are_inclusive_and_exact_in_decimal() -> None:
    assert parse_values("min_confidence", "0.6:0.8:0.05") == [0.6, 0.65, 0.7, 0.75, 0.8]
    assert parse_values("window_turns", "1:8:1") == [1, 2, 3, 4, 5, 6, 7, 8]
    assert parse_values("window_turns", "2:9:3") == [2, 5, 8]  # stop not on the grid: not included
    assert parse_values("min_confidence", "0.5:0.6:0.1,0.9") == [0.5, 0.6, 0.9]


def test_dashes_in_names_are_accepted() -> None:
    assert parse_sweeps(["min-confidence=0.7", "window-turns=2"]) == {"min_confidence": [0.7], "window_turns": [2]}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("confidence=0.7", "unknown parameter 'confidence'; choose from min_confidence, max_pages, window_turns"),
        ("min_confidence", "expected NAME=VALUES"),
        ("min_confidence=abc", "'abc' is not a number"),
        ("min_confidence=0.6,,0.7", "empty value in the list"),
        ("min_confidence=1.5", "1.5 is outside 0..1"),
        ("max_pages=6", "6 is outside 1..5"),
        ("max_pages=2.5", "max_pages takes whole numbers, got 2.5"),
        ("window_turns=0:4:1", "0 is outside 1..64"),
        ("window_turns=1:4", "a range is START:STOP:STEP (inclusive)"),
        ("min_confidence=0.6:0.8:0", "must be greater than 0"),
        ("min_confidence=0.8:0.6:0.1", "ends before it starts"),
        ("min_confidence=0:1:0.0001", "has 10001 values, more than 1000"),
        ("min_confidence=nan", "is not a finite number"),
    ],
)
def test_bad_specs_are_one_line_errors_naming_the_spec(spec: str, message: str) -> None:
    with pytest.raises(GridError) as info:
        parse_sweeps([spec])
    text = str(info.value)
    assert text.startswith(f"--sweep {spec}: ")
    assert message in text
    assert "\n" not in text


def test_a_parameter_swept_twice_is_refused() -> None:
    with pytest.raises(GridError, match="swept twice"):
        parse_sweeps(["min_confidence=0.6", "min-confidence=0.7"])


def test_grid_is_the_cartesian_product_with_min_confidence_fastest() -> None:
    base = Setting(min_confidence=0.7, max_pages=3, window_turns=4)
    grid = build_grid(base, parse_sweeps(["min_confidence=0.6,0.8", "window_turns=1,2", "max_pages=2,5"]))
    assert [(s.window_turns, s.max_pages, s.min_confidence) for s in grid] == [
        (1, 2, 0.6), (1, 2, 0.8), (1, 5, 0.6), (1, 5, 0.8), (2, 2, 0.6), (2, 2, 0.8), (2, 5, 0.6), (2, 5, 0.8),
    ]


def test_knobs_that_are_not_swept_keep_the_base_value() -> None:
    base = base_setting(DecisionOptions(window_turns=6.9, max_pages=None, min_confidence=7))
    assert base == Setting(min_confidence=0.7, max_pages=3, window_turns=6)  # clamped like the reference
    assert build_grid(base, parse_sweeps(["max_pages=1"])) == [Setting(0.7, 1, 6)]
    assert build_grid(base, {}) == [base]


def test_a_setting_keeps_the_other_options_of_the_base() -> None:
    base = DecisionOptions(lexical_arms=False, exclude_slug_prefixes=("drafts/",))
    options = Setting(0.65, 2, 7).options(base)
    assert (options.min_confidence, options.max_pages, options.window_turns) == (0.65, 2, 7)
    assert options.effective_window_turns == 7
    assert options.lexical_arms is False and options.exclude_slug_prefixes == ("drafts/",)
