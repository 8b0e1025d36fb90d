"""Exact parity with the reference on the 450 op and 450 watch conformance sessions.

Every field and the order of pages must match. Our default is the post-snapshot behaviour
(whitespace-collapsed display), so ``expect_post_snapshot`` wins where present; the snapshot
behaviour itself (``collapse_display=False``) is pinned against ``expect``.
"""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.core.brain import BrainIndex
from pipeline.core.op import InvalidParams, volunteer_context
from pipeline.core.session import DecisionOptions, run_lines
from tests.unit.core.conftest import OP_CASES, WATCH_CASES


def run_op(case: dict[str, Any], brain: BrainIndex, *, collapse_display: bool) -> dict[str, Any]:
    opts = case["opts"]
    try:
        result = volunteer_context(
            case["window"],
            brain,
            source_ids=opts.get("source_ids", ["default"]),
            prior_context=opts.get("prior_context"),
            max_pages=opts.get("max_pages"),
            min_confidence=opts.get("min_confidence"),
            lexical_arms=opts.get("lexical_arms", True),
            collapse_display=collapse_display,
        )
    except InvalidParams as exc:
        return exc.to_dict()
    assert result["count"] == len(result["pages"])
    return {"window_turns": result["window_turns"], "pages": result["pages"]}


def run_watch(case: dict[str, Any], brain: BrainIndex, *, collapse_display: bool) -> dict[str, Any]:
    flags = case["flags"]
    options = DecisionOptions(
        window_turns=flags.get("window_turns", 4),
        max_pages=flags.get("max_pages"),
        min_confidence=flags.get("min_confidence"),
        lexical_arms=flags.get("lexical_arms", True),
        collapse_display=collapse_display,
    )
    turns, emitted = run_lines(case["lines"], brain, source_id=flags.get("source", "default"), options=options)
    return {"turns": turns, "emissions": [{"turn": turn, **page.to_dict()} for turn, page in emitted]}


@pytest.mark.parametrize("case", OP_CASES, ids=[c["id"] for c in OP_CASES])
def test_op_case_matches_reference(case: dict[str, Any], conformance_brain: BrainIndex) -> None:
    expected = case.get("expect_post_snapshot", case["expect"])
    assert run_op(case, conformance_brain, collapse_display=True) == expected


@pytest.mark.parametrize("case", WATCH_CASES, ids=[c["id"] for c in WATCH_CASES])
def test_watch_case_matches_reference(case: dict[str, Any], conformance_brain: BrainIndex) -> None:
    expected = case.get("expect_post_snapshot", case["expect"])
    assert run_watch(case, conformance_brain, collapse_display=True) == expected


def test_snapshot_behaviour_without_display_collapse(conformance_brain: BrainIndex) -> None:
    """With the post-snapshot delta off, every case matches the snapshot's own ``expect``."""
    mismatches = [c["id"] for c in OP_CASES if run_op(c, conformance_brain, collapse_display=False) != c["expect"]]
    mismatches += [c["id"] for c in WATCH_CASES if run_watch(c, conformance_brain, collapse_display=False) != c["expect"]]
    assert mismatches == []


def test_post_snapshot_cases_really_differ(conformance_brain: BrainIndex) -> None:
    """The collapse is exercised: some cases have a distinct post-snapshot expectation, and we hit it."""
    post = [c for c in OP_CASES + WATCH_CASES if "expect_post_snapshot" in c]
    assert len(post) >= 5
    for case in post:
        assert case["expect_post_snapshot"] != case["expect"]
