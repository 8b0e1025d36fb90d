"""Reference quirks (reference-behaviour.md §16) and JavaScript semantics the port must keep, one small case each."""

from __future__ import annotations

import pytest

from pipeline.core.brain import BrainIndex, DuplicatePage
from pipeline.core.extract import extract_candidates
from pipeline.core.fences import strip_takes_fence
from pipeline.core.jscompat import (
    js_number,
    js_number_str,
    js_parse_float,
    js_parse_int,
    js_to_fixed,
    utf16_len,
)
from pipeline.core.op import volunteer_context
from pipeline.core.pages import AliasRow, Page
from pipeline.core.synopsis import clip, safe_synopsis
from pipeline.core.window import parse_watch_line, parse_window


def strong(text: str) -> list[str]:
    return [d for d, _, _, weak in extract_candidates(text) if not weak]


def people(n: int) -> BrainIndex:
    return BrainIndex.build([Page(i, f"people/p{i}", f"Person Alpha{i}") for i in range(1, n + 1)])


def test_resolver_pool_is_capped_at_ten_before_exclusion() -> None:
    """§16.12: exclusion happens after the pool of 10, so 10 excluded hits starve the rest."""
    brain = people(12)
    window = "user: " + " and ".join(f"Person Alpha{i}" for i in range(1, 13))
    first_ten = [f"people/p{i}" for i in range(1, 11)]
    assert volunteer_context(window, brain, exclude_slugs=first_ten)["pages"] == []
    assert [p["slug"] for p in volunteer_context(window, brain, exclude_slugs=first_ten[:9])["pages"]] == ["people/p10"]


def test_exclusion_ignores_the_source() -> None:
    """§16.10: the same slug in two sources is excluded once for both."""
    brain = BrainIndex.build([Page(1, "people/a-b", "A B"), Page(2, "people/a-b", "A B", source_id="team")])
    assert len(volunteer_context("user: ping A B", brain, source_ids=["default", "team"])["pages"]) == 2
    assert volunteer_context("user: ping A B", brain, source_ids=["default", "team"], exclude_slugs={"people/a-b"})["pages"] == []


def test_curly_apostrophe_is_not_in_the_stopword_list() -> None:
    """§16.18: ``I’m`` survives as a candidate, ``I'm`` does not; ``It’s`` sheds its possessive."""
    assert strong("I’m here") == ["I’m"]
    assert strong("I'm here") == []
    assert strong("It’s Alice") == ["It’s Alice", "Alice"]


def test_dash_block_removal_eats_a_horizontal_rule() -> None:
    """§16.16: the first ``---`` ... ``---`` span goes, even when it is prose between two rules."""
    body = "Intro line one.\n---\nHidden by the rule pair.\n---\nAfter."
    assert safe_synopsis(body, {}) == "Intro line one."
    assert safe_synopsis("---\nHidden.\n---\nShown. Not this.", {}) == "Shown."
    assert safe_synopsis("---\nonly one rule\nText.", {}) == "---"  # nothing closes it: the rule is the first line
    assert safe_synopsis("# Title\n<!-- c -->\n\nReal. More", {}) == "Real."


def test_summary_must_be_a_nonblank_string() -> None:
    assert safe_synopsis("Body. More.", {"summary": "  Sum  mary \n"}) == "Sum mary"
    for bad in (5, ["x"], "", "   \u00a0"):
        assert safe_synopsis("Body. More.", {"summary": bad}) == "Body."


def test_fourteen_column_header_when_a_world_row_is_typed() -> None:
    fence = (
        "<!--- gbrain:facts:begin -->\n"
        "| # | claim | kind | confidence | visibility | notability | valid_from | valid_until | source | context |"
        " claim_metric | claim_value | claim_unit | claim_period |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
        "| 1 | ARR | fact | 0.9 | world | high | | | x | | arr | 1,000 | USD | annual |\n"
        "<!--- gbrain:facts:end -->\nProse."
    )
    synopsis = safe_synopsis(fence, {})
    assert synopsis.startswith("| # | claim |") and synopsis.endswith("…") and len(synopsis) == 160
    private = fence.replace("| world |", "| private |")
    assert safe_synopsis(private, {}) == (
        "| # | claim | kind | confidence | visibility | notability | valid_from | valid_until | source | context |"
    )


def test_takes_fence_never_leaks() -> None:
    body = "<!--- gbrain:takes:begin -->\nSECRET\n<!--- gbrain:takes:end -->\nPublic. More."
    assert safe_synopsis(body, {}) == "Public."
    # the reference keeps an unterminated fence whole; synopses diverge on purpose (test_fence_privacy.py)
    assert strip_takes_fence("<!--- gbrain:takes:begin -->\nSECRET no end") == "<!--- gbrain:takes:begin -->\nSECRET no end"
    assert safe_synopsis("<!--- gbrain:takes:begin -->\nSECRET no end", {}) == ""


def test_prefix_grammar_is_javascript_not_python() -> None:
    """ASCII-only case folding (``ſ`` is not ``s``), ``.`` stops at any line terminator, ``$`` is the end."""
    assert parse_window("u\u017fer: x") == [("user", "u\u017fer: x")]
    assert parse_window("user: a\rb\nassistant: ok") == [("user", "user: a\rb"), ("assistant", "ok")]
    assert parse_window("USER:\u2028x") == [("user", "x")]  # JS \s includes U+2028
    assert parse_window("USER: a\u2028b") == [("user", "USER: a\u2028b")]
    assert parse_watch_line("Assistant :  hi \r") == ("assistant", "hi")
    assert parse_watch_line("assistant:   ") is None
    assert parse_watch_line("\ufeff \u3000") is None


def test_lengths_are_utf16_units() -> None:
    """A lone astral capital is two UTF-16 units long, so it passes the 2-character minimum."""
    assert utf16_len("\U0001d400") == 2
    assert strong("see \U0001d400 now") == ["\U0001d400"]


def test_clip_never_splits_a_surrogate_pair() -> None:
    """Deliberate divergence: JS would keep half an emoji (invalid UTF-8); we drop the whole pair."""
    text = "a" * 158 + "\U0001f600" + "tail"
    assert clip(text) == "a" * 158 + "…"
    assert clip("b" * 160) == "b" * 160
    assert clip("c" * 159 + " " + "d") == "c" * 159 + "…"


def test_javascript_number_semantics() -> None:
    assert js_to_fixed(0.125, 2) == "0.13"  # ties away from zero, unlike format(0.125, ".2f")
    assert js_to_fixed(0.8500000000000001, 2) == "0.85"
    assert js_to_fixed(-0.0, 2) == "0.00"
    assert [js_number(s) for s in (" 2.5 ", "", "0x10", "1e3")] == [2.5, 0.0, 16.0, 1000.0]
    assert all(v != v for v in (js_number("abc"), js_number("1,5"), js_parse_int("x1"), js_parse_float("")))
    assert (js_parse_int(" 12abc"), js_parse_float("1.5e2x")) == (12.0, 150.0)
    assert [js_number_str(v) for v in (1.0, 0.5, 0.333, 1e21, 1e-7)] == ["1", "0.5", "0.333", "1e+21", "1e-7"]


def test_brain_index_rules() -> None:
    with pytest.raises(DuplicatePage):
        BrainIndex.build([Page(1, "a", "A"), Page(2, "a", "B")])
    brain = BrainIndex.build(
        [Page(1, "people/x", "X Y"), Page(2, "people/gone", "Gone", deleted=True)],
        [AliasRow("default", "x", "people/x"), AliasRow("default", "x", "people/gone"), AliasRow("default", "x", "people/orphan")],
    )
    assert (brain.page_count, brain.live_page_count, brain.alias_row_count) == (2, 1, 3)
    targets = brain.alias_targets("x")
    assert targets is not None and dict(targets) == {"default": ("people/x",)}
    assert brain.ids_with_title("gone") == ()


def test_no_sources_means_no_pages() -> None:
    assert volunteer_context("user: Person Alpha1", people(1), source_ids=[]) == {"pages": [], "count": 0, "window_turns": 1}
