"""The one-line, privacy-safe synopsis of a page (reference-behaviour.md §7.2, gbrain ``safeSynopsis``).

A curated ``frontmatter.summary`` wins; otherwise the first prose line of the body after every
takes fence is cut out and every facts fence is reduced to world rows (an unterminated fence runs
to the end of the body). Never raw private text. Stripping every fence, not only the first closed
one, is a deliberate divergence from the reference (:mod:`pipeline.core.fences`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pipeline.core.fences import strip_every_facts_fence_world, strip_every_takes_fence
from pipeline.core.jscompat import JS_WS, utf16_len, utf16_prefix
from pipeline.core.normalize import JS_WHITESPACE, collapse_whitespace

SYNOPSIS_MAX = 160

# /^---[\s\S]*?---\s*/m, first occurrence: JS "^" (m flag) also matches after \r, U+2028, U+2029.
_DASH_BLOCK_RE = re.compile(f"(?:^|(?<=[\\n\\r\\u2028\\u2029]))---[\\s\\S]*?---[{JS_WS}]*")
_SENTENCE_BREAK_RE = re.compile(f"(?<=[.!?])[{JS_WS}]")


def clip(text: str, limit: int = SYNOPSIS_MAX) -> str:
    """Over ``limit`` UTF-16 units: keep ``limit - 1``, right-trim, append ``…``."""
    if utf16_len(text) <= limit:
        return text
    return utf16_prefix(text, limit - 1).rstrip(JS_WHITESPACE) + "…"


def safe_synopsis(compiled_truth: str | None, frontmatter: Mapping[str, object] | None) -> str:
    """First sentence of the summary or of the first prose line, whitespace-collapsed, ≤160 units."""
    summary = frontmatter.get("summary") if isinstance(frontmatter, Mapping) else None
    if isinstance(summary, str) and summary.strip(JS_WHITESPACE):
        return clip(collapse_whitespace(summary))
    body = compiled_truth or ""
    if not body:
        return ""
    stripped = _DASH_BLOCK_RE.sub("", strip_every_facts_fence_world(strip_every_takes_fence(body)), count=1)
    for raw_line in stripped.split("\n"):
        line = raw_line.strip(JS_WHITESPACE)
        if line and not line.startswith("#") and not line.startswith("<!--"):
            brk = _SENTENCE_BREAK_RE.search(line)
            sentence = line[: brk.start()] if brk else line
            return clip(collapse_whitespace(sentence))
    return ""
