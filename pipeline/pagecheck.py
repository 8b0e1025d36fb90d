"""What a brain page may hold before it is imported: slugs that cannot forge a block, bounded sizes.

A page's slug is printed into the agent's context block, so a slug is refused when it holds a
control character (newlines included, and the Unicode line and paragraph separators), a backtick
or ``-->``: any of these could end the block's list or comment and start lines of its own.
Titles and bodies are bounded so one file cannot swell the brain every worker holds in memory.
Every reader (Markdown folder, brain directory, :func:`sinks.brain_import.import_brain`) uses
these checks; a refused page is reported with one line naming it and the other pages go on.
"""

from __future__ import annotations

import unicodedata

from pipeline.core.pages import Page

MAX_SLUG_CHARS = 512
MAX_TITLE_CHARS = 1_000
MAX_BODY_BYTES = 1_000_000
"""A page's ``compiled_truth`` (a Markdown file's body), in UTF-8 bytes."""
MAX_FRONTMATTER_BYTES = 64_000
"""A Markdown file's YAML frontmatter, in UTF-8 bytes (checked before it is parsed)."""
MAX_FILE_BYTES = MAX_BODY_BYTES + MAX_FRONTMATTER_BYTES + 16
"""A Markdown file larger than this is refused without reading it."""
_FORBIDDEN_IN_SLUG = ("`", "-->")


def slug_problem(slug: str) -> str | None:
    """Why ``slug`` cannot be imported, or None when it can."""
    if not slug:
        return "the slug is empty"
    if len(slug) > MAX_SLUG_CHARS:
        return f"the slug is longer than {MAX_SLUG_CHARS} characters"
    if not (slug.isascii() and slug.isprintable()):  # printable ASCII holds none: skip the scan
        for char in slug:
            if unicodedata.category(char) in ("Cc", "Zl", "Zp") or char == "\x7f":
                return f"the slug holds a control character (U+{ord(char):04X})"
    for token in _FORBIDDEN_IN_SLUG:
        if token in slug:
            return f"the slug holds {token!r}"
    return None


def page_problem(page: Page) -> str | None:
    """Why ``page`` cannot be imported (slug, title or body), or None when it can."""
    problem = slug_problem(page.slug)
    if problem is not None:
        return problem
    if len(page.title) > MAX_TITLE_CHARS:
        return f"the title is longer than {MAX_TITLE_CHARS:,} characters"
    body = page.compiled_truth
    # at most 4 UTF-8 bytes per code point: most bodies are settled without encoding them
    if len(body) * 4 > MAX_BODY_BYTES and len(body.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES:
        return f"the body is larger than {MAX_BODY_BYTES:,} bytes"
    return None


def refusal(where: str, problem: str) -> str:
    """The one line that reports a refused page: ``refused <where>: <problem>``."""
    return f"refused {where!r}: {problem}"
