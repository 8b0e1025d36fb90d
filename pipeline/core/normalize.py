"""The two normalisers of the reference (reference-behaviour.md §1.4), with JavaScript's notion of whitespace.

``normalize_alias`` keys the alias table and deduplicates candidates; ``slugify`` feeds the slug
arms. Both must agree byte for byte with gbrain, so whitespace is JS ``\\s`` / ``String.trim``,
not Python's ``str.isspace`` (which also counts U+001C..U+001F and not U+FEFF).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Final

JS_WHITESPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
"""Exactly the characters JavaScript's ``\\s`` and ``String.prototype.trim`` treat as whitespace."""

_WS_RUN: Final = re.compile(f"[{re.escape(JS_WHITESPACE)}]+")
_LEADING_WRAPPERS: Final = re.compile(r"^[\"'`\[(]+")
_TRAILING_WRAPPERS: Final = re.compile(r"[\"'`\])]+$")
_NON_SLUG: Final = re.compile(r"[^a-z0-9]+")
_COMBINING_MARKS: Final = re.compile("[\u0300-\u036f]+")
_CJK_ONLY: Final = re.compile("[\u4e00-\u9fff\u3040-\u30ff\uac00-\ud7af]+")
"""Text of the extractor's CJK ranges only (its n-grams): no character of them lowercases or
NFKD-decomposes to anything with ``a-z`` or ``0-9``, so its slug is empty (``tests/unit/core/
test_properties.py`` checks each one)."""


def js_trim(text: str) -> str:
    """``String.prototype.trim``."""
    return text.strip(JS_WHITESPACE)


def is_collapsed(text: str) -> bool:
    """Cheap proof that ``collapse_whitespace(text) == text``: only plain single spaces inside.

    ``str.isprintable`` is false for every whitespace character except the ASCII space.
    """
    return text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " "


def collapse_whitespace(text: str) -> str:
    """``s.replace(/\\s+/g, ' ').trim()``; a text :func:`is_collapsed` proves unchanged skips the
    regex, which tests each character against the 25 whitespace characters (a page's synopsis and
    most labels are such texts). Another text without :data:`_PY_ONLY_SPACES` or U+FEFF is split
    at Python's whitespace, which is then JS whitespace (``tests/unit/core/test_properties.py``
    checks every code point): that split and join cost a fraction of the regex, which was most of
    collapsing a synopsis line with a tab or a double space."""
    if is_collapsed(text):
        return text
    if ("\ufeff" not in text and "\x85" not in text and "\x1c" not in text and "\x1d" not in text
            and "\x1e" not in text and "\x1f" not in text):  # none of _PY_ONLY_SPACES, each found by memchr
        return " ".join(text.split())
    return js_trim(_WS_RUN.sub(" ", text))


_PY_ONLY_SPACES: Final = "\x1c\x1d\x1e\x1f\x85"
"""What ``str.split`` splits at besides JS whitespace (which has U+FEFF besides Python's)."""


_NOT_FIRST: Final = " \"'`[("  # '' is "in" every string: an empty text is not plain (its norm is '' too)
_NOT_LAST: Final = " \"'`])"


def is_plain(text: str) -> bool:
    """Cheap proof that ``normalize_alias(text) == text.lower()``: in NFKC already (every ASCII text
    is), printable (no whitespace but the space), single spaces inside, no space or quote/bracket at
    either end (nothing to trim or strip). Most names and words are plain, and so are most
    non-ASCII ones (``Zoë``, CJK n-grams), whose full normalisation was the dearer: NFKC and three
    substitutions, where ``unicodedata.is_normalized`` answers from a quick-check table."""
    return ((text.isascii() or unicodedata.is_normalized("NFKC", text)) and text.isprintable() and "  " not in text
            and text[:1] not in _NOT_FIRST and text[-1:] not in _NOT_LAST)


def normalize_alias(raw: Any) -> str:
    """Alias key: NFKC, lowercase, whitespace collapsed, one layer of quotes/brackets stripped.

    May return ``''``; callers skip empty results. A plain text (:func:`is_plain`) is only lowercased:
    the normalisation and the three substitutions would change nothing, and they were most of a
    first extraction's normalising (every new surface and word).
    """
    if not isinstance(raw, str):
        return ""
    return raw.lower() if is_plain(raw) else _normalize_fully(raw)


def _normalize_fully(raw: str) -> str:
    """:func:`normalize_alias` of a string, every step taken."""
    text = unicodedata.normalize("NFKC", raw).lower()
    text = js_trim(_WS_RUN.sub(" ", text))
    text = _LEADING_WRAPPERS.sub("", text)
    text = _TRAILING_WRAPPERS.sub("", text)
    return js_trim(text)


def normalize_alias_list(value: Any) -> list[str]:
    """Frontmatter ``aliases`` (list, comma-separated scalar, or scalar) -> deduplicated norms, in order."""
    out: dict[str, None] = {}

    def push(item: Any) -> None:
        norm = normalize_alias(item)
        if norm:
            out.setdefault(norm, None)

    if isinstance(value, list):
        for item in value:
            push(item)
    elif isinstance(value, str):
        if "," in value:
            for piece in value.split(","):
                push(piece)
        else:
            push(value)
    return list(out)


def slugify(text: str) -> str:
    """Lowercase, NFKD, drop combining marks U+0300..U+036F, ``[^a-z0-9]+`` -> ``-``, trim dashes.

    Every first query of a window is slugified (:meth:`~pipeline.core.brain.BrainIndex.query_info`),
    and these steps taken one by one (the combining marks dropped by a generator, character by
    character) were 7.6 % of the op's first pass. An ASCII text (most queries) needs none of NFKD,
    the marks or a dash-run pass (``[^a-z0-9]+`` already leaves one dash per run): letters and digits
    are their own slug, words and spaces their words joined by dashes, words with single dashes or
    apostrophes between them those words joined by dashes; CJK n-grams have none. Another text drops its
    marks with one substitution. ``tests/unit/core/test_properties.py`` compares this with every step.
    """
    if not text.isascii():
        if _CJK_ONLY.fullmatch(text):
            return ""
        folded = _COMBINING_MARKS.sub("", unicodedata.normalize("NFKD", text.lower()))
        if folded.isascii():  # accented Latin letters (most non-ASCII names) decompose to ASCII and marks
            return _ascii_slug(folded)
        return _NON_SLUG.sub("-", folded).strip("-")
    low = text.lower()
    if low.isalnum():
        return low
    if low.replace(" ", "").isalnum():
        return "-".join(low.split())  # only spaces between them: the words, empty ones dropped
    if "-" in low or "'" in low:  # x-ray, o'neil, state-of-the-art: single dashes and apostrophes between
        dashed = low.replace("'", "-")
        if dashed.replace("-", "").isalnum() and "--" not in dashed and dashed[0] != "-" and dashed[-1] != "-":
            return dashed
    return _ascii_slug(low)


_SLUG_SPACES: Final = bytes(c if "0" <= chr(c) <= "9" or "a" <= chr(c) <= "z" else 32 for c in range(256))
"""A ``bytes.translate`` table: ``a-z`` and ``0-9`` kept, every other byte a space."""


def _ascii_slug(text: str) -> str:
    """``_NON_SLUG.sub("-", text).strip("-")`` of an ASCII ``text``: every byte but ``a-z0-9`` made a
    space by a byte table, then the words joined by dashes, where the regex's substitution (and the
    strip after it) cost several times as much. ``tests/unit/core/test_properties.py`` compares
    :func:`slugify` with every step of the reference."""
    return "-".join(text.encode("ascii").translate(_SLUG_SPACES).decode("ascii").split())
