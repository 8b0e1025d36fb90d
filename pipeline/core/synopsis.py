"""The one-line, privacy-safe synopsis of a page (reference-behaviour.md §7.2, gbrain ``safeSynopsis``).

A curated ``frontmatter.summary`` wins; otherwise the first prose line of the body after every
takes fence is cut out and every facts fence is reduced to world rows (an unterminated fence runs
to the end of the body). Never raw private text. Stripping every fence, not only the first closed
one, is a deliberate divergence from the reference (:mod:`pipeline.core.fences`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from pipeline.core.fences import (
    FACTS_BEGIN,
    FACTS_END,
    HEADER_10,
    HEADER_14,
    parse_facts,
    parse_row_cells,
    strip_every_takes_fence,
)
from pipeline.core.jscompat import JS_WS, utf16_len, utf16_prefix
from pipeline.core.normalize import JS_WHITESPACE, collapse_whitespace

SYNOPSIS_MAX = 160

_LINE_STARTS_AFTER = "\n\r\u2028\u2029"
"""JS ``^`` with the m flag also matches after these (not only after ``\\n``)."""


def strip_dash_block(text: str) -> str:
    """``text`` without its first ``/^---[\\s\\S]*?---\\s*/m`` match (JS meaning), with ``str.find``.

    The regex tried its line-start alternation at every position of the body: most of the cost of
    a page's first synopsis. The block opens at the first ``---`` that starts a line, or there is
    none: a later opening would need a closing ``---`` further on, which would close the first one
    too. It closes at the next ``---`` from three characters on (the lazy ``*?``) and takes the
    whitespace after it. ``tests/unit/core/test_properties.py`` compares this with the regex.
    """
    at = text.find("---")
    while at > 0 and text[at - 1] not in _LINE_STARTS_AFTER:
        at = text.find("---", at + 1)
    if at == -1:
        return text
    end = text.find("---", at + 3)
    if end == -1:
        return text
    return text[:at] + text[end + 3 :].lstrip(JS_WHITESPACE)


_SENTENCE_BREAK_RE = re.compile(f"(?<=[.!?])[{JS_WS}]")
"""The reference's sentence break: whitespace after ``.``, ``!`` or ``?``."""
_SENTENCE_END_RE = re.compile(f"[.!?][{JS_WS}]")
"""The same break found from its punctuation (it ends the sentence; the break is the character
after it): the look-behind was tried at every position of the line, where a search that starts
with a class skips to the punctuation. ``tests/unit/core/test_properties.py`` compares the two."""


def clip(text: str, limit: int = SYNOPSIS_MAX) -> str:
    """Over ``limit`` UTF-16 units: keep ``limit - 1``, right-trim, append ``…``."""
    if utf16_len(text) <= limit:
        return text
    return utf16_prefix(text, limit - 1).rstrip(JS_WHITESPACE) + "…"


def safe_synopsis(compiled_truth: str | None, frontmatter: Mapping[str, object] | None) -> str:
    """First sentence of the summary or of the first prose line, whitespace-collapsed, ≤160 units."""
    # A dict (every parsed frontmatter) first: the ABC's isinstance was a tenth of a first synopsis.
    summary = frontmatter.get("summary") if type(frontmatter) is dict or isinstance(frontmatter, Mapping) else None
    if isinstance(summary, str) and summary.strip(JS_WHITESPACE):
        return clip_collapsed(summary)
    body = compiled_truth or ""
    if not body:
        return ""
    line = first_prose_line(body, untouched_lines_end(body))
    if line is None:
        stripped = strip_dash_block(facts_stripped_head(strip_every_takes_fence(body)))
        line = first_prose_line(stripped, len(stripped) + 1)
        if line is None:
            return ""
    end = _SENTENCE_END_RE.search(line)
    sentence = line[: end.start() + 1] if end else line
    return clip_collapsed(sentence)


_HEAD: Final = 4 * SYNOPSIS_MAX
"""How much of a long text :func:`clip_collapsed` collapses first."""


def clip_collapsed(text: str) -> str:
    """``clip(collapse_whitespace(text))``, collapsing only the head of a long text when that head
    already collapses to more than :data:`SYNOPSIS_MAX` units.

    A page's first line without a sentence break can be its whole first paragraph, and collapsing
    its whitespace with the regex was a good part of that page's first synopsis, for 159 units
    kept. The collapsed head is a prefix of the collapsed text (each whitespace run of the head
    becomes the same single space, a run cut at the end is trimmed where the whole text goes on
    after it), so when it is longer than the limit both clip to the same first ``limit - 1`` units.
    ``tests/unit/core/test_properties.py`` compares this with the two steps."""
    if len(text) > _HEAD:
        head = collapse_whitespace(text[:_HEAD])
        if utf16_len(head) > SYNOPSIS_MAX:
            return clip(head)
    return clip(collapse_whitespace(text))


def facts_stripped_head(body: str) -> str:
    """:func:`~pipeline.core.fences.strip_every_facts_fence_world` of ``body`` up to the header line
    of its first re-rendered facts fence, which is all of it a synopsis can read.

    Every fence was parsed and rendered whole again, rows and later fences included, and that was
    most of the cost of a synopsis under a fence. But the rendered header line (``| # | claim …``)
    is prose, so the first prose line is that line or one before it; the dash block that
    :func:`strip_dash_block` removes next opens at a line start, so it either opens before the
    fence and closes at the latest in its begin marker (``<!---`` holds a ``---``) or opens after
    the header line: either way the lines up to that header are the same as in the whole stripped
    body. The header itself depends on whether any world row has a typed-claim field (14 columns or
    10), which :func:`may_have_typed_world_row` mostly rules out before any parse. An
    unterminated first fence is cut to the end of the body, as before. ``tests/unit/core/
    test_properties.py`` compares the synopsis with the one of the fully stripped body."""
    begin = body.find(FACTS_BEGIN)
    if begin == -1:
        return body
    end = body.find(FACTS_END, begin + len(FACTS_BEGIN))
    if end == -1:
        return body[:begin]
    fence = body[begin : end + len(FACTS_END)]
    typed = may_have_typed_world_row(fence) and any(
        f.typed for f in parse_facts(fence) if f.visibility == "world")
    return body[:begin] + FACTS_BEGIN + "\n" + (HEADER_14 if typed else HEADER_10)


def may_have_typed_world_row(fence: str) -> bool:
    """False when no row of the facts ``fence`` (markers included) can parse to a world fact with a
    typed-claim field: that needs a row whose visibility cell is ``world`` in any case (so its
    lowercase holds ``world``) with a non-blank cell from the eleventh on (so more than 10 pipes).
    Most fences have none, but typed private rows or empty typed columns, and their full parse was
    most of the synopsis under them. ``tests/unit/core/test_properties.py`` checks it is never False
    for a fence with such a row."""
    for line in fence[len(FACTS_BEGIN) : len(fence) - len(FACTS_END)].split("\n"):
        if line.count("|") > 10 and "world" in line.lower():
            cells = parse_row_cells(line)
            if cells is not None and any(cell.strip(JS_WHITESPACE) for cell in cells[10:14]):
                return True
    return False


def first_prose_line(text: str, limit: int) -> str | None:
    """The first line of ``text`` (cut at ``\\n``) that is prose: not blank, not a heading, not an
    HTML comment, trimmed; only lines whose end (their ``\\n``, or the end of ``text``) lies before
    ``limit`` count, and ``None`` when none of them is prose. Found with ``str.find``, without the
    list of every line of the body that ``split`` made."""
    pos = 0
    n = len(text)
    while pos <= n:
        end = text.find("\n", pos)
        if end == -1:
            end = n
        if end >= limit:
            return None
        line = text[pos:end].strip(JS_WHITESPACE)
        if line and not line.startswith("#") and not line.startswith("<!--"):
            return line
        pos = end + 1
    return None


def untouched_lines_end(body: str) -> int:
    """A bound under which the fence and dash-block stripping leave ``body`` as it is, for
    :func:`first_prose_line`: most page bodies open with their prose line, so their synopsis needs
    neither the facts table parsed and rendered again nor the dash block looked for.

    Every one of those steps starts its change at a ``---`` (the dash block) or at a fence's begin
    marker, each of which holds a ``---`` two characters in (``<!---``), so nothing before the first
    ``---`` less two changes; none of them holds a ``\\n``, so none can start on an earlier line
    either, even after an earlier step's change. The lines that end before the bound are the first
    lines of the stripped body too. Without any ``---``, nothing changes: every line counts.
    ``tests/unit/core/test_properties.py`` compares the synopsis with the one of the stripped body."""
    dashes = body.find("---")
    return len(body) + 1 if dashes == -1 else dashes - 2
