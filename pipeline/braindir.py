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
from pathlib import Path
from typing import Any

import orjson

from pipeline.core.brain import BrainIndex
from pipeline.core.pages import AliasRow, Page
from pipeline.pagecheck import page_problem, refusal

log = logging.getLogger(__name__)

PAGES_FILE = "pages.jsonl"
ALIASES_FILE = "aliases.jsonl"


class BrainDirError(ValueError):
    """A brain directory that cannot be loaded; the message names the file and line."""


def _lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BrainDirError(f"{path}: cannot read ({exc.strerror or exc})") from None
    out: list[tuple[int, dict[str, Any]]] = []
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                raise BrainDirError(f"{path}:{lineno}: not valid UTF-8") from None
            raise BrainDirError(f"{path}:{lineno}: not valid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise BrainDirError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        out.append((lineno, obj))
    return out


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
    first_line_of_id: dict[int, int] = {}
    first_line_of_key: dict[tuple[str, str], int] = {}
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
        if page.id in first_line_of_id:
            raise BrainDirError(f"{pages_path}:{lineno}: page id {page.id} already used on line {first_line_of_id[page.id]}")
        key = (page.source_id, page.slug)
        if key in first_line_of_key:
            raise BrainDirError(
                f"{pages_path}:{lineno}: slug {page.slug!r} in source {page.source_id!r} already defined on line "
                f"{first_line_of_key[key]}"
            )
        first_line_of_id[page.id] = lineno
        first_line_of_key[key] = lineno
        pages.append(page)

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
    """Load and index a brain directory."""
    pages, aliases = iter_brain_dir(path)
    return BrainIndex.build(pages, aliases)
