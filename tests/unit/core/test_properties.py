"""Properties of the decision core on generated conversations over the conformance brain."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline.core.brain import BrainIndex
from pipeline.core.extract import extract_candidates, strip_possessive
from pipeline.core.gate import MAX_PAGES_CAP, candidates_by_norm, clamp_max_pages, gate
from pipeline.core.normalize import JS_WHITESPACE, collapse_whitespace, normalize_alias
from pipeline.core.op import decide, volunteer_context
from pipeline.core.resolve import resolve
from pipeline.core.session import DecisionOptions, SessionState, step
from pipeline.core.types import Pointer
from pipeline.core.window import extract_window, parse_window
from tests.unit.core.conftest import load_cases

PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _vocabulary() -> list[str]:
    """Names the brain knows (titles, raw aliases, surnames, lowercase forms) plus filler."""
    pages = load_cases("brain/pages.jsonl")
    words: list[str] = []
    for page in pages[::7]:
        title = page["title"]
        words += [title, title.lower(), title.split()[-1], f"{title}'s", f"@{title.split()[0].lower()}"]
        words += [a for a in page.get("aliases", []) if isinstance(a, str)]
    return [*words, "Did", "Thanks", "Will", "Monday", "ok", "the plan", "what did she say", "田中さんの", "\n", "  "]


VOCAB = _vocabulary()
FILLER = st.sampled_from(["ping", "ask", "and", "about", "meeting with", "what about", "call", ".", "?", "-", "—", ":"])
TEXT = st.lists(st.one_of(st.sampled_from(VOCAB), FILLER, st.text(max_size=6)), min_size=1, max_size=12).map(" ".join)
TURN = st.tuples(st.sampled_from(["user", "assistant"]), TEXT)
RAW_NUMBER = st.one_of(
    st.none(), st.integers(-10, 60), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.5, 2.9, 1e300])
)
SOURCES = st.sampled_from([["default"], ["default", "team"], ["team", "archive"], ["archive"]])

TEMPLATE = re.compile(
    r'(alias match|exact title match|surname match|exact CJK title/slug match|slug match) "(?P<display>.*)"'
    r"(; mentioned in (?P<occ>\d+) of last (?P<size>\d+) turns|; mentioned in the newest turn)?(; assistant-introduced)?",
    re.S,
)


def window_text(turns: list[tuple[str, str]]) -> str:
    return "\n".join(f"{role}: {text}" for role, text in turns)


@PROPS
@given(turns=st.lists(TURN, min_size=1, max_size=6), max_pages=RAW_NUMBER, min_conf=RAW_NUMBER, sources=SOURCES)
def test_never_more_than_five_pages(
    conformance_brain: BrainIndex, turns: list[tuple[str, str]], max_pages: Any, min_conf: Any, sources: list[str]
) -> None:
    result = volunteer_context(
        window_text(turns) + "\nuser: x", conformance_brain, source_ids=sources, max_pages=max_pages, min_confidence=min_conf
    )
    assert result["count"] == len(result["pages"]) <= min(MAX_PAGES_CAP, clamp_max_pages(max_pages))
    keys = [(p["source_id"], p["slug"]) for p in result["pages"]]
    assert len(keys) == len(set(keys))


@PROPS
@given(turns=st.lists(TURN, min_size=1, max_size=6), min_conf=st.sampled_from([None, 0.0, 0.6, 0.75]), sources=SOURCES)
def test_gating_a_gated_set_is_a_no_op(
    conformance_brain: BrainIndex, turns: list[tuple[str, str]], min_conf: Any, sources: list[str]
) -> None:
    cands = extract_window(parse_window(window_text(turns)))
    pointers = resolve(cands, conformance_brain, sources)
    by_norm = candidates_by_norm(cands)
    size = len(parse_window(window_text(turns)))
    once = gate(pointers, by_norm, window_size=size, min_confidence=min_conf, max_pages=5)
    norm_of = {(p.source_id, p.slug): p.matched_norm for p in pointers}
    regated = [
        Pointer(v.display, v.slug, v.source_id, v.synopsis, v.arm, v.confidence, norm_of[(v.source_id, v.slug)])
        for v in once
    ]
    assert gate(regated, by_norm, window_size=size, min_confidence=min_conf, max_pages=5) == once


@PROPS
@given(turns=st.lists(TURN, min_size=1, max_size=12), window=st.sampled_from([1, 2, 4, 8]), max_pages=RAW_NUMBER)
def test_a_slug_is_volunteered_at_most_once_per_session(
    conformance_brain: BrainIndex, turns: list[tuple[str, str]], window: int, max_pages: Any
) -> None:
    state = SessionState()
    options = DecisionOptions(window_turns=window, max_pages=max_pages, min_confidence=0.0)
    seen: list[str] = []
    for role, text in turns:
        seen += [p.slug for p in step(state, role, text, conformance_brain, source_id="default", options=options).pages]
    assert len(seen) == len(set(seen))
    assert set(seen) == set(state.surfaced)


@PROPS
@given(turns=st.lists(TURN, min_size=1, max_size=6), sources=SOURCES)
def test_rationale_holds_only_labels_that_matched_a_page(
    conformance_brain: BrainIndex, turns: list[tuple[str, str]], sources: list[str]
) -> None:
    result = volunteer_context(window_text(turns), conformance_brain, source_ids=sources, min_confidence=0.0, max_pages=5)
    for p in result["pages"]:
        m = TEMPLATE.fullmatch(p["rationale"])
        assert m is not None, p["rationale"]
        display = m.group("display")
        assert display == p["display"]
        page = conformance_brain.live_page(p["source_id"], p["slug"])
        assert page is not None
        surface = strip_possessive(display[1:] if display.startswith("@") else display)
        assert (
            normalize_alias(surface) == normalize_alias(page.title)
            or display == collapse_whitespace(page.title)
            or display == page.slug.rsplit("/", 1)[-1]
        ), (display, page.title)
        if m.group("size"):
            assert int(m.group("size")) == result["window_turns"]


@PROPS
@given(turns=st.lists(TURN, min_size=1, max_size=10), window=st.sampled_from([1, 3, 4, 64]))
def test_incremental_state_equals_recomputing_the_window(
    conformance_brain: BrainIndex, turns: list[tuple[str, str]], window: int
) -> None:
    state = SessionState()
    options = DecisionOptions(window_turns=window)
    pushed: set[str] = set()
    kept: list[tuple[str, str]] = []
    for role, text in turns:
        got = step(state, role, text, conformance_brain, source_id="default", options=options)
        if got.skipped:
            continue
        kept = [*kept, (role, text.strip(JS_WHITESPACE))][-window:]
        expected = decide(
            [(r, extract_candidates(t)) for r, t in kept], conformance_brain, source_ids=["default"], exclude_slugs=pushed
        )
        assert got.pages == expected
        pushed.update(p.slug for p in expected)
        state = SessionState.from_bytes(state.to_bytes())


@pytest.mark.parametrize("raw", [math.nan, math.inf, -math.inf, -1, 0, 0.5, 0.999, True, "3", None])
def test_max_pages_nonsense_means_three(raw: Any) -> None:
    assert clamp_max_pages(raw) == 3


def test_python_whitespace_is_js_whitespace_but_for_the_listed_characters() -> None:
    """``collapse_whitespace`` splits with ``str.split`` a text without ``_PY_ONLY_SPACES`` or
    U+FEFF: Python's whitespace must be JS whitespace, less U+FEFF, plus those, on every code point."""
    from pipeline.core.normalize import _PY_ONLY_SPACES

    python = {chr(cp) for cp in range(0x110000) if chr(cp).isspace()}
    assert python == (set(JS_WHITESPACE) - {"\ufeff"}) | set(_PY_ONLY_SPACES)


@settings(max_examples=1000, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(["a", "b", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\u200b", "é",
                                               *JS_WHITESPACE])))
def test_fast_collapse_check_is_sound(text: str) -> None:
    """``collapse_whitespace`` skips its regex only when that provably changes nothing: it must equal
    the plain ``s.replace(/\\s+/g, ' ').trim()``."""
    from pipeline.core.normalize import is_collapsed

    plain = re.sub(f"[{re.escape(JS_WHITESPACE)}]+", " ", text).strip(JS_WHITESPACE)
    assert collapse_whitespace(text) == plain
    if is_collapsed(text):
        assert plain == text


ASCII_TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=80) | st.text(
    alphabet=st.sampled_from(list("AZaz09'-.@ \t\n\x0bBob Lee's x-ray O'Neil J.R.R. Tolkien")), max_size=80)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=ASCII_TEXT)
def test_ascii_patterns_match_exactly_what_the_unicode_ones_do(text: str) -> None:
    from pipeline.core import extract

    assert [(m.start(), m.group()) for m in extract._CAP_RUN_ASCII_RE.finditer(text)] == [
        (m.start(), m.group()) for m in extract._CAP_RUN_RE.finditer(text)]
    assert extract._WEAK_TOKEN_ASCII_RE.findall(text) == extract._WEAK_TOKEN_RE.findall(text)
    assert extract.weak_tokens_ascii(text) == extract._WEAK_TOKEN_ASCII_RE.findall(text)


@PROPS
@given(turns=st.lists(TURN, min_size=0, max_size=8))
def test_merged_count_is_the_length_of_the_merge(turns: list[tuple[str, str]]) -> None:
    from pipeline.core.window import merge_window, merged_count

    cached = [(role, extract_candidates(text)) for role, text in turns]
    assert merged_count(cached) == len(merge_window(cached))


@PROPS
@given(turns=st.lists(TURN, min_size=1, max_size=6), sources=SOURCES)
def test_skipping_a_dead_window_changes_neither_pages_nor_tally(
    conformance_brain: BrainIndex, turns: list[tuple[str, str]], sources: list[str]
) -> None:
    from pipeline.core.tally import DecisionTally

    cached = [(role, extract_candidates(text)) for role, text in turns]
    full, quick = DecisionTally(), DecisionTally()
    forced = decide(cached, conformance_brain, source_ids=sources, tally=full, resolvable=True)
    assert decide(cached, conformance_brain, source_ids=sources, tally=quick) == forced
    assert decide(cached, conformance_brain, source_ids=sources) == forced
    assert quick == full


@PROPS
@given(turns=st.lists(TURN, min_size=1, max_size=8), sources=SOURCES, lexical=st.booleans())
def test_deciding_over_the_relevant_norms_only_changes_neither_pages_nor_tally(
    conformance_brain: BrainIndex, turns: list[tuple[str, str]], sources: list[str], lexical: bool
) -> None:
    from pipeline.core.resolve import turn_relevance
    from pipeline.core.tally import DecisionTally

    cached = [(role, extract_candidates(text)) for role, text in turns]
    keep = frozenset().union(*[turn_relevance(cands, conformance_brain)[1] for _, cands in cached])
    full, sparse = DecisionTally(), DecisionTally()
    expected = decide(cached, conformance_brain, source_ids=sources, lexical_arms=lexical, tally=full, resolvable=True)
    assert decide(cached, conformance_brain, source_ids=sources, lexical_arms=lexical, tally=sparse, resolvable=True,
                  keep=keep) == expected
    assert sparse == full


CROWDED_TEXT = st.lists(st.one_of(st.sampled_from(VOCAB), FILLER), min_size=8, max_size=24).map(" ".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(st.tuples(st.sampled_from(["user", "assistant"]), CROWDED_TEXT), min_size=3, max_size=8),
       sources=SOURCES, lexical=st.booleans())
def test_a_crowded_window_merged_whole_then_kept_decides_as_the_full_merge(
    conformance_brain: BrainIndex, turns: list[tuple[str, str]], sources: list[str], lexical: bool
) -> None:
    """Windows with more sightings than the merge keeps (12 strong or 32 weak) take the whole-merge
    path of ``merge_window(keep=)`` when their distinct norms exceed a cap too: the kept norms of the
    whole merge, in its order (and else the kept norms alone, in the same order: only the ``order``
    tie-break field, which counts kept norms there, differs). Decisions and tallies must equal those
    of the plain full merge."""
    from hypothesis import assume

    from pipeline.core.extract import MAX_CANDIDATES, MAX_WEAK_CANDIDATES
    from pipeline.core.resolve import turn_relevance
    from pipeline.core.tally import DecisionTally
    from pipeline.core.window import merge_window

    cached = [(role, extract_candidates(text)) for role, text in turns]
    weak = sum(1 for _, cands in cached for _display, _query, _norm, is_weak in cands if is_weak)
    strong = sum(len(cands) for _, cands in cached) - weak
    assume(strong > MAX_CANDIDATES or weak > MAX_WEAK_CANDIDATES)
    keep = frozenset().union(*[turn_relevance(cands, conformance_brain)[1] for _, cands in cached])
    kept = merge_window(cached, keep)
    assert [c._replace(order=0) for c in kept] == [c._replace(order=0) for c in merge_window(cached) if c.norm in keep]
    assert all(c.norm in keep for c in kept)
    full, sparse = DecisionTally(), DecisionTally()
    expected = decide(cached, conformance_brain, source_ids=sources, lexical_arms=lexical, tally=full, resolvable=True)
    assert decide(cached, conformance_brain, source_ids=sources, lexical_arms=lexical, tally=sparse, resolvable=True,
                  keep=keep) == expected
    assert sparse == full


LINE_PIECES = st.sampled_from(["user", "USER", "uSeR", "assistant", "ASSISTANT", "Assist", "u\u017fer", "\u212aser", ":",
                               " ", "\t", "\r", "\n", "\u2028", "\u2029", "\u00a0", "\u3000", "\ufeff", "x", "é", "ok"])


@settings(max_examples=2000, deadline=None)
@given(line=st.lists(LINE_PIECES, max_size=8).map("".join))
def test_turn_prefix_answers_like_the_turn_prefix_regex(line: str) -> None:
    """``turn_prefix`` replaced ``TURN_PREFIX_RE.match`` on every window line; same role and body,
    and ``_split_lines`` splits like ``re.split(r"\\r?\\n")``."""
    from pipeline.core.window import TURN_PREFIX_RE, _split_lines, turn_prefix

    m = TURN_PREFIX_RE.match(line)
    assert turn_prefix(line) == ((m.group(1).lower(), m.group(2)) if m else None)
    if not any(t in line for t in "\r\n\u2028\u2029"):  # what parse_window tells it of such a line
        assert turn_prefix(line, False) == turn_prefix(line)
    assert _split_lines(line) == re.split(r"\r?\n", line)


@settings(max_examples=1500, deadline=None)
@given(text=st.lists(LINE_PIECES, max_size=14).map("".join))
@example(text="user: a\u2028b\nassistant: c")
def test_parse_window_answers_like_the_prefix_regex_line_by_line(text: str) -> None:
    """``parse_window`` with ``turn_prefix`` told once per window whether its lines may hold a
    terminator, against the reference's steps: split lines, match the prefix regex, continue turns."""
    from pipeline.core.normalize import JS_WHITESPACE as WS
    from pipeline.core.window import TURN_PREFIX_RE

    turns: list[tuple[str, list[str]]] = []
    for line in re.split(r"\r?\n", text):
        m = TURN_PREFIX_RE.match(line)
        if m:
            turns.append((m.group(1).lower(), [m.group(2)]))
        elif turns:
            turns[-1][1].append(line)
        elif line.strip(WS):
            turns.append(("user", [line]))
    expected = []
    for role, lines in turns:
        body = ""
        for line in lines:
            body = line if not body else body + "\n" + line
        if body.strip(WS):
            expected.append((role, body.strip(WS)))
    assert (parse_window(text) if text.strip(WS) else []) == expected


def _reference_extract(text: str) -> list[Any]:
    """Candidates of one turn the straightforward way (the Unicode patterns, a list per norm, no
    word cache, no capital pre-check): what ``extract._extract`` must equal."""
    from pipeline.core import extract as ex

    acc: dict[str, list[Any]] = {}  # norm -> [first sighting, seen mid-sentence]
    for handle in ex._HANDLE_RE.findall(text):
        sighting = ex._sighting("@" + handle, handle)
        if sighting[2]:
            acc.setdefault(sighting[2], [sighting, False])[1] = True
    for m in ex._CAP_RUN_RE.finditer(text):
        run, trimmed = ex._surface(m.group(0))
        if run[2]:
            entry = acc.setdefault(run[2], [run, False])
            entry[1] = entry[1] or not ex.is_at_sentence_start(text, m.start())
        if trimmed is not None and trimmed[2]:
            acc.setdefault(trimmed[2], [trimmed, False])[1] = True
    out: list[Any] = []
    strong: set[str] = set()
    for norm, (sighting, seen_mid) in acc.items():
        if sighting[3] == ex._DROP or (sighting[3] == ex._KEEP_IF_MID and not seen_mid):
            continue
        out.append((sighting[0], sighting[1], norm, False))
        strong.add(norm)
        if len(out) >= ex.MAX_CANDIDATES:
            break
    weak_seen: set[str] = set()
    for token in ex._WEAK_TOKEN_RE.findall(text):
        if len(weak_seen) >= ex.MAX_WEAK_CANDIDATES:
            break
        weak = ex._weak(token)
        if weak is not None and weak[2] not in strong and weak[2] not in weak_seen:
            weak_seen.add(weak[2])
            out.append(weak)
    if ex.has_cjk(text):
        ex._cjk_grams(text, out, strong, weak_seen)
    return out


WORDY_TEXT = st.lists(st.one_of(st.sampled_from(VOCAB), FILLER, st.sampled_from(
    ["x-ray", "re-do", "foo@bar", "ab@cdef", "it's", "Bob's", "o'neil", "state-of-the-art", "a1b2", "\x1c", "\x1f",
     "\u00a0", "Zoë", "ÉCOLE", "ω", "the", "THE", "42", "4.2"]),
    st.text(alphabet="abcdefg(,/", min_size=3, max_size=12)), min_size=1, max_size=60).map(" ".join)
"""Many distinct lowercase words, some of several tokens (``abc,def``), to cross the weak cap inside a word."""


_CAP_IN_A_WORD = " ".join([f"q{a}{b}" for a in "abcdefg" for b in "abcde"][:31]) + " qzy,qzz"
"""31 weak words, then a word of two: the weak cap (32) falls inside that word."""


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=ASCII_TEXT | TEXT | WORDY_TEXT)
@example(text=_CAP_IN_A_WORD)
def test_extraction_equals_the_straightforward_extraction(text: str) -> None:
    """``_extract`` skips the capital scan of an ASCII text whose ``lower()`` is itself, keeps a
    sighting's candidate tuple in the surface cache, and takes an ASCII text's weak candidates word
    by word from the word cache (``_word_weak``); none of it may change a candidate or its order,
    whether the caches are cold or warm."""
    from pipeline.core import extract as ex

    expected = _reference_extract(text)
    for cache in (ex._surface_cache, ex._handle_cache, ex._weak_cache, ex._word_cache):
        cache.clear()
    assert ex._extract(text) == expected
    assert ex._extract(text) == expected  # warm caches


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=ASCII_TEXT | TEXT | WORDY_TEXT)
@example(text="Alice\tBob  Carol\u00a0Dave\x1cEve Zoë Ann\ufeffLee")
@example(text="Clarice\nCook Ann\x1dLee Bo\r\nCy Di\x0bEd")
def test_a_run_splits_into_the_tokens_of_the_whitespace_regex(text: str) -> None:
    """``run_tokens`` (``str.split`` on printable ASCII runs) against the JS-whitespace regex split,
    on every run either run pattern finds."""
    from pipeline.core import extract as ex

    runs = [m[0] for m in ex._CAP_RUN_RE.finditer(text)]
    if text.isascii():
        runs += [m[0] for m in ex._CAP_RUN_ASCII_RE.finditer(text)]
    for run in runs:
        assert ex.run_tokens(run) == ex._WS_SPLIT_RE.split(run)


def test_no_printable_character_but_the_space_is_whitespace() -> None:
    """What lets ``run_tokens`` split a printable run with ``str.split``: on every code point, a
    printable character other than the space is neither JS whitespace nor Python's."""
    from pipeline.core import extract as ex

    for cp in range(0x110000):
        ch = chr(cp)
        if ch.isprintable() and ch != " ":
            assert ex._HAS_WS_RE.match(ch) is None and ("a" + ch + "b").split() == ["a" + ch + "b"], hex(cp)
        if cp < 128 and not 0x1C <= cp <= 0x1F:  # ASCII: the same whitespace for both, but U+001C..U+001F
            assert (ex._HAS_WS_RE.match(ch) is not None) == (len(("a" + ch + "b").split()) == 2), hex(cp)


WINDOWS = st.lists(st.lists(TURN, min_size=1, max_size=4), min_size=1, max_size=6)


@PROPS
@given(windows=WINDOWS, lexical=st.booleans())
def test_reused_pointers_and_slug_claims_resolve_as_fresh_ones(
    conformance_brain: BrainIndex, windows: list[list[tuple[str, str]]], lexical: bool
) -> None:
    """The resolver reuses the pointer it last built for a page when the arm, the norm and the label
    are the same, keeps what arm 2 reads of a row per page (``_row_facts``), and claims pages by
    slug alone when one source is in scope. Windows resolved one
    after another (the same pages under other arms, norms and labels) must give the pointers of a
    fresh build each time, and the same as a scope with a second source that has nothing."""
    from pipeline.core import resolve as r

    merged = [extract_window(turns) for turns in windows]
    expected = []
    for candidates in merged:
        r._pointers.clear()
        r._row_facts.clear()
        expected.append(resolve(candidates, conformance_brain, ["default"], lexical_arms=lexical))
    r._pointers.clear()
    r._row_facts.clear()
    assert [resolve(c, conformance_brain, ["default"], lexical_arms=lexical) for c in merged] == expected
    assert [resolve(c, conformance_brain, ["default", "no-such-source"], lexical_arms=lexical) for c in merged] == expected


@settings(max_examples=3000, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("aZ09 .-'\"`[]()\t\n\u00a0\u3000\ufeff\u212b\uff21é")), max_size=10)
       | ASCII_TEXT | TEXT | st.text(max_size=12) | st.text(alphabet=st.sampled_from(list(
           "\u304b\u3099\u309a\u309b\u309f\u30ff\u30ab\u4e2d\uac00\u1100\u1161\u0130\u00c5\u212b\u0301eE "
           "\u02b0\u2160\u00b2\u1e9e\u00df\u03a3\u0345\ufb01\u2028\u180e\u200b")), max_size=8))
@example(text="\u304b\u3099")  # hiragana ka + combining voiced mark: NFKC composes them
@example(text="\u309b")  # a spacing voiced mark: NFKC makes it a space and the combining mark
@example(text="\u0130")  # İ: its lowercase is two characters
@example(text="zo\u00eb's")
def test_the_plain_shortcut_normalizes_like_every_step(text: str) -> None:
    """``normalize_alias`` only lowercases a text ``is_plain`` accepts; that must be what the whole
    normalisation (NFKC, whitespace, wrappers, trims) gives, for any text."""
    from pipeline.core import normalize

    assert normalize.normalize_alias(text) == normalize._normalize_fully(text)


@PROPS
@given(turns=st.lists(TURN, min_size=1, max_size=6), max_pages=RAW_NUMBER, min_conf=RAW_NUMBER, sources=SOURCES,
       lexical=st.booleans())
def test_gating_pointers_without_synopses_gives_the_pages_of_full_pointers(
    conformance_brain: BrainIndex, turns: list[tuple[str, str]], max_pages: Any, min_conf: Any, sources: list[str],
    lexical: bool
) -> None:
    """The decision resolves without synopses and the gate makes them for the pages it passes: the
    pages must be those of gating the full pointers, and the bare pointers the full ones minus it."""
    from pipeline.core.resolve import resolve_with_index
    from pipeline.core.window import merge_window

    cached = [(role, extract_candidates(text)) for role, text in turns]
    merged = merge_window(cached)
    full = resolve(merged, conformance_brain, sources, lexical_arms=lexical)
    options: dict[str, Any] = {"window_size": len(cached), "max_pages": max_pages, "min_confidence": min_conf}
    expected = gate(full, candidates_by_norm(merged), **options)
    bare, by_norm = resolve_with_index(merged, conformance_brain, sources, lexical_arms=lexical, synopses=False)
    assert bare == [p._replace(synopsis="") for p in full]
    assert gate(bare, by_norm, brain=conformance_brain, **options) == expected
    assert decide(cached, conformance_brain, source_ids=sources, lexical_arms=lexical, max_pages=max_pages,
                  min_confidence=min_conf) == expected


DASH_PIECES = st.sampled_from(["---", "--", "-", "\n", "\r", "\u2028", "\u2029", "\u0085", " ", "\t", "\u00a0", "\ufeff",
                               "x", "é", "# T", "source: import"])


@settings(max_examples=3000, deadline=None)
@given(text=st.lists(DASH_PIECES, max_size=12).map("".join))
def test_the_dash_block_is_stripped_like_the_dash_block_regex(text: str) -> None:
    """``strip_dash_block`` finds the block with ``str.find``; the reference's ``/^---[\\s\\S]*?---\\s*/m``
    (its JS meaning: ``^`` after any line terminator, JS whitespace), first match removed, must agree."""
    from pipeline.core.jscompat import JS_WS
    from pipeline.core.synopsis import strip_dash_block

    regex = re.compile(f"(?:^|(?<=[\\n\\r\\u2028\\u2029]))---[\\s\\S]*?---[{JS_WS}]*")
    assert strip_dash_block(text) == regex.sub("", text, count=1)


@settings(max_examples=1000, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(["a", " ", "é", "\uffff", "\U00010000", "\U0001d400", "田"]), max_size=12)
       | st.text(max_size=12))
def test_utf16_length_is_the_length_of_the_utf16_encoding(text: str) -> None:
    from pipeline.core.jscompat import utf16_len

    assert utf16_len(text) == len(text.encode("utf-16-le", "surrogatepass")) // 2


def _utf16_prefix_by_characters(text: str, units: int) -> str:
    """``utf16_prefix`` as it was: the characters of ``text`` one by one while they fit."""
    out: list[str] = []
    used = 0
    for ch in text:
        width = 2 if ch > "\uffff" else 1
        if used + width > units:
            break
        out.append(ch)
        used += width
    return "".join(out)


@settings(max_examples=2000, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(["a", " ", "é", "\uffff", "\U00010000", "\U0001d400", "田", "\ud800"]),
                    max_size=14) | st.text(max_size=14), units=st.integers(0, 16))
def test_the_utf16_prefix_keeps_the_characters_that_fit(text: str, units: int) -> None:
    """``utf16_prefix`` slices when its head has no astral character (found by the length of its
    encoding); it must keep what the walk over the characters keeps."""
    from pipeline.core.jscompat import utf16_prefix

    assert utf16_prefix(text, units) == _utf16_prefix_by_characters(text, units)


LONG_LINE = st.lists(st.sampled_from(["word", " ", "  ", "\t", "\u00a0", "é", "\U0001d400", "田中", ".", "x" * 37,
                                      " " * 50, "\u3000"]), max_size=400).map("".join)


@settings(max_examples=500, deadline=None)
@given(text=LONG_LINE | st.text(max_size=20))
@example(text="a" * 639 + " " * 700 + "b")
@example(text=" " * 700 + "b")
@example(text="\U0001d400" * 200)
def test_a_long_text_clips_from_its_collapsed_head_as_from_the_whole(text: str) -> None:
    """``clip_collapsed`` collapses only the head of a long text when that is enough; it must give
    ``clip(collapse_whitespace(text))``."""
    from pipeline.core.synopsis import clip, clip_collapsed

    assert clip_collapsed(text) == clip(collapse_whitespace(text))


UNICODE_WORDS = st.text(alphabet=st.sampled_from(list("aZé\u0301ÉßǅʰΩωдЖ田カ가٣²Ⅳ'’@-_ .,\u00a0\u2028x1")), max_size=40)


@settings(max_examples=2000, deadline=None)
@given(text=UNICODE_WORDS | st.text(max_size=30))
def test_weak_tokens_are_the_weak_token_regex_matches(text: str) -> None:
    """``weak_tokens`` finds runs and cuts them instead of trying the look-behind everywhere."""
    from pipeline.core import extract

    assert extract.weak_tokens(text) == extract._WEAK_TOKEN_RE.findall(text)


SLUG_TEXT = (st.text(alphabet=st.sampled_from(list("aZz09 -_.'\t\n\x1c/Aé\u0301ÅﬁΩ田\u00a0")), max_size=16) | ASCII_TEXT
             | TEXT | st.text(alphabet=st.sampled_from(list("ab9-'")), max_size=10)
             | st.text(alphabet=st.sampled_from(list("田中さんのカタカナー\u309b\u309f\u30ff한\ud7a3\ud7afａ")), max_size=6))


@settings(max_examples=2000, deadline=None)
@given(text=SLUG_TEXT)
@example(text="")
@example(text=" Ada  Lovelace ")
@example(text="o'neil-x")
@example(text="\u309b\u30ff")
def test_slugify_gives_what_every_step_gives(text: str) -> None:
    """``slugify`` takes shortcuts (ASCII text; one substitution for the combining marks); it must
    give what the reference's steps give, one by one."""
    import unicodedata

    from pipeline.core.normalize import slugify

    steps = unicodedata.normalize("NFKD", text.lower())
    steps = "".join(ch for ch in steps if not ("\u0300" <= ch <= "\u036f"))
    steps = re.sub("-+", "-", re.sub("[^a-z0-9]+", "-", steps)).strip("-")
    assert slugify(text) == steps


@settings(max_examples=1000, deadline=None)
@given(text=st.text(alphabet=st.characters(max_codepoint=127), max_size=16))
@example(text="--A-b--")
def test_the_ascii_slug_is_the_substitution(text: str) -> None:
    """``_ascii_slug`` (a byte table, split and join) against the substitution it replaces."""
    from pipeline.core.normalize import _ascii_slug

    assert _ascii_slug(text) == re.sub("[^a-z0-9]+", "-", text).strip("-")


@settings(max_examples=1000, deadline=None)
@given(text=SLUG_TEXT | st.text(alphabet=st.sampled_from(list(JS_WHITESPACE + "ab \x1c\x1f\x85\u200b")), max_size=6))
def test_has_whitespace_answers_like_the_js_whitespace_regex(text: str) -> None:
    from pipeline.core import extract

    assert extract.has_whitespace(text) == (extract._HAS_WS_RE.search(text) is not None)


def test_no_character_of_the_cjk_ranges_slugifies_to_anything() -> None:
    """``slugify`` answers ``''`` for a text of the extractor's CJK ranges without NFKD: each of their
    characters, lowercased and decomposed, holds no ``a-z`` or ``0-9`` (so no text of them does)."""
    import unicodedata

    for start, end in ((0x4E00, 0x9FFF), (0x3040, 0x30FF), (0xAC00, 0xD7AF)):
        for cp in range(start, end + 1):
            assert re.search("[a-z0-9]", unicodedata.normalize("NFKD", chr(cp).lower())) is None, hex(cp)


def test_no_first_character_the_surname_test_decides_alone_is_misjudged() -> None:
    """``_surname_token`` judges ``\\p{Lu}`` of an ASCII first character as A-Z and of one of the
    extractor's CJK ranges as never: the regex must agree on each of those code points."""
    from pipeline.core.extract import starts_uppercase

    for start, end in ((0x0, 0x7F), (0x4E00, 0x9FFF), (0x3040, 0x30FF), (0xAC00, 0xD7AF)):
        for cp in range(start, end + 1):
            assert starts_uppercase(chr(cp) + "x") == ("A" <= chr(cp) <= "Z"), hex(cp)


@settings(max_examples=2000, deadline=None)
@given(query=SLUG_TEXT)
@example(query="Lee")
@example(query="Le\x0be")
@example(query="Lé\x1ce")
@example(query="田中さん")
@example(query="Éva")
@example(query="Ab")
def test_the_ascii_surname_test_answers_like_the_regexes(query: str) -> None:
    """The surname token's ASCII shortcut against the reference's tests (JS ``\\s``, UTF-16 length, ``\\p{Lu}``)."""
    from pipeline.core.brain import _surname_token
    from pipeline.core.extract import has_whitespace, starts_uppercase
    from pipeline.core.jscompat import utf16_len

    armed = not has_whitespace(query) and utf16_len(query) >= 3 and starts_uppercase(query)
    assert _surname_token(query, query.lower()) == (query.lower() if armed else None)


@settings(max_examples=2000, deadline=None)
@given(inner=st.text(alphabet=st.sampled_from(list("|\\ a\t\u00a0x")), max_size=16))
def test_a_row_without_escaped_pipes_splits_into_the_cells_of_the_walk(inner: str) -> None:
    """A facts row without ``\\|`` is split at every pipe; the character walk must agree."""
    from pipeline.core import fences

    assert fences.parse_row_cells(f"|{inner}|") == fences._escaped_row_cells(inner)


def _reference_synopsis_of_body(body: str) -> str:
    """``safe_synopsis`` of a body without summary, as it was before its shortcut: strip every fence
    and the dash block, then take the first prose line of what is left."""
    from pipeline.core.fences import strip_every_facts_fence_world, strip_every_takes_fence
    from pipeline.core.synopsis import _SENTENCE_BREAK_RE, clip, strip_dash_block

    stripped = strip_dash_block(strip_every_facts_fence_world(strip_every_takes_fence(body)))
    for raw_line in stripped.split("\n"):
        line = raw_line.strip(JS_WHITESPACE)
        if line and not line.startswith("#") and not line.startswith("<!--"):
            brk = _SENTENCE_BREAK_RE.search(line)
            return clip(collapse_whitespace(line[: brk.start()] if brk else line))
    return ""


_WORLD_ROW = "| 1 | Public claim. | fact | 0.9 | world | low |  |  | notes |  |\n"
_PRIVATE_ROW = "| 2 | PRIVATE claim. | fact | 0.9 | private | low |  |  | notes |  |\n"
_TYPED_ROW = "| 3 | Typed. | fact | 1.0 | world | high |  |  |  |  | arr | 1,200 | USD | 2026 |\n"
_HEADER = "| # | claim | kind | confidence | visibility | notability | valid_from | valid_until | source | context |\n"
BODY_PIECES = st.sampled_from([
    "<!--- gbrain:takes:begin -->", "<!--- gbrain:takes:end -->", "<!--- gbrain:facts:begin -->",
    "<!--- gbrain:facts:end -->", "\n", "\n", "\n", "\r\n", "\u2028", "---", "--", "-", "#", "# Title\n", "<!-- c -->",
    "<!--", " ", "\t", "\u00a0", "Prose line. Second sentence.", "Word", "x", "é", _HEADER, _WORLD_ROW, _PRIVATE_ROW,
    _TYPED_ROW, "|---|---|\n", "Hidden.",
])


@settings(max_examples=3000, deadline=None)
@given(body=st.lists(BODY_PIECES, max_size=14).map("".join)
       | st.lists(st.lists(BODY_PIECES, max_size=3).map("".join), max_size=8).map("\n".join))
@example(body="Intro.\n---\nHidden.\n---\nShown.")
@example(body="---\nHidden.\n---\nShown.")
@example(body="# T\n\n---\nx: 1\n---\nBody.")
@example(body="a\n-<!--- gbrain:facts:begin -->\n" + _WORLD_ROW)
@example(body="<!--- gbrain:facts:begin -->\n" + _HEADER + _PRIVATE_ROW + "<!--- gbrain:facts:end -->\nProse.")
def test_a_synopsis_read_before_any_fence_is_the_synopsis_of_the_stripped_body(body: str) -> None:
    """``safe_synopsis`` reads the lines before the body's first ``---`` (less two) without
    stripping anything; it must give the synopsis of the fully stripped body."""
    from pipeline.core.synopsis import safe_synopsis

    assert safe_synopsis(body, {}) == _reference_synopsis_of_body(body)


_TYPED_PRIVATE_ROW = "| 4 | Typed private. | fact | 1.0 | private | high |  |  |  |  | arr | 7 | USD | 2026 |\n"
_PIPES_ROW = "| 5 | a \\| b \\| c | fact | 0.5 | world | low |  |  |  |  |  |  |\n"


@settings(max_examples=3000, deadline=None)
@given(body=st.lists(BODY_PIECES | st.sampled_from([_TYPED_PRIVATE_ROW, _PIPES_ROW]), max_size=16).map("".join)
       | st.lists(st.lists(BODY_PIECES, max_size=3).map("".join), max_size=8).map("\n".join))
@example(body="<!--- gbrain:facts:begin -->\n" + _HEADER + _TYPED_ROW + "<!--- gbrain:facts:end -->")
@example(body="<!--- gbrain:facts:begin -->\n" + _HEADER + _TYPED_PRIVATE_ROW + "<!--- gbrain:facts:end -->")
@example(body="---\nx<!--- gbrain:facts:begin -->\n" + _HEADER + _WORLD_ROW + "<!--- gbrain:facts:end -->\n---\nz")
@example(body="\n\n<!--- gbrain:facts:begin -->" + _PIPES_ROW + "<!--- gbrain:facts:end -->\n---\nProse.\n---\n")
def test_the_head_of_the_facts_stripped_body_holds_its_first_prose_line(body: str) -> None:
    """``facts_stripped_head`` renders the first facts fence's header line only (and nothing after
    it); the first prose line after the dash block must be the one of the body with every fence
    rendered whole."""
    from pipeline.core.fences import strip_every_facts_fence_world, strip_every_takes_fence
    from pipeline.core.synopsis import facts_stripped_head, first_prose_line, strip_dash_block

    taken = strip_every_takes_fence(body)
    whole = strip_dash_block(strip_every_facts_fence_world(taken))
    head = strip_dash_block(facts_stripped_head(taken))
    assert first_prose_line(head, len(head) + 1) == first_prose_line(whole, len(whole) + 1)


@settings(max_examples=3000, deadline=None)
@given(rows=st.lists(BODY_PIECES | st.sampled_from([_TYPED_PRIVATE_ROW, _PIPES_ROW, _TYPED_ROW.replace("world", "WoRlD"),
                                                     "| 6 | x | fact | 0.5 | world | low | | | | | | 0 | | |\n"]),
                     max_size=8).map("".join))
@example(rows=_HEADER + _TYPED_ROW)
@example(rows="\n" + _HEADER + _TYPED_ROW.replace("world", "WoRlD"))
@example(rows=_HEADER + _TYPED_PRIVATE_ROW)
def test_a_fence_with_a_typed_world_fact_may_have_one(rows: str) -> None:
    """``may_have_typed_world_row`` may say True for nothing, never False for a fence whose parse
    has a typed world fact (the 14-column header depends on it)."""
    from pipeline.core.fences import FACTS_BEGIN, FACTS_END, parse_facts
    from pipeline.core.synopsis import may_have_typed_world_row

    fence = FACTS_BEGIN + rows + FACTS_END
    if any(f.typed for f in parse_facts(fence) if f.visibility == "world"):
        assert may_have_typed_world_row(fence)


@settings(max_examples=2000, deadline=None)
@given(word=UNICODE_WORDS | ASCII_TEXT | st.sampled_from(["ok", "abc", "The", "a1b2", "thanks", "tuesday", "x" * 40])
       | st.text(alphabet=st.sampled_from(list("aZ9'@-_.,()!\"/")), max_size=10))
@example(word="(meeting),")
@example(word="_abc_")
@example(word="abc.def")
def test_a_words_weak_candidates_are_those_of_its_weak_tokens(word: str) -> None:
    """``_word_weak``'s shortcut for an ASCII word of letters and digits (punctuation at its ends
    taken off) gives the weak candidates of the word's weak tokens, as for any other word."""
    from pipeline.core import extract

    expected = tuple(w for w in map(extract._weak_cached, extract.weak_tokens(word)) if w[2])
    assert extract._word_weak(word) == expected


CJK_MIX = st.text(alphabet=st.sampled_from(list("田中さんのカタ가나\u3040\u309f\u30ff\ud7af\u3100\u4dc0\ua000éZa .")), max_size=30)
"""CJK of every range, the characters between the ranges (bopomofo, hexagrams, Yi), other text."""


@settings(max_examples=1500, deadline=None)
@given(text=CJK_MIX)
@example(text="\u3100\u4dc0é 田中")
def test_cjk_grams_looked_for_from_the_first_character_of_the_ranges_span_are_all_of_them(text: str) -> None:
    """Extraction looks for CJK runs from the first character of the one range that spans the four
    CJK ranges, and not at all without one: it must extract what the exact class does from the start."""
    from pipeline.core import extract

    assert extract._extract(text) == _reference_extract(text)


@PROPS
@given(turns=st.lists(st.tuples(st.sampled_from(["user", "assistant"]), TEXT | CROWDED_TEXT), min_size=1, max_size=6),
       sources=SOURCES, lexical=st.booleans(), max_pages=RAW_NUMBER, min_conf=RAW_NUMBER)
def test_the_op_over_the_relevant_norms_gives_the_pages_of_the_whole_window(
    conformance_brain: BrainIndex, turns: list[tuple[str, str]], sources: list[str], lexical: bool, max_pages: Any,
    min_conf: Any
) -> None:
    """``volunteer_context`` merges and resolves only each turn's relevant norms; its pages must be
    those of deciding over the whole window."""
    from pipeline.core import op

    text = window_text(turns)
    cached = [(role, extract_candidates(body)) for role, body in parse_window(text)]
    op._window_memo.clear()  # neither call may reuse the other's resolution
    expected = decide(cached, conformance_brain, source_ids=sources, lexical_arms=lexical, max_pages=max_pages,
                      min_confidence=min_conf)
    op._window_memo.clear()
    result = volunteer_context(text, conformance_brain, source_ids=sources, lexical_arms=lexical, max_pages=max_pages,
                               min_confidence=min_conf)
    assert result["pages"] == [page.to_dict() for page in expected]


@settings(max_examples=200, deadline=None)
@given(fields=st.tuples(st.text(max_size=5), st.text(max_size=5), st.text(max_size=5), st.floats(0, 1),
                        st.sampled_from(["alias", "title"]), st.text(max_size=5), st.text(max_size=5)))
def test_a_pages_dict_is_its_fields_by_name_in_field_order(fields: tuple[Any, ...]) -> None:
    """``VolunteeredPage.to_dict`` spells the fields out; it must stay every field, in field order."""
    from pipeline.core.types import PAGE_FIELDS, VolunteeredPage, new_page

    for page in (VolunteeredPage(*fields), new_page(*fields)):
        assert list(page.to_dict().items()) == [(name, getattr(page, name)) for name in PAGE_FIELDS]


@settings(max_examples=2000, deadline=None)
@given(line=st.lists(st.sampled_from([".", "!", "?", " ", "\t", "\u00a0", "\u3000", "\ufeff", "x", "é", "..", ". "]),
                     max_size=10).map("".join))
def test_a_sentence_ends_where_the_look_behind_break_starts(line: str) -> None:
    """The synopsis finds a sentence's end from its punctuation; the reference's look-behind break
    must start right after it."""
    from pipeline.core.synopsis import _SENTENCE_BREAK_RE, _SENTENCE_END_RE

    brk, end = _SENTENCE_BREAK_RE.search(line), _SENTENCE_END_RE.search(line)
    assert (brk.start() if brk else None) == (end.start() + 1 if end else None)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.sampled_from(VOCAB) | TEXT | st.sampled_from(VOCAB).map(str.lower) | st.sampled_from(VOCAB).map(
    lambda v: v.split()[-1] if v.split() else v) | st.sampled_from(VOCAB).map(lambda v: v.lower().replace(" ", "-")))
def test_query_hits_answers_like_query_info(query: str, conformance_brain: BrainIndex) -> None:
    """``query_hits`` (the relevance test's question, nothing built or cached) against the ids of
    ``query_info``, with the query cache cold and warm."""
    conformance_brain._query_cache.pop(query, None)
    cold = conformance_brain.query_hits(query)
    info = conformance_brain.query_info(query)
    assert cold == bool(info[3] or info[4])
    assert conformance_brain.query_hits(query) == cold


def test_query_hits_finds_pages_by_every_arm(conformance_brain: BrainIndex) -> None:
    hits = [q for q in VOCAB if conformance_brain.query_hits(q)]
    assert len(hits) > len(VOCAB) // 4, hits


@settings(max_examples=1000, deadline=None)
@given(weights=st.lists(st.sampled_from([-1.25, -1.0, -0.5, -0.35, -0.0, 0.0]) | st.floats(-3, 0), max_size=60),
       cap=st.integers(1, 40), picks=st.sets(st.integers(0, 59)))
def test_the_kept_in_the_top_are_those_of_the_sorted_cut(weights: list[float], cap: int, picks: set[int]) -> None:
    """``_kept_in_top`` counts the keys before each kept entry instead of sorting them all; equal
    weights (ties broken by ``order``) included."""
    from pipeline.core.window import _NORM, _kept_in_top

    keyed = []
    for order, weight in enumerate(weights):
        entry: list[Any] = [None] * 9
        entry[_NORM] = f"n{order}"
        keyed.append((weight, order, entry))
    only = frozenset(f"n{k}" for k in picks)
    expected = [e[_NORM] for _, _, e in sorted(keyed)[:cap] if e[_NORM] in only]
    assert [c.norm for c in _kept_in_top(keyed, cap, only)] == expected
