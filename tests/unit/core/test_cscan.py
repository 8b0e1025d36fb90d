"""The C scanner (``pipeline/core/_cscan.c``) against the patterns it replaces.

Skipped where it is not built (the pure build, no compiler). Its Unicode classes are compared with
``regex``'s on every code point; its answers with :func:`pipeline.core.extract.scan_text` (the
patterns) on every code point in several contexts and on random Unicode text; and a turn's
candidates through it with the candidates through the patterns.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import regex
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline.core import extract as ex
from pipeline.core.jscompat import JS_WS
from pipeline.core.normalize import JS_WHITESPACE

cscan = pytest.importorskip("pipeline.core._cscan", reason="the C scanner is not built (pure build or no compiler)")

ROOT = Path(__file__).resolve().parents[3]
LAST = 0x10FFFF
ALL = "".join(map(chr, range(LAST + 1)))  # lone surrogates included: a Python str may hold them
CLASSES = [(1, r"\p{Lu}"), (2, r"\p{Ll}"), (4, r"\p{L}"), (8, r"\p{N}"), (16, f"[{JS_WS}]")]


def test_the_tables_are_regexs_classes_on_every_code_point() -> None:
    expected = bytearray(LAST + 1)
    for bit, pattern in CLASSES:
        for m in regex.finditer(pattern, ALL):
            expected[m.start()] |= bit
    table = cscan.class_table()
    assert len(table) == LAST + 1
    wrong = [hex(cp) for cp in range(LAST + 1) if table[cp] != expected[cp]]
    assert not wrong, wrong[:20]
    assert regex.__version__ == cscan.REGEX_VERSION


def test_the_committed_tables_are_what_the_generator_makes_from_the_pinned_regex() -> None:
    spec = importlib.util.spec_from_file_location("gen_scan_tables", ROOT / "scripts" / "gen_scan_tables.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    sys.modules["gen_scan_tables"] = gen
    spec.loader.exec_module(gen)
    assert gen.render(gen.flags()) == (ROOT / "pipeline" / "core" / "_cscan_tables.h").read_text()


def _contexts(c: str) -> str:
    """One code point where each scanner looks at it: in and after a capitalised token, between two,
    after a dot, starting and inside a weak word, in a handle, in a CJK run, before a run."""
    return f"Ab{c}c Xy{c}Z Q.{c}r {c}abc de{c}fg @a{c}b {c}{c} 会{c}議 {c}Ab. "


def test_the_scanner_answers_like_the_patterns_around_every_code_point() -> None:
    step = 512
    for start in range(0, LAST + 1, step):
        text = "".join(_contexts(chr(cp)) for cp in range(start, min(start + step, LAST + 1)))
        assert cscan.scan(text) == ex.scan_text(text), hex(start)


PIECES = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=8),  # any code point
    st.text(alphabet="abcXYZ019 @-'’._\t\n", max_size=8),
    st.text(alphabet="ÀÉÎõüßÿ\u00a0\u00b2\u00bd", max_size=6),  # Latin-1
    st.text(alphabet="ΑΒΓαβγΣσς", max_size=6),  # Greek
    st.text(alphabet="ДЖЯджяЁё", max_size=6),  # Cyrillic
    st.text(alphabet="東京会議田中さんのカタカナーぁゝゞ\u309b\u309f\u30ff", max_size=6),  # CJK, kana
    st.text(alphabet="서울한국어\uac00\ud7a3\ud7af", max_size=6),  # hangul
    st.text(alphabet="\U0001d400\U0001d41a\U00010400\U00010428\U0001f600\U0002000b\U0001d7ce", max_size=4),  # astral
    st.text(alphabet=JS_WHITESPACE + "\x1c\x1f\x85", max_size=3),  # JS whitespace and Python-only whitespace
    st.sampled_from(["Jordan Lee", "@jordan_lee", "O'Neil's", "x-ray", "Mr. Smith", "St.Louis", "a@b", "ab@cd",
                     "Zoë", "ÉCOLE", "The Plan", "i'm", "U.S.A.", "—", "•", "“Quote”", "(Paren)", "42", "4.2"]),
)
TEXT = st.lists(PIECES, min_size=1, max_size=14).map("".join)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXT)
@example(text="Alice\tBob  Carol\u00a0Dave\x1cEve Zoë Ann\ufeffLee")
@example(text="ab@cdef @x @@yz foo@bar.baz Q.r Ab.c.D")
def test_the_scanner_finds_what_the_patterns_find(text: str) -> None:
    assert cscan.scan(text) == ex.scan_text(text)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXT)
def test_candidates_through_the_scanner_are_those_through_the_patterns(text: str) -> None:
    for cache in (ex._surface_cache, ex._handle_cache, ex._weak_cache, ex._word_cache):
        cache.clear()
    expected = ex._extract_python(text)
    for cache in (ex._surface_cache, ex._handle_cache, ex._weak_cache, ex._word_cache):
        cache.clear()
    assert ex._extract_scanned(text, cscan.scan(text)) == expected
    assert ex._extract(text) == expected  # warm caches, and the C extract _extract uses
    for cache in (ex._surface_cache, ex._handle_cache, ex._weak_cache, ex._word_cache):
        cache.clear()
    assert cscan.extract(text) == expected  # cold caches
    assert cscan.extract(text) == expected


WORDY = st.lists(st.sampled_from(["alpha", "beta", "gamma's", "x-ray", "the", "and", "Jordan", "Lee", "@jordan_lee",
                                  "Monday", "東京都庁", "さくら", "über", "ok", "state-of-the-art", "a@bc", "d@@ef",
                                  "abc''", "ab's", "it's", "don't", "thanks", "monday's", "x'", "abC'S", "q-'", "mIxEd"])
                 | st.text(alphabet="abcdefghij", min_size=3, max_size=6)
                 | st.text(alphabet="abAB'-s", min_size=1, max_size=6).map(lambda w: "a" + w), min_size=20,
                 max_size=90).map(" ".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=WORDY)
def test_the_c_extract_caps_weak_words_and_candidates_like_python(text: str) -> None:
    """Texts with more weak words than the cap (32) and more strong ones than 12: the C extract stops
    cutting tokens out at the cap and must still answer like the Python steps."""
    for cache in (ex._surface_cache, ex._handle_cache, ex._weak_cache, ex._word_cache):
        cache.clear()
    expected = ex._extract_python(text)
    assert cscan.extract(text) == expected
    assert cscan.extract(text) == expected


def test_the_c_extract_starts_a_full_cache_over_like_python() -> None:
    """``_bounded``: a cache at its size is emptied before the next entry, in C as in Python."""
    ex._weak_cache.clear()
    for k in range(ex._CACHE_MAX - 1):
        ex._weak_cache[f"w{k}"] = ex._NOT_WEAK
    cscan.extract("alpha")  # one new word: the cache is full after it
    assert len(ex._weak_cache) == ex._CACHE_MAX
    cscan.extract("bravo")  # the next one starts it over
    assert list(ex._weak_cache) == ["bravo"]
    ex._weak_cache.clear()


def test_the_scanner_takes_only_a_str() -> None:
    with pytest.raises(TypeError):
        cscan.scan(b"bytes")


SURFACE_WORDS = st.sampled_from(["The", "the", "Jordan", "Lee", "Lee's", "LEES'", "O'Neil", "x-ray", "I'm", "Monday",
                                 "MONDAY", "It's", "42", "4.2,1", "7", "A", "'Quote'", "(Paren", "Bracket]", "`tick`",
                                 "Mr.", "Smith", "s", "'s", "''", "Q.r", "And", "Of"])
SURFACES = st.lists(st.one_of(SURFACE_WORDS, st.text(alphabet="aZ9'\"`[]() .-sS", max_size=5)), min_size=1,
                    max_size=5).map(lambda words: " ".join(words)) | st.text(alphabet=st.characters(min_codepoint=0x20,
                                                                                                    max_codepoint=0x7E))


@settings(max_examples=3000, deadline=None)
@given(surface=SURFACES)
@example(surface="The Jordan Lee's")
@example(surface="  The  Plan ")
@example(surface="I'm It's")
def test_an_ascii_surface_sighted_in_c_is_sighted_as_in_python(surface: str) -> None:
    """``ascii_surface`` answers for printable ASCII whose norms are plain lowercase, else None."""
    found = cscan.ascii_surface(surface, ex.STOPWORDS, ex.COMMON_WORDS)
    if found is not None:
        assert found == ex._surface_python(surface)


@settings(max_examples=1000, deadline=None)
@given(text=TEXT)
def test_runs_of_printable_ascii_are_sighted_in_c(text: str) -> None:
    """Every capitalised run the scanner finds: the same first sighting, and C answers for the plain
    printable-ASCII ones (single spaces, no quote or bracket at an end), the usual runs."""
    for run in cscan.scan(text)[1]:
        found = cscan.ascii_surface(run, ex.STOPWORDS, ex.COMMON_WORDS)
        if found is None:
            assert not (run.isascii() and run.isprintable() and "  " not in run and run[-1] not in "'\"`])"), run
        else:
            assert found == ex._surface_python(run)


ROLES = st.sampled_from(["user", "assistant", "User", "system"])
WINDOW = st.lists(st.tuples(ROLES, TEXT | WORDY), min_size=1, max_size=9)


def _kept_norms(rows: list[tuple[str, list[ex.Candidate]]], picks: list[int]) -> frozenset[str]:
    norms = sorted({c[2] for _, cands in rows for c in cands})
    return frozenset(norms[k % len(norms)] for k in picks) if norms else frozenset()


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(window=WINDOW, picks=st.lists(st.integers(0, 500), max_size=12), keep=st.booleans())
@example(window=[("user", "Jordan Lee met Ann Bo")], picks=[], keep=False)
def test_the_c_merge_answers_like_the_python_merge(window: list[tuple[str, str]], picks: list[int], keep: bool) -> None:
    """Windows crowded or not (``WORDY`` crosses the caps), with and without kept norms: the same
    candidates, every field (``order`` included), in the same order."""
    from pipeline.core import window as win

    rows = [(role, ex.extract_candidates(text)) for role, text in window]
    kept = _kept_norms(rows, picks) if keep else None
    merged = cscan.merge(rows, kept)
    assert merged is not None
    expected = win._merge_python(rows, kept)
    assert merged == expected
    assert [type(c) for c in merged] == [type(c) for c in expected]
    assert [tuple(map(type, c)) for c in merged] == [tuple(map(type, c)) for c in expected]


def test_the_c_merge_leaves_other_shapes_to_python() -> None:
    from pipeline.core.window import merge_window

    cands = ex.extract_candidates("ping Jordan Lee")
    assert cscan.merge([["user", cands]], None) is None  # a list where a tuple is expected
    assert cscan.merge([("user", tuple(cands))], None) is None
    assert cscan.merge([], None) is None
    assert merge_window([("user", tuple(cands))]) == merge_window([("user", cands)])


WINDOW_PIECES = st.sampled_from(["user", "USER", "uSeR", "assistant", "ASSISTANT", "Assist", "u\u017fer", "\u212aser", ":",
                                 " ", "\t", "\r", "\n", "\r\n", "\u2028", "\u2029", "\u00a0", "\u3000", "\ufeff", "x", "é",
                                 "ok", "Jordan Lee", "東京", "\U0001d400"])


@settings(max_examples=3000, deadline=None)
@given(text=st.lists(WINDOW_PIECES, max_size=24).map("".join))
@example(text="user: a\r\n\r\n  b\r\nassistant:\r\nc\r")
@example(text="\n\nhello\nuser:\n\nx\n")
def test_the_c_parse_answers_like_the_python_parse(text: str) -> None:
    from pipeline.core.window import _parse_window_python

    assert cscan.parse_window(text) == _parse_window_python(text)


def _second_of_a_composition() -> set[str]:
    """Every character that canonical composition may join to the one before it: the second of each
    two-character canonical decomposition, and the Hangul vowel and trailing jamo."""
    import unicodedata

    out = {chr(cp) for cp in range(0x1161, 0x1176)} | {chr(cp) for cp in range(0x11A8, 0x11C3)}
    for cp in range(0x110000):
        parts = unicodedata.decomposition(chr(cp)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            out.add(chr(int(parts[1], 16)))
    return out


def test_every_plain_cjk_character_is_its_own_norm_in_any_context() -> None:
    """What lets the C extract take a CJK n-gram of plain characters as its own norm: each is
    printable and caseless, in NFKC, of combining class 0 and never composed with a character before
    it, so a text of them is in NFKC and ``normalize.is_plain``."""
    import unicodedata

    from pipeline.core.normalize import normalize_alias

    table = cscan.cjk_plain_table()
    seconds = _second_of_a_composition()
    plain = [chr(cp) for cp in range(0x10000) if table[cp]]
    assert len(plain) > 30_000
    for ch in plain:
        assert ex._CJK_RUN_RE.fullmatch(ch), hex(ord(ch))
        assert ch.isprintable() and ch.lower() == ch and unicodedata.combining(ch) == 0, hex(ord(ch))
        assert unicodedata.is_normalized("NFKC", ch) and ch not in seconds, hex(ord(ch))
        assert normalize_alias(ch) == ch


CJK_TEXT = st.lists(st.sampled_from(["東京", "会議", "さくら", "ロボティクス", "の", "は", "서울", "한국어", "ー", "\u3099",
                                     "\u309b", "\u309f", "\u30ff", "\ud7a4", "\u3040", "か", "a", " ", "Ab", "ｶ"]),
                    min_size=1, max_size=30).map("".join)


@settings(max_examples=1500, deadline=None)
@given(text=CJK_TEXT)
@example(text="東京都庁" * 10)
def test_the_c_cjk_grams_are_those_of_python(text: str) -> None:
    for cache in (ex._surface_cache, ex._handle_cache, ex._weak_cache, ex._word_cache):
        cache.clear()
    assert cscan.extract(text) == ex._extract_python(text)


def test_the_tuples_the_c_scanner_builds_of_atoms_are_not_tracked_by_the_garbage_collector() -> None:
    """Candidates, sightings, window candidates and turns hold strs, bools, ints and such tuples only:
    no cycle can run through them, so they are built untracked (what CPython's collector would decide
    on its first visit of each)."""
    import gc

    from pipeline.core.window import merge_window, parse_window

    for cache in (ex._surface_cache, ex._handle_cache, ex._weak_cache):
        cache.clear()
    turns = parse_window("user: ping Jordan Lee about the migration\nassistant: 東京の会議 with Ann Lee's team")
    assert turns and not any(gc.is_tracked(turn) for turn in turns)
    rows = [(role, ex.extract_candidates(text)) for role, text in turns]
    assert all(cands and not any(gc.is_tracked(c) for c in cands) for _, cands in rows)
    assert not any(gc.is_tracked(entry) for info in ex._surface_cache.values() for entry in (info, info[0]))
    merged = merge_window(rows)
    assert merged and not any(gc.is_tracked(c) for c in merged)


def test_the_c_merge_takes_equal_norms_of_distinct_objects_as_one() -> None:
    """The merge's table finds a norm by identity, else by hash and text: a norm built again (an
    equal str, not the same object) is the same norm, as for a dict key."""
    from pipeline.core import window as win

    def fresh(text: str) -> str:
        return "".join(list(text))  # an equal str, a new object

    a = ("Ann Lee", "Ann Lee", "ann lee", False)
    b = (fresh("ann lee"), fresh("ann lee"), fresh("ann lee"), True)
    c = ("Bo", "Bo", fresh("bo"), False)
    assert a[2] is not b[2] and a[2] == b[2]
    rows = [("user", [a, c]), ("assistant", [b, ("Bo", "Bo", fresh("bo"), False)]), ("user", [b])]
    merged = cscan.merge(rows, None)
    assert merged == win._merge_python(rows, None)
    assert [(m.norm, m.occurrences) for m in merged] == [("ann lee", 3), ("bo", 2)]
