"""Entity candidates from one turn (reference-behaviour.md §4.1, §4.3): what is worth looking up in the brain.

Zero-LLM and precision-biased, exactly like gbrain's ``extractCandidates``: @handles, capitalised
runs (with the leading-stopword trim), then lowercase *weak* words and CJK n-grams that may only
resolve through exact evidence. The output of one turn never depends on other turns, so callers cache
it per turn and merge cached lists with :func:`pipeline.core.window.merge_window`.

A candidate is a plain tuple ``(display, query, norm, weak)`` (see :data:`Candidate`): this runs on
every turn of every session, and tuples are several times cheaper to build than objects.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

import regex

from pipeline.core.jscompat import JS_WS, utf16_len
from pipeline.core.memo import Memo
from pipeline.core.normalize import JS_WHITESPACE, normalize_alias

Scan = tuple[list[str], list[str], list[bool], list[str], list[str]]
"""What :func:`scan_text` finds in a text: ``(handles, runs, run_starts, weak_tokens, cjk_runs)``."""

_c_scan: Callable[[str], Scan] | None
_c_surface: Callable[[str, frozenset[str], frozenset[str]], Any] | None
_c_extract: Callable[[str], list[Candidate]] | None
_c_configure: Callable[..., None] | None
try:  # the optional C scanner (pipeline/core/_cscan.c), built by scripts/build_core.py with the compiled core
    from pipeline.core._cscan import ascii_surface as _c_surface
    from pipeline.core._cscan import configure as _c_configure
    from pipeline.core._cscan import extract as _c_extract
    from pipeline.core._cscan import scan as _c_scan
except ImportError:  # not built (no compiler, a failed build) or the pure build: the patterns answer, same results
    _c_scan = None
    _c_surface = None
    _c_extract = None
    _c_configure = None

C_SCANNER: Final = _c_scan is not None
"""Whether the C scanner finds what a turn's patterns find (``pipeline.corebuild`` names the build)."""

Candidate = tuple[str, str, str, bool]
"""``(display, query, norm, weak)``: label surface, lookup text, ``normalize_alias(query)``, weak flag."""

DISPLAY: Final = 0
QUERY: Final = 1
NORM: Final = 2
WEAK: Final = 3

MAX_CANDIDATES: Final = 12
MAX_WEAK_CANDIDATES: Final = 32
MAX_CJK_WEAK_CANDIDATES: Final = 24

STOPWORDS: Final = frozenset({
    'i', "i'm", "i've", "i'll", 'you', "you're", 'he', 'she', 'it', "it's", 'we', "we're", 'they',
    "they're", 'me', 'him', 'her', 'us', 'them', 'my', 'your', 'his', 'their', 'our', 'mine', 'yours',
    'hers', 'theirs', 'ours', 'this', 'that', 'these', 'those', 'who', 'whom', 'the', 'a', 'an', 'and',
    'or', 'but', 'so', 'if', 'as', 'at', 'by', 'for', 'in', 'of', 'on', 'to', 'up', 'with', 'from', 'into',
    'over', 'than', 'then', 'also', 'just', 'what', 'when', 'where', 'why', 'how', 'which', 'whose', 'can',
    'could', 'should', 'would', 'will', 'shall', 'may', 'might', 'must', 'do', 'does', 'did', 'is', 'are',
    'am', 'was', 'were', 'be', 'been', 'being', 'has', 'have', 'had', 'hi', 'hey', 'hello', 'thanks',
    'thank', 'please', 'yes', 'no', 'ok', 'okay', 'sure', 'maybe', 'well', 'oh', 'let', "let's", 'lets',
})
"""HARD stopwords: never an entity on their own (compared lowercased; straight apostrophe only)."""

COMMON_WORDS: Final = frozenset({
    'monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday', 'sunday', 'january', 'february',
    'march', 'april', 'may', 'june', 'july', 'august', 'september', 'october', 'november', 'december',
    'today', 'tomorrow', 'yesterday', 'now', 'soon', 'later', 'tonight', 'morning', 'afternoon', 'evening',
    'week', 'month', 'year', 'meeting', 'call', 'note', 'task', 'here', 'there', 'every', 'some', 'any',
    'all', 'one', 'two', 'three', 'first', 'last', 'next', 'new', 'old', 'good', 'bad', 'great', 'nice',
    'thing', 'something', 'anything',
})
"""SOFT common words: dropped only when a single token is seen solely at a sentence start."""

_HANDLE_RE: Final = re.compile(r"@([A-Za-z0-9_]{2,})")
_CAP_TOKEN: Final = r"\p{Lu}[\p{L}0-9'’\-]*(?:\.\p{L}[\p{L}0-9'’\-]*)*"
_CAP_RUN_RE: Final = regex.compile(f"{_CAP_TOKEN}(?:[{JS_WS}]+{_CAP_TOKEN}){{0,3}}")
_WS_SPLIT_RE: Final = re.compile(f"[{JS_WS}]+")
_HAS_WS_RE: Final = re.compile(f"[{JS_WS}]")
_PY_ONLY_WS_ASCII_RE: Final = re.compile("[\x1c-\x1f]")
"""The ASCII characters ``str.split`` cuts at and JS's ``\\s`` does not."""
_STARTS_UPPER_RE: Final = regex.compile(r"\p{Lu}")
_WEAK_TOKEN_RE: Final = regex.compile(r"(?<![\p{L}\p{N}'’@-])\p{Ll}[\p{L}\p{N}'’-]{2,}(?![\p{L}\p{N}'’-])")
"""The weak-token pattern; :func:`weak_tokens` finds its matches without the look-behind."""
_WEAK_RUN_RE: Final = regex.compile(r"(?:(\p{Ll}[\p{L}\p{N}'’-]*)|[\p{L}\p{N}'’@-])[\p{L}\p{N}'’@-]*")
"""One maximal run of ``[\\p{L}\\p{N}'’@-]`` per match; the group is its part up to the first ``@``
when it starts with ``\\p{Ll}`` (else empty): see :func:`weak_tokens`."""
_PURE_NUMBER_RE: Final = re.compile(r"[0-9][0-9.,]*")

# The same two patterns for ASCII-only text (most turns), where ``\p{Lu}`` is ``[A-Z]``, ``\p{Ll}``
# ``[a-z]``, ``\p{L}`` ``[A-Za-z]`` and ``\p{N}`` ``[0-9]``: the standard ``re`` engine runs them in
# about half the time of ``regex``'s Unicode classes, with the same matches (tests/unit/core/test_properties.py).
_CAP_TOKEN_ASCII: Final = r"[A-Z][A-Za-z0-9'\-]*(?:\.[A-Za-z][A-Za-z0-9'\-]*)*"
_CAP_RUN_ASCII_RE: Final = re.compile(f"{_CAP_TOKEN_ASCII}(?:[{JS_WS}]+{_CAP_TOKEN_ASCII}){{0,3}}")
_WEAK_TOKEN_ASCII_RE: Final = re.compile(r"(?<![A-Za-z0-9'@-])[a-z][A-Za-z0-9'-]{2,}(?![A-Za-z0-9'-])")
_WORDISH_ASCII_RE: Final = re.compile(r"[A-Za-z0-9'@-]+")
_LOWER_ASCII: Final = frozenset("abcdefghijklmnopqrstuvwxyz")
_NOT_IN_RUN_ASCII: Final = "!\"#$%&()*+,./:;<=>?[\\]^_`{|}~"
"""The printable ASCII characters that are neither whitespace nor part of a weak-token run
(``[A-Za-z0-9'@-]``): they end a run wherever they stand."""


def weak_tokens_ascii(text: str) -> list[str]:
    """``_WEAK_TOKEN_ASCII_RE.findall(text)`` for an ASCII ``text``, without its look-behind, which
    the regex engine tried at every position of the text (a tenth of a turn's extraction).

    A token can only start where that look-behind holds: at the start of a maximal run of its
    characters (``[A-Za-z0-9'@-]``). From there it takes the run up to its first ``@`` (the token's
    own characters exclude ``@``, and its look-ahead then holds), and it counts when it starts
    lowercase and is 3 characters or more. Nothing later in the run can start one: every position
    there follows one of those characters. Runs hold no whitespace, so they are found word by word,
    and a word of letters and digits only (most words) is a run by itself.
    ``tests/unit/core/test_properties.py`` compares this with the regex.
    """
    out: list[str] = []
    for word in text.split():
        if word.isalnum():
            if len(word) >= 3 and word[0] in _LOWER_ASCII:
                out.append(word)
            continue
        runs: list[str] = _WORDISH_ASCII_RE.findall(word)
        for run in runs:
            if len(run) >= 3 and run[0] in _LOWER_ASCII:
                at = run.find("@")
                if at == -1:
                    out.append(run)
                elif at >= 3:
                    out.append(run[:at])
    return out


def weak_tokens(text: str) -> list[str]:
    """``_WEAK_TOKEN_RE.findall(text)`` for any text, the way :func:`weak_tokens_ascii` does it for
    an ASCII one: a token starts only at the start of a maximal run of ``[\\p{L}\\p{N}'’@-]``,
    takes the run up to its first ``@`` and counts when it starts with ``\\p{Ll}`` and holds 3
    characters or more. :data:`_WEAK_RUN_RE` (the ``regex`` module's Unicode tables, like the
    pattern's) matches run after run, without the look-behind the pattern tried at every position:
    that scan was the costliest part of extracting a non-ASCII turn.
    ``tests/unit/core/test_properties.py`` compares this with the regex."""
    if text.isascii():
        return weak_tokens_ascii(text)
    return [token for token in _WEAK_RUN_RE.findall(text) if len(token) >= 3]


CJK_CHARS: Final = "\u4e00-\u9fff\u3040-\u309f\u30a0-\u30ff\uac00-\ud7af"
"""gbrain's CJK ranges: Han, hiragana, katakana, hangul syllables (BMP only)."""
_CJK_RUN_RE: Final = re.compile(f"[{CJK_CHARS}]+")
_MAYBE_CJK_RE: Final = re.compile("[\u3040-\ud7af]")
"""Every character of :data:`CJK_CHARS` and a few others between them: a cheap first look for them."""
_HIRAGANA_ONLY_RE: Final = re.compile("[\u3040-\u309f]+")

_SENTENCE_END: Final = frozenset(".!?:;\n\r•-([\"“")
_JS_WS_SET: Final = frozenset(JS_WHITESPACE)


def strip_possessive(text: str) -> str:
    """Drop a trailing ``'s`` / ``’s`` (any case of s), then a trailing ``'`` / ``’``."""
    if len(text) >= 2 and text[-1] in "sS" and text[-2] in "'’":
        text = text[:-2]
    if text and text[-1] in "'’":
        text = text[:-1]
    return text


def is_at_sentence_start(text: str, idx: int) -> bool:
    """Whitespace (newlines included) is skipped backwards, then the previous character decides."""
    i = idx - 1
    while i >= 0 and text[i] in _JS_WS_SET:
        i -= 1
    return i < 0 or text[i] in _SENTENCE_END


def has_whitespace(text: str) -> bool:
    """JS ``/\\s/.test(text)``. In printable ASCII (most queries and surfaces) the space is the only
    JS whitespace (``str.isprintable`` is false for every other one), so no regex call is needed."""
    if text.isascii() and text.isprintable():
        return " " in text
    return _HAS_WS_RE.search(text) is not None


def starts_uppercase(text: str) -> bool:
    """JS ``/^\\p{Lu}/u.test(text)``."""
    return _STARTS_UPPER_RE.match(text) is not None


def has_cjk(text: str) -> bool:
    return _CJK_RUN_RE.search(text) is not None


# A strong sighting before filtering: (display, query, norm, filter class, candidate). Class 0 keeps
# it, 1 drops it (single token: too short, a number, a hard stopword), 2 keeps it only if it is ever
# seen mid-sentence (single-token soft common word). The candidate ``(display, query, norm, False)``
# is built once with the sighting, so every turn that keeps it shares that tuple instead of building
# its own. Cached per surface: chat repeats itself.
_KEEP: Final = 0
_DROP: Final = 1
_KEEP_IF_MID: Final = 2
_Sighting = tuple[str, str, str, int, Candidate]
_CACHE_MAX: Final = 100_000
# The caches' values and the reads of them in ``_extract`` are typed ``Any`` on purpose: the compiled
# core unpacks a value typed as a fixed tuple into C fields when it reads it, and packs a new tuple
# when it stores or appends it again; typed ``Any``, the cached tuple itself is what a turn's list holds.
_surface_cache: Final[dict[str, Any]] = {}
"""surface -> ``(sighting, trimmed sighting or None)`` (:func:`_surface`)."""
_handle_cache: Final[dict[str, Any]] = {}
"""handle -> its sighting."""
_weak_cache: Final[dict[str, Any]] = {}
"""token -> its weak candidate, or :data:`_NOT_WEAK`."""
_word_cache: Final[dict[str, tuple[Any, ...]]] = {}
"""Word (a piece of ``str.split``) -> the weak candidates of its tokens, in order (see :func:`_word_weak`)."""
_NOT_WEAK: Final[Candidate] = ("", "", "", True)
"""What :data:`_weak_cache` holds for a word that is no weak candidate (an empty norm: never one)."""


def _sighting(raw_display: str, raw_query: str) -> _Sighting:
    query = strip_possessive(raw_query.strip(JS_WHITESPACE))
    norm = normalize_alias(query) if query else ""
    if has_whitespace(query):
        klass = _KEEP
    else:
        lc = query.lower()
        if utf16_len(query) < 2 or ("0" <= query[0] <= "9" and _PURE_NUMBER_RE.fullmatch(query)) or lc in STOPWORDS:
            klass = _DROP
        else:
            klass = _KEEP_IF_MID if lc in COMMON_WORDS else _KEEP
    display = raw_display.strip(JS_WHITESPACE)
    return (display, query, norm, klass, (display, query, norm, False))


def run_tokens(surface: str) -> list[str]:
    """``_WS_SPLIT_RE.split(surface)`` for a capitalised run (a match of the run patterns).

    A run starts and ends with a token, so splitting it at whitespace leaves no empty piece; in
    printable text the only whitespace, JS's or Python's, is the space (every other whitespace
    character is not printable), where ``str.split`` cuts exactly as the JS-whitespace regex does
    (that regex split was a third of a first sighting's cost). ``tests/unit/core/test_properties.py``
    compares the two on runs, and checks that claim on every code point. In ASCII the two kinds of
    whitespace differ by U+001C..U+001F alone (Python's, not JS's): a run without them (one over
    several lines) splits the same way too."""
    if surface.isprintable() or (surface.isascii() and not _PY_ONLY_WS_ASCII_RE.search(surface)):
        return surface.split()
    return _WS_SPLIT_RE.split(surface)


def _surface(surface: str) -> tuple[_Sighting, _Sighting | None]:
    """The run itself, and its remainder after leading hard stopwords (HEAD's trim), if any.

    The C scanner's ``ascii_surface`` answers for a printable-ASCII run whose norms are plain
    lowercase (most of them), with the steps of :func:`_surface_python` done on bytes."""
    if _c_surface is not None:
        found: Any = _c_surface(surface, STOPWORDS, COMMON_WORDS)
        if found is not None:
            return found  # type: ignore[no-any-return]
    return _surface_python(surface)


def _surface_python(surface: str) -> tuple[_Sighting, _Sighting | None]:
    """:func:`_surface` in Python steps."""
    tokens = run_tokens(surface)
    first_kept = 0
    while first_kept < len(tokens) and strip_possessive(tokens[first_kept]).lower() in STOPWORDS:
        first_kept += 1
    trimmed = None
    if 0 < first_kept < len(tokens):
        rest = " ".join(tokens[first_kept:])
        trimmed = _sighting(rest, rest)
    return (_sighting(surface, surface), trimmed)


def _weak(token: str) -> Candidate | None:
    """A lowercase word as its weak candidate ``(raw, raw, norm, True)``, or ``None`` when it cannot be one."""
    raw = strip_possessive(token)
    if utf16_len(raw) < 3:
        return None
    lc = raw.lower()
    if lc in STOPWORDS or lc in COMMON_WORDS:
        return None
    norm = normalize_alias(raw)
    return (raw, raw, norm, True) if norm else None


def _weak_cached(token: str) -> Any:
    """:func:`_weak` through :data:`_weak_cache`, with :data:`_NOT_WEAK` for no candidate (``Any``:
    the cached tuple itself, see above)."""
    weak: Any = _weak_cache.get(token)
    if weak is None:
        weak = _bounded(_weak_cache)[token] = _weak(token) or _NOT_WEAK
    return weak


def _word_weak(word: str) -> tuple[Any, ...]:
    """The weak candidates of one word (a piece of ``str.split``), in token order: what the
    weak-token scan yields for it, through :func:`_weak`. A text's weak tokens are its words' tokens
    in word order (a token is part of a run of letters, digits, ``'’@-``, which whitespace ends), so
    a text's weak candidates are its words' tuples in a row, each word looked up once in
    :data:`_word_cache` instead of tested and split again at every turn.

    An ASCII word of letters and digits (most words), once any punctuation that cannot be part of a
    run is taken off its ends (``word,`` ``(word).``), is one run: it is its only token when it
    starts lowercase and has 3 characters or more, and there is none otherwise. That is what
    :func:`weak_tokens_ascii` finds for it, without splitting it again and building the list, and
    without a regex for the punctuated ones."""
    if word.isascii():
        core = word if word.isalnum() else word.strip(_NOT_IN_RUN_ASCII)
        if core.isalnum():
            if len(core) >= 3 and core[0] in _LOWER_ASCII:
                weak: Any = _weak_cached(core)
                if weak[2]:
                    return (weak,)
            return ()
    out: list[Any] = []
    for token in weak_tokens(word):
        found: Any = _weak_cached(token)
        if found[2]:
            out.append(found)
    return tuple(out)


def _word_weak_cached(word: str) -> tuple[Any, ...]:
    found: tuple[Any, ...] | None = _word_cache.get(word)
    if found is None:
        found = _bounded(_word_cache)[word] = _word_weak(word)
    return found


def _bounded(cache: dict[str, Any]) -> dict[str, Any]:
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    return cache


_TEXT_MEMO_CHARS: Final = 1024
_text_memo: Final[Memo[str, list[Candidate]]] = Memo(8192)
_LONG_MEMO_CHARS: Final = 16_384
_long_memo: Final[Memo[str, list[Candidate]]] = Memo(256)
"""Longer texts (pasted logs, long assistant answers) in a memo of their own, few of them: the op is
called again with a window that still holds the same long turns, and one such turn costs as much to
extract as dozens of short ones. 256 texts of at most 16,384 characters keep at most 16 MiB alive."""


def extract_candidates(text: object) -> list[Candidate]:
    """Candidates of one turn: strong ones first (≤12), then weak lowercase (≤32), then CJK (≤24).

    Memoised per text (texts up to 1,024 characters, 8,192 of them, :class:`~pipeline.core.memo.Memo`;
    256 more up to 16,384 characters): chat repeats itself ("ok", "thanks", templated bot turns, the
    op's growing windows), and the result depends on the text alone.
    The list returned may be shared between calls, so callers never mutate it (none does: the window
    keeps it as it is and the merge only reads it).
    """
    if not isinstance(text, str) or not text:
        return []
    memo = _text_memo if len(text) <= _TEXT_MEMO_CHARS else _long_memo
    if len(text) > _LONG_MEMO_CHARS:
        return _extract(text)
    cands = memo.get(text)
    if cands is None:
        cands = _extract(text)
        memo.put(text, cands)
    return cands


def scan_text(text: str) -> Scan:
    """Everything :func:`_extract` looks for in a text, with the patterns themselves: its @handles
    (without the ``@``), its capitalised runs, whether each run starts a sentence, its weak tokens and
    its CJK runs of 2 characters or more, each in text order.

    This is the definition the C scanner (``pipeline/core/_cscan.c``) implements in one pass over the
    text's characters; ``tests/unit/core/test_cscan.py`` compares the two on random Unicode text."""
    handles: list[str] = _HANDLE_RE.findall(text) if "@" in text else []
    runs: list[str] = []
    starts: list[bool] = []
    for m in _CAP_RUN_RE.finditer(text):
        runs.append(m[0])
        starts.append(is_at_sentence_start(text, m.start()))
    cjk: list[str] = [run for run in _CJK_RUN_RE.findall(text) if len(run) >= 2]
    return (handles, runs, starts, weak_tokens(text), cjk)


def _extract(text: str) -> list[Candidate]:
    """:func:`extract_candidates` without the memo: :func:`_extract_scanned` in C where the C
    scanner is built (its ``extract``, with this module's caches and functions: see the end of it)."""
    if _c_extract is not None:
        return _c_extract(text)
    return _extract_python(text)


def _extract_scanned(text: str, scanned: Scan) -> list[Candidate]:
    """:func:`_extract_python` from a text's :func:`scan_text` (or the C scanner's same answer):
    the same sightings, filters and caps, with the weak tokens of the whole text in a row instead of
    word by word (a text's weak tokens are its words' tokens in word order, see :func:`_word_weak`),
    each looked up in :data:`_weak_cache`.

    The cached values are read as ``tuple[Any, ...]``: a tuple of unknown length stays the cached
    object (see above) and its items are read directly, where ``Any`` went through the generic
    subscript for each of the ~28 reads of a text."""
    handles, runs, starts, tokens, cjk = scanned
    first: dict[str, tuple[Any, ...]] = {}
    mid: set[str] = set()
    for handle in handles:
        sighting: tuple[Any, ...] | None = _handle_cache.get(handle)
        if sighting is None:
            sighting = _bounded(_handle_cache)[handle] = _sighting("@" + handle, handle)
        norm: str = sighting[2]
        if norm:
            first.setdefault(norm, sighting)
            mid.add(norm)
    for k in range(len(runs)):
        surface = runs[k]
        info: tuple[Any, ...] | None = _surface_cache.get(surface)
        if info is None:
            info = _bounded(_surface_cache)[surface] = _surface(surface)
        run: tuple[Any, ...] = info[0]
        trimmed: tuple[Any, ...] | None = info[1]
        norm = run[2]
        if norm:
            first.setdefault(norm, run)
            if not starts[k]:
                mid.add(norm)
        if trimmed is not None and trimmed[2]:
            first.setdefault(trimmed[2], trimmed)
            mid.add(trimmed[2])

    out: list[Any] = []
    strong_norms: set[str] = set()
    for norm, found in first.items():
        klass = found[3]
        if klass == _DROP or (klass == _KEEP_IF_MID and norm not in mid):
            continue
        out.append(found[4])
        strong_norms.add(norm)
        if len(out) >= MAX_CANDIDATES:
            break

    weak_seen: set[str] = set()
    weak_count = 0
    for token in tokens:
        weak: tuple[Any, ...] | None = _weak_cache.get(token)
        if weak is None:
            weak = _bounded(_weak_cache)[token] = _weak(token) or _NOT_WEAK
        norm = weak[2]
        if not norm or norm in strong_norms or norm in weak_seen:
            continue
        weak_seen.add(norm)
        out.append(weak)
        weak_count += 1
        if weak_count >= MAX_WEAK_CANDIDATES:
            break

    if cjk:
        _cjk_run_grams(cjk, out, strong_norms, weak_seen)
    return out


def _extract_python(text: str) -> list[Candidate]:
    """:func:`_extract` with the patterns (where the C scanner is not built)."""

    # norm -> its first sighting; dict order is first-seen order (handles first). ``mid``: the norms
    # seen mid-sentence at least once (a handle always counts as one).
    first: dict[str, Any] = {}
    mid: set[str] = set()
    if "@" in text:
        for handle in _HANDLE_RE.findall(text):
            sighting: Any = _handle_cache.get(handle)
            if sighting is None:
                sighting = _bounded(_handle_cache)[handle] = _sighting("@" + handle, handle)
            norm = sighting[2]
            if norm:
                first.setdefault(norm, sighting)
                mid.add(norm)

    ascii_only = text.isascii()
    # An ASCII text without a capital has no run: skip the scan. (``lower() == text`` says so in one
    # pass over bytes; ``islower`` looked every character up in the Unicode tables.)
    runs = () if ascii_only and text.lower() == text else (
        _CAP_RUN_ASCII_RE if ascii_only else _CAP_RUN_RE).finditer(text)
    for m in runs:
        surface = m[0]  # a subscript, not the ``group`` method: no attribute lookup per match
        info: Any = _surface_cache.get(surface)
        if info is None:
            info = _bounded(_surface_cache)[surface] = _surface(surface)
        run = info[0]
        trimmed = info[1]
        norm = run[2]
        if norm:
            first.setdefault(norm, run)
            if norm not in mid and not is_at_sentence_start(text, m.start()):
                mid.add(norm)
        if trimmed is not None and trimmed[2]:
            first.setdefault(trimmed[2], trimmed)
            mid.add(trimmed[2])

    out: list[Any] = []  # Any: the cached candidate tuples go in as they are
    strong_norms: set[str] = set()
    for norm, sighting in first.items():
        klass = sighting[3]
        if klass == _DROP or (klass == _KEEP_IF_MID and norm not in mid):
            continue
        out.append(sighting[4])
        strong_norms.add(norm)
        if len(out) >= MAX_CANDIDATES:
            break

    weak_seen: set[str] = set()
    weak_count = 0
    # Word by word for every text: ``str.split`` cuts only at whitespace, which no token holds.
    groups: list[tuple[Any, ...]] = [_word_weak_cached(word) for word in text.split()]
    for group in groups:
        if weak_count >= MAX_WEAK_CANDIDATES:
            break
        for weak in group:
            norm = weak[2]
            if not norm or norm in strong_norms or norm in weak_seen:
                continue
            if weak_count >= MAX_WEAK_CANDIDATES:
                break
            weak_seen.add(norm)
            weak_count += 1
            out.append(weak)

    if not ascii_only:
        # One range over all four CJK ranges: about half the cost of scanning with the exact class
        # (most non-ASCII turns hold no CJK at all), and where it finds a character the runs start
        # from there instead of from the beginning again.
        maybe = _MAYBE_CJK_RE.search(text)
        if maybe is not None:
            _cjk_grams(text, out, strong_norms, weak_seen, maybe.start())
    return out


def _cjk_grams(text: str, out: list[Candidate], strong_norms: set[str], weak_seen: set[str], start: int = 0) -> None:
    """Whole short runs, else every 4-, 3- and 2-gram per start position; no pure-hiragana grams.
    ``start``: no CJK character comes before it."""
    _cjk_run_grams([run for run in _CJK_RUN_RE.findall(text, start) if len(run) >= 2], out, strong_norms, weak_seen)


def _cjk_run_grams(runs: list[str], out: list[Candidate], strong_norms: set[str], weak_seen: set[str]) -> None:
    """:func:`_cjk_grams` of a text's CJK runs of 2 characters or more, in text order."""
    count = 0
    for run in runs:
        if len(run) <= 4:
            grams = [run]
        else:
            grams = [run[i : i + n] for i in range(len(run) - 1) for n in (4, 3, 2) if i + n <= len(run)]
        for gram in grams:
            if count >= MAX_CJK_WEAK_CANDIDATES:
                return
            if _HIRAGANA_ONLY_RE.fullmatch(gram):
                continue
            norm = normalize_alias(gram)
            if not norm or norm in strong_norms or norm in weak_seen:
                continue
            weak_seen.add(norm)
            count += 1
            out.append((gram, gram, norm, True))


if _c_configure is not None:  # the C extract reads and fills this module's caches, calls its functions
    _c_configure(_surface_cache, _handle_cache, _weak_cache, _CACHE_MAX, STOPWORDS, COMMON_WORDS, _sighting,
                 _surface_python, _weak, normalize_alias, _NOT_WEAK, MAX_CANDIDATES, MAX_WEAK_CANDIDATES,
                 MAX_CJK_WEAK_CANDIDATES)
