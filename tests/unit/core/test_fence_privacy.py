"""Synopses never carry a private fence row: every takes and facts fence, closed or not.

A deliberate divergence from the reference (docs/decision-core.md, "Deliberate divergences"): the
reference strips only the first closed fence of each kind. The reference's own first-fence
functions are pinned here too, so the divergence stays confined to the synopsis.
"""

from __future__ import annotations

from pipeline.braindir import iter_brain_dir
from pipeline.core import fences
from pipeline.core.fences import (
    FACTS_BEGIN,
    FACTS_END,
    TAKES_BEGIN,
    TAKES_END,
    strip_every_facts_fence_world,
    strip_every_takes_fence,
    strip_facts_fence_world,
    strip_takes_fence,
)
from pipeline.core.synopsis import safe_synopsis
from tests.unit.core.conftest import CONFORMANCE

CONFORMANCE_BRAIN = CONFORMANCE / "brain"

HEADER = "| # | claim | kind | confidence | visibility | notability | valid_from | valid_until | source | context |"


def facts(*rows: tuple[int, str, str]) -> str:
    lines = [HEADER, "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {n} | {claim} | fact | 0.9 | {vis} | medium | | | | |" for n, claim, vis in rows]
    return FACTS_BEGIN + "\n" + "\n".join(lines) + "\n" + FACTS_END


def test_a_second_takes_fence_is_stripped_too() -> None:
    body = f"{TAKES_BEGIN}\none\n{TAKES_END}\n{TAKES_BEGIN}\nPRIVATE second take\n{TAKES_END}\nPublic line."
    assert "PRIVATE" in strip_takes_fence(body)  # the reference's behaviour
    assert "PRIVATE" not in strip_every_takes_fence(body)
    assert safe_synopsis(body, {}) == "Public line."


def test_an_unterminated_takes_fence_strips_to_the_end() -> None:
    body = f"Public first. More.\n{TAKES_BEGIN}\nPRIVATE take\nno end marker"
    assert strip_every_takes_fence(body) == "Public first. More.\n"
    assert safe_synopsis(f"{TAKES_BEGIN}\nPRIVATE take, no end", {}) == ""
    assert safe_synopsis(body, {}) == "Public first."


def test_every_facts_fence_keeps_world_rows_only() -> None:
    body = facts((1, "World one", "world")) + "\n" + facts((1, "PRIVATE fact", "private"), (2, "World two", "world"))
    assert "PRIVATE" in strip_facts_fence_world(body)  # the reference re-renders the first fence only
    stripped = strip_every_facts_fence_world(body)
    assert "PRIVATE" not in stripped and "World one" in stripped and "World two" in stripped
    assert "PRIVATE" not in safe_synopsis(body, {})


def test_an_unterminated_facts_fence_strips_to_the_end() -> None:
    body = "Intro.\n" + facts((1, "PRIVATE fact", "private")).removesuffix(FACTS_END) + "\nmore prose"
    assert strip_every_facts_fence_world(body) == "Intro.\n"
    assert safe_synopsis(FACTS_BEGIN + "\nPRIVATE row text", {}) == ""


def test_takes_inside_an_unterminated_facts_fence_never_leak() -> None:
    body = f"{FACTS_BEGIN}\n{TAKES_BEGIN}\nPRIVATE\n{TAKES_END}\nPRIVATE too"
    assert "PRIVATE" not in safe_synopsis(body, {})


def test_no_conformance_page_changes_synopsis() -> None:
    """The divergence only bites bodies the reference would leak from: none in the conformance brain."""
    pages, _ = iter_brain_dir(CONFORMANCE_BRAIN)
    fenced = [p for p in pages if fences.TAKES_BEGIN in p.compiled_truth or fences.FACTS_BEGIN in p.compiled_truth]
    assert len(fenced) > 100
    for page in fenced:
        reference_body = strip_facts_fence_world(strip_takes_fence(page.compiled_truth))
        every_body = strip_every_facts_fence_world(strip_every_takes_fence(page.compiled_truth))
        assert reference_body == every_body, page.slug
