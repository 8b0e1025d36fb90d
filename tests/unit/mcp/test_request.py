"""The shared request evaluation and the attribution clamps (pure: no server, no database)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pipeline.braindir import load_brain_dir
from pipeline.core.brain import BrainIndex
from pipeline.core.request import (
    RequestDefaults,
    attribution,
    clamp_session_id,
    clamp_turn,
    evaluate,
    source_scope,
)

SAMPLES = Path(__file__).resolve().parents[3] / "pipeline" / "samples"
WINDOW = "user: ping Alice Example and Ronan Galewright and Saoirse Byrne"


@pytest.fixture(scope="module")
def brain() -> BrainIndex:
    return load_brain_dir(SAMPLES / "brain")


@pytest.mark.parametrize(("value", "want"), [
    (7, 7), (7.0, 7), (-3, -3), (0, 0), (2_147_483_647, 2_147_483_647), (-2_147_483_647, -2_147_483_647),
    (2_147_483_648, None), (7.5, None), (True, None), ("7", None), (None, None), (math.nan, None),
    (math.inf, None), (1e300, None), ([7], None),
])
def test_turn_is_logged_only_as_a_small_integer(value: object, want: int | None) -> None:
    assert clamp_turn(value) == want


def test_session_id_is_truncated_to_256_characters() -> None:
    assert clamp_session_id("s" * 300) == "s" * 256
    assert clamp_session_id("abc") == "abc"
    assert clamp_session_id(42) is None and clamp_session_id(None) is None
    emoji = "\U0001f600" * 200  # 400 UTF-16 units: JavaScript's slice keeps 128 whole pairs
    assert clamp_session_id(emoji) == "\U0001f600" * 128
    assert attribution({"session_id": "x", "turn": 2.0}) == ("x", 2)


def test_missing_or_blank_window_is_the_reference_error(brain: BrainIndex) -> None:
    for request in ({}, {"window": "  \n "}, {"window": 3}, {"stats": "true"}):
        outcome = evaluate(request, RequestDefaults(), brain)
        assert not outcome.ok
        assert outcome.result == {"error": "invalid_params", "message": "window is required unless stats: true"}


def test_wrong_types_fall_back_to_defaults_with_warnings(brain: BrainIndex) -> None:
    plain = evaluate({"window": WINDOW}, RequestDefaults(), brain)
    odd = evaluate({"window": WINDOW, "max_pages": "1", "min_confidence": "x", "lexical_arms": 1}, RequestDefaults(),
                   brain)
    assert plain.ok and odd.ok and odd.result == plain.result
    assert len(odd.warnings) == 3 and plain.warnings == []
    capped = evaluate({"window": WINDOW, "max_pages": 1}, RequestDefaults(), brain)
    assert capped.result["count"] == 1 < plain.result["count"]


def test_request_prefixes_add_to_the_configured_ones(brain: BrainIndex) -> None:
    base = evaluate({"window": WINDOW}, RequestDefaults(), brain)
    slugs = [p["slug"] for p in base.pages]
    first, second = slugs[0], slugs[1]
    configured = RequestDefaults(exclude_slug_prefixes=(first,))
    assert [p["slug"] for p in evaluate({"window": WINDOW}, configured, brain).pages] == slugs[1:]
    both = evaluate({"window": WINDOW, "exclude_slug_prefixes": [second]}, configured, brain)
    assert first not in [p["slug"] for p in both.pages] and second not in [p["slug"] for p in both.pages]
    bad = evaluate({"window": WINDOW, "exclude_slug_prefixes": "people/"}, configured, brain)
    assert bad.result == {"error": "invalid_params", "message": "exclude_slug_prefixes must be a list of strings"}


def test_source_ids_must_be_a_list_of_names(brain: BrainIndex) -> None:
    for value in ("default", [""], [1], {}):
        outcome = evaluate({"window": WINDOW, "source_ids": value}, RequestDefaults(), brain)
        assert outcome.result["message"] == "source_ids must be a list of non-empty strings"
    assert evaluate({"window": WINDOW, "source_ids": []}, RequestDefaults(), brain).result["count"] == 0
    null = evaluate({"window": WINDOW, "source_ids": None, "exclude_slug_prefixes": None}, RequestDefaults(), brain)
    assert null.result == evaluate({"window": WINDOW}, RequestDefaults(), brain).result


def test_oversized_window_is_refused_without_deciding(brain: BrainIndex) -> None:
    outcome = evaluate({"window": "user: " + "é" * 2_500_000}, RequestDefaults(), brain)
    assert outcome.result == {"error": "invalid_params", "message": "window is over 5,000,000 bytes"}


def test_stats_source_scope() -> None:
    assert source_scope(None, ["default"]) == ["default"]
    assert source_scope("team", ["default"]) == ["team"]
    assert source_scope(["a", "b"], ["default"]) == ["a", "b"]
    assert source_scope(3, ["default"]) is None and source_scope([], ["default"]) is None
