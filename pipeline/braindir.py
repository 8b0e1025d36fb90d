"""Load a brain from a directory of JSON lines (docs/contracts.md "Brain directory").

``DIR/pages.jsonl``: one page per line (``slug`` and ``title`` required; ``id`` defaults to the line's
position among the pages, which is the insertion order arm-2 results follow). ``DIR/aliases.jsonl``,
when present, is the alias table exactly as given; when absent, aliases come from each page's
``frontmatter.aliases`` (or, failing that, its top-level ``aliases``). A bad line is reported with
its file and line number; nothing is silently skipped. A page that
:func:`pipeline.pagecheck.page_problem` refuses (a slug that could forge the context block, an
oversize title or body) is left out with a one-line refusal naming its file, line and slug; the
other pages load.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from sys import intern
from typing import Any, BinaryIO

import orjson

from pipeline.core.brain import BrainIndex
from pipeline.core.pages import AliasRow, Page
from pipeline.gcpause import collector_paused
from pipeline.pagecheck import page_problem, refusal

log = logging.getLogger(__name__)

PAGES_FILE = "pages.jsonl"
ALIASES_FILE = "aliases.jsonl"


class BrainDirError(ValueError):
    """A brain directory that cannot be loaded; the message names the file and line."""


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of every non-blank line, one at a time: the file is read line by
    line, so a 100,000-page file is never held whole, nor all its parsed objects at once."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise BrainDirError(f"{path}: cannot read ({exc.strerror or exc})") from None
    with handle:
        yield from _parsed(path, handle)


def _parsed(path: Path, handle: BinaryIO) -> Iterator[tuple[int, dict[str, Any]]]:
    loads = orjson.loads
    lineno = 0
    while True:
        try:
            line = handle.readline()
        except OSError as exc:
            raise BrainDirError(f"{path}: cannot read ({exc.strerror or exc})") from None
        if not line:
            return
        lineno += 1
        if line.isspace():
            continue
        try:
            obj = loads(line)
        except orjson.JSONDecodeError as exc:
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                raise BrainDirError(f"{path}:{lineno}: not valid UTF-8") from None
            raise BrainDirError(f"{path}:{lineno}: not valid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise BrainDirError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        yield lineno, obj


def _field(
    obj: dict[str, Any], name: str, kind: type | tuple[type, ...], where: str, *, default: Any = ..., nonempty: bool = False
) -> Any:
    if name not in obj or obj[name] is None:
        if default is ...:
            raise BrainDirError(f"{where}: field '{name}' is required")
        return default
    value = obj[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise BrainDirError(f"{where}: field '{name}' must be {expected}, got {type(value).__name__}")
    if nonempty and not value:
        raise BrainDirError(f"{where}: field '{name}' must not be empty")
    return value


def _page(position: int, lineno: int, obj: dict[str, Any], path: Path) -> Page:
    page = _plain_page(position, obj)
    if page is not None:
        return page
    where = f"{path}:{lineno}"
    frontmatter = dict(_field(obj, "frontmatter", dict, where, default={}))
    if "aliases" not in frontmatter and obj.get("aliases") is not None:
        aliases = obj["aliases"]
        if not isinstance(aliases, list | str):
            raise BrainDirError(f"{where}: field 'aliases' must be a list or a string")
        frontmatter["aliases"] = aliases
    deleted = _field(obj, "deleted", bool, where, default=False) or obj.get("deleted_at") is not None
    return Page(
        id=_field(obj, "id", int, where, default=position),
        slug=_field(obj, "slug", str, where, nonempty=True),
        title=_field(obj, "title", str, where),
        source_id=_field(obj, "source_id", str, where, default="default", nonempty=True),
        type=_field(obj, "type", str, where, default="person"),
        compiled_truth=_field(obj, "compiled_truth", str, where, default=""),
        frontmatter=frontmatter,
        deleted=bool(deleted),
    )


def _plain_page(position: int, obj: dict[str, Any]) -> Page | None:
    """The page of a line whose fields all have their expected types, without :func:`_field`'s
    per-field checks and messages; ``None`` sends the line through :func:`_page`'s checked path,
    which reports what is wrong. Same result as that path for every line it accepts."""
    get = obj.get
    page_id, slug, title = get("id", position), get("slug"), get("title")
    source, kind, body = get("source_id"), get("type"), get("compiled_truth")
    frontmatter, deleted = get("frontmatter"), get("deleted")
    if page_id is None:
        page_id = position
    if (type(page_id) is not int or type(slug) is not str or not slug or type(title) is not str
            or not (source is None or (type(source) is str and source))
            or not (kind is None or type(kind) is str) or not (body is None or type(body) is str)
            or not (deleted is None or type(deleted) is bool)):
        return None
    if frontmatter is None:
        frontmatter = {}
    elif type(frontmatter) is not dict:
        return None
    if "aliases" not in frontmatter:
        aliases = get("aliases")
        if aliases is not None:
            if not isinstance(aliases, list | str):
                return None
            frontmatter = {**frontmatter, "aliases": aliases}
    # source and type repeat on every line: one shared string each instead of one per page
    return Page(page_id, slug, title, intern(source) if source else "default",
                intern(kind) if kind is not None else "person", body or "", frontmatter,
                bool(deleted) or get("deleted_at") is not None)


def iter_brain_dir(path: str | Path, refused: list[str] | None = None) -> tuple[list[Page], list[AliasRow] | None]:
    """Pages in file order, and the alias rows of ``aliases.jsonl`` (``None`` when there is none).

    Refused pages are left out; their one-line reasons go to ``refused`` (logged as warnings when
    no list is given).
    """
    root = Path(path)
    pages_path = root / PAGES_FILE
    if not root.is_dir():
        raise BrainDirError(f"{root}: not a directory (expected a brain directory with {PAGES_FILE})")
    if not pages_path.is_file():
        raise BrainDirError(f"{pages_path}: missing (a brain directory needs {PAGES_FILE})")
    pages: list[Page] = []
    lines: list[int] = []  # line of each kept page
    first_of_id: dict[int, int] = {}  # page id -> index in pages
    first_of_slug: dict[str, int] = {}  # slug -> index of its first page, whichever source
    other_sources: dict[tuple[str, str], int] = {}  # (source, slug) of later pages sharing a slug
    for position, (lineno, obj) in enumerate(_lines(pages_path), start=1):
        page = _page(position, lineno, obj, pages_path)
        problem = page_problem(page)
        if problem is not None:
            line = refusal(f"{pages_path}:{lineno} {page.slug}", problem)
            if refused is None:
                log.warning("%s", line)
            else:
                refused.append(line)
            continue
        n = len(pages)
        first = first_of_id.setdefault(page.id, n)
        if first != n:
            raise BrainDirError(f"{pages_path}:{lineno}: page id {page.id} already used on line {lines[first]}")
        first = first_of_slug.setdefault(page.slug, n)
        if first != n:
            if pages[first].source_id != page.source_id:
                first = other_sources.setdefault((page.source_id, page.slug), n)
            if first != n:
                raise BrainDirError(
                    f"{pages_path}:{lineno}: slug {page.slug!r} in source {page.source_id!r} already defined on line "
                    f"{lines[first]}"
                )
        pages.append(page)
        lines.append(lineno)

    aliases_path = root / ALIASES_FILE
    if not aliases_path.exists():
        return pages, None
    aliases: list[AliasRow] = []
    for lineno, obj in _lines(aliases_path):
        where = f"{aliases_path}:{lineno}"
        aliases.append(
            AliasRow(
                source_id=_field(obj, "source_id", str, where, default="default", nonempty=True),
                alias_norm=_field(obj, "alias_norm", str, where, nonempty=True),
                slug=_field(obj, "slug", str, where, nonempty=True),
            )
        )
    return pages, aliases


def load_brain_dir(path: str | Path) -> BrainIndex:
    """Load and index a brain directory (collector paused: nothing it builds is cyclic garbage)."""
    with collector_paused():
        pages, aliases = iter_brain_dir(path)
        return BrainIndex.build(pages, aliases)
