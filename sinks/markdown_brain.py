"""Read a folder of Markdown pages with YAML frontmatter as brain pages.

One file = one page: ``slug`` is the path relative to the folder without ``.md`` (always ``/``
separated), the body after the frontmatter is ``compiled_truth``, and the whole frontmatter is kept
as the page's JSONB ``frontmatter`` (``aliases`` and ``summary`` there are what the decision core
reads). ``title`` falls back to the first ``# heading``, then the file name; ``type`` falls back to
a guess from the top folder (``people/`` -> ``person``, ...), then ``concept`` (gbrain's default).
Files are read in sorted path order, so new pages get ids in a stable order.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from pipeline.core.pages import Page

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
            try:
                data = yaml.safe_load(raw) if raw.strip() else {}
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


def iter_markdown_files(root: Path) -> Iterator[tuple[str, Path]]:
    """``(relative slug path, file)`` for every ``*.md`` below ``root``, sorted, hidden folders skipped."""
    files = [p for p in root.rglob("*") if p.is_file() and p.suffix.lower() == ".md"]
    for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        rel = path.relative_to(root).as_posix()
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        yield rel, path


def read_markdown_dir(path: str | Path, source_id: str = "default") -> list[Page]:
    """Every Markdown page below ``path``, in sorted path order, in source ``source_id``."""
    root = Path(path)
    if not root.is_dir():
        raise MarkdownBrainError(f"{root}: not a directory")
    pages: list[Page] = []
    for rel, file in iter_markdown_files(root):
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise MarkdownBrainError(f"{rel}: not valid UTF-8 (byte {exc.start})") from None
        except OSError as exc:
            raise MarkdownBrainError(f"{rel}: cannot read ({exc.strerror or exc})") from None
        page = page_from_markdown(text.replace("\r\n", "\n"), rel, len(pages) + 1)
        pages.append(Page(
            id=page.id, slug=page.slug, title=page.title, source_id=source_id, type=page.type,
            compiled_truth=page.compiled_truth, frontmatter=page.frontmatter, deleted=page.deleted,
        ))
    if not pages:
        raise MarkdownBrainError(f"{root}: no .md files found")
    return pages
