"""Read a folder of Markdown pages with YAML frontmatter as brain pages.

One file = one page: ``slug`` is the path relative to the folder without ``.md`` (always ``/``
separated), the body after the frontmatter is ``compiled_truth``, and the whole frontmatter is kept
as the page's JSONB ``frontmatter`` (``aliases`` and ``summary`` there are what the decision core
reads). ``title`` falls back to the first ``# heading``, then the file name; ``type`` falls back to
a guess from the top folder (``people/`` -> ``person``, ...), then ``concept`` (gbrain's default).
Files are read in sorted path order, so new pages get ids in a stable order.

The folder is untrusted content, so reading it never leaves it and never grows without bound:

- a symlink is followed only when its target is inside the folder; a symlinked folder is never
  entered (its pages would be read twice, or come from elsewhere);
- frontmatter larger than :data:`pipeline.pagecheck.MAX_FRONTMATTER_BYTES` is refused before it is
  parsed, and YAML anchors and aliases are refused (a few hundred bytes of nested aliases expand
  to gigabytes);
- files larger than :data:`pipeline.pagecheck.MAX_FILE_BYTES` are not read; slugs, titles and
  bodies are checked by :func:`pipeline.pagecheck.page_problem`.

Each of these refuses one file with a line naming it; the other files are read.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from pipeline.core.pages import Page
from pipeline.pagecheck import MAX_FILE_BYTES, MAX_FRONTMATTER_BYTES, page_problem, refusal

FOLDER_TYPES = {
    "people": "person", "person": "person",
    "companies": "company", "company": "company", "orgs": "company",
    "projects": "project", "project": "project",
    "concepts": "concept", "concept": "concept", "ideas": "concept",
    "meetings": "meeting", "meeting": "meeting",
    "places": "place", "place": "place",
}
DEFAULT_TYPE = "concept"
_HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)


class MarkdownBrainError(ValueError):
    """A file that cannot be read as a page; the message names it."""


class PageRefused(MarkdownBrainError):
    """One file is left out (outside the folder, too large, anchors, a bad slug); the others go on."""


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader without anchors and aliases (the "billion laughs" expansion)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise PageRefused("frontmatter uses YAML anchors or aliases, which are not allowed")
        return super().compose_node(parent, index)


def split_frontmatter(text: str, where: str) -> tuple[dict[str, Any], str]:
    """``---`` YAML ``---`` at the top (leading blank lines allowed) -> (mapping, body)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i >= len(lines) or lines[i].strip() != "---":
        return {}, text
    for j in range(i + 1, len(lines)):
        if lines[j].strip() == "---":
            raw = "\n".join(lines[i + 1 : j])
            body = "\n".join(lines[j + 1 :])
            if len(raw.encode("utf-8", "surrogatepass")) > MAX_FRONTMATTER_BYTES:
                raise PageRefused(refusal(where, f"frontmatter is larger than {MAX_FRONTMATTER_BYTES:,} bytes"))
            try:
                data = yaml.load(raw, Loader=_NoAliasLoader) if raw.strip() else {}
            except PageRefused as exc:
                raise PageRefused(refusal(where, str(exc))) from None
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                line = f" line {mark.line + i + 2}" if mark is not None else ""
                raise MarkdownBrainError(f"{where}:{line} frontmatter is not valid YAML ({getattr(exc, 'problem', exc)})") from None
            if data is None:
                data = {}
            if not isinstance(data, dict):
                raise MarkdownBrainError(f"{where}: frontmatter must be a YAML mapping, got {type(data).__name__}")
            return _jsonable(data), body
    raise MarkdownBrainError(f"{where}: frontmatter opened with '---' is never closed")


def _jsonable(value: Any) -> Any:
    """YAML values JSON can hold: dates become ISO strings, keys strings."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float) and value != value:  # NaN has no JSON form
        return None
    return value


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def page_from_markdown(text: str, rel_path: str, page_id: int) -> Page:
    """One page from a file's text and its path relative to the brain folder."""
    frontmatter, body = split_frontmatter(text, rel_path)
    slug = rel_path[: -len(".md")] if rel_path.lower().endswith(".md") else rel_path
    heading = _HEADING.search(body)
    title = _text(frontmatter.get("title")).strip() or (heading.group(1).strip() if heading else "") or Path(slug).name
    top = slug.split("/", 1)[0].lower() if "/" in slug else ""
    page_type = _text(frontmatter.get("type")).strip() or FOLDER_TYPES.get(top, DEFAULT_TYPE)
    deleted = frontmatter.get("deleted") is True
    return Page(
        id=page_id, slug=slug, title=title, type=page_type, compiled_truth=body,
        frontmatter=frontmatter, deleted=deleted,
    )


def iter_markdown_files(root: Path, refused: list[str] | None = None) -> Iterator[tuple[str, Path]]:
    """``(relative slug path, file to read)`` for every ``*.md`` below ``root``, sorted.

    Hidden files and folders are skipped. Symlinked folders are not entered, and a symlinked file
    is yielded (as its target) only when the target is inside ``root``; each one left out adds a
    line to ``refused``.
    """
    base = root.resolve()
    found: list[tuple[str, Path]] = []
    for folder, dirs, files in os.walk(base, followlinks=False):
        here = Path(folder)
        for name in list(dirs):
            if name.startswith(".") or (here / name).is_symlink():
                dirs.remove(name)
                if not name.startswith(".") and refused is not None:
                    rel_dir = (here / name).relative_to(base).as_posix()
                    refused.append(refusal(rel_dir, "a symlinked folder is not followed"))
        for name in files:
            if name.startswith(".") or not name.lower().endswith(".md"):
                continue
            path = here / name
            rel = path.relative_to(base).as_posix()
            target = path.resolve() if path.is_symlink() else path
            if target != path and not (target.is_relative_to(base) and target.is_file()):
                if refused is not None:
                    refused.append(refusal(rel, "a symlink to outside the folder is not followed"))
                continue
            found.append((rel, target))
    yield from sorted(found, key=lambda item: item[0])


def _read_text(rel: str, file: Path) -> str:
    """The file's text, refusing one too large to be a page before reading it."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW)  # resolved already: a swapped-in link fails
        with os.fdopen(fd, "rb") as handle:
            if os.fstat(handle.fileno()).st_size > MAX_FILE_BYTES:
                raise PageRefused(refusal(rel, f"the file is larger than {MAX_FILE_BYTES:,} bytes"))
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise MarkdownBrainError(f"{rel}: cannot read ({exc.strerror or exc})") from None
    if len(data) > MAX_FILE_BYTES:
        raise PageRefused(refusal(rel, f"the file is larger than {MAX_FILE_BYTES:,} bytes"))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MarkdownBrainError(f"{rel}: not valid UTF-8 (byte {exc.start})") from None


def read_markdown_dir(path: str | Path, source_id: str = "default", refused: list[str] | None = None) -> list[Page]:
    """Every Markdown page below ``path``, in sorted path order, in source ``source_id``.

    Files refused one by one (module docstring) are left out, each with a line in ``refused``;
    without a list they stop the import like any other unreadable file.
    """
    root = Path(path)
    if not root.is_dir():
        raise MarkdownBrainError(f"{root}: not a directory")
    pages: list[Page] = []
    skipped: list[str] = [] if refused is None else refused
    for rel, file in iter_markdown_files(root, skipped):
        try:
            page = page_from_markdown(_read_text(rel, file).replace("\r\n", "\n"), rel, len(pages) + 1)
            problem = page_problem(page)
            if problem is not None:
                raise PageRefused(refusal(rel, problem))
        except PageRefused as exc:
            skipped.append(str(exc))
            continue
        pages.append(Page(
            id=page.id, slug=page.slug, title=page.title, source_id=source_id, type=page.type,
            compiled_truth=page.compiled_truth, frontmatter=page.frontmatter, deleted=page.deleted,
        ))
    if refused is None and skipped:
        raise PageRefused(skipped[0])
    if not pages:
        raise MarkdownBrainError(f"{root}: no .md files found" + (f" that can be imported ({len(skipped)} refused)" if skipped else ""))
    return pages
