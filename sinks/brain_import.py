"""Write brain pages and aliases into PostgreSQL the way gbrain's import does (reference-behaviour.md §1.2, §1.3).

Pages are upserted on ``(source_id, slug)``, in the given order, so new pages get ``pages.id`` in
that order (the order arm-2 results follow). A page whose content is unchanged is not touched at
all, so re-importing the same brain changes nothing and does not make workers reload. Deleted
pages get ``deleted_at`` (kept if already set); pages present again are undeleted. Each imported
page's alias set is replaced: by ``normalize_alias_list(frontmatter.aliases)``, or, when an alias
table is given (``aliases.jsonl``), by exactly its rows for that page. The whole import is one
transaction: workers see the old brain or the new one, never half of it. A page that
:func:`pipeline.pagecheck.page_problem` refuses (a slug that could forge the context block, an
oversize title or body) is left out and named in :attr:`ImportReport.refused`; the rest import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import orjson
import psycopg
from psycopg.types.json import Jsonb, set_json_dumps

from pipeline.core.normalize import normalize_alias_list
from pipeline.core.pages import AliasRow, Page
from pipeline.pagecheck import page_problem, refusal
from sinks.db import ConnOrInfo, borrowed

BATCH_SIZE = 1000

UPSERT_SQL = """
INSERT INTO pages AS p (source_id, slug, type, title, compiled_truth, frontmatter, deleted_at)
SELECT u.source_id, u.slug, u.type, u.title, u.compiled_truth, u.frontmatter,
       CASE WHEN u.deleted THEN now() END
  FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::jsonb[], %s::bool[])
       WITH ORDINALITY AS u(source_id, slug, type, title, compiled_truth, frontmatter, deleted, ord)
 ORDER BY u.ord
ON CONFLICT (source_id, slug) DO UPDATE SET
  type = EXCLUDED.type,
  title = EXCLUDED.title,
  compiled_truth = EXCLUDED.compiled_truth,
  frontmatter = EXCLUDED.frontmatter,
  deleted_at = CASE WHEN EXCLUDED.deleted_at IS NULL THEN NULL ELSE coalesce(p.deleted_at, EXCLUDED.deleted_at) END,
  updated_at = now()
WHERE (p.type, p.title, p.compiled_truth, p.frontmatter, p.deleted_at IS NULL)
      IS DISTINCT FROM
      (EXCLUDED.type, EXCLUDED.title, EXCLUDED.compiled_truth, EXCLUDED.frontmatter, EXCLUDED.deleted_at IS NULL)
RETURNING (xmax = 0) AS inserted
"""

ALIAS_DELETE_SQL = """
WITH keys AS (SELECT * FROM unnest(%s::text[], %s::text[]) AS k(source_id, slug)),
     want AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]) AS w(source_id, alias_norm, slug))
DELETE FROM page_aliases a USING keys k
 WHERE a.source_id = k.source_id AND a.slug = k.slug
   AND NOT EXISTS (SELECT 1 FROM want w
                    WHERE w.source_id = a.source_id AND w.slug = a.slug AND w.alias_norm = a.alias_norm)
"""
ALIAS_INSERT_SQL = """
INSERT INTO page_aliases (source_id, alias_norm, slug)
SELECT * FROM unnest(%s::text[], %s::text[], %s::text[])
ON CONFLICT DO NOTHING
"""

Progress = Callable[[int, int], None]
"""Called with (pages written so far, total pages) after each batch."""


class BrainImportError(ValueError):
    """The pages cannot be imported as given; the message names the page."""


@dataclass
class ImportReport:
    pages_total: int = 0
    pages_inserted: int = 0
    pages_updated: int = 0
    pages_unchanged: int = 0
    pages_deleted: int = 0
    """Pages that are soft-deleted after the import (among those imported)."""
    alias_rows_inserted: int = 0
    alias_rows_removed: int = 0
    sources: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """One line per page left out (:func:`pipeline.pagecheck.refusal`)."""

    def summary(self) -> str:
        return (
            f"{self.pages_total} page(s) into source(s) {', '.join(self.sources) or '-'}: "
            f"{self.pages_inserted} new, {self.pages_updated} updated, {self.pages_unchanged} unchanged, "
            f"{self.pages_deleted} marked deleted; alias rows: {self.alias_rows_inserted} added, "
            f"{self.alias_rows_removed} removed"
        )


def rehome(pages: Sequence[Page], aliases: Sequence[AliasRow] | None, source_id: str) -> tuple[list[Page], list[AliasRow] | None]:
    """Move every page and alias row into ``source_id``; refuse if two pages would collide."""
    seen: dict[str, str] = {}
    moved: list[Page] = []
    for page in pages:
        if page.slug in seen and seen[page.slug] != page.source_id:
            raise BrainImportError(
                f"slug {page.slug!r} exists in sources {seen[page.slug]!r} and {page.source_id!r}; importing both "
                f"into {source_id!r} would merge two pages (drop --source to keep the directory's sources)"
            )
        seen[page.slug] = page.source_id
        moved.append(replace(page, source_id=source_id))
    rows = None if aliases is None else list(dict.fromkeys(AliasRow(source_id, a.alias_norm, a.slug) for a in aliases))
    return moved, rows


def _check_page(page: Page) -> None:
    for name in ("source_id", "slug", "title", "type", "compiled_truth"):
        if "\x00" in getattr(page, name):
            raise BrainImportError(f"page {page.slug!r}: field {name} contains NUL, which PostgreSQL cannot store")
    if not page.slug or not page.source_id:
        raise BrainImportError(f"page {page.id}: slug and source_id must not be empty")
    if b"\\u0000" in orjson.dumps(page.frontmatter):
        raise BrainImportError(f"page {page.slug!r}: frontmatter contains NUL, which PostgreSQL JSONB cannot store")


def _ensure_sources(conn: psycopg.Connection, source_ids: Sequence[str]) -> None:
    """gbrain's pages.source_id references sources(id): register new sources there when it exists."""
    exists = conn.execute("SELECT to_regclass('sources') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return
    for source in source_ids:
        try:
            with conn.transaction():
                conn.execute("INSERT INTO sources (id, name) VALUES (%s, %s) ON CONFLICT DO NOTHING", (source, source))
        except psycopg.Error:
            pass  # a sources table of another shape: the page insert will say what is wrong


def import_brain(
    target: ConnOrInfo,
    pages: Sequence[Page],
    aliases: Sequence[AliasRow] | None = None,
    *,
    source_id: str | None = None,
    batch_size: int = BATCH_SIZE,
    progress: Progress | None = None,
) -> ImportReport:
    """Upsert ``pages`` and replace their alias sets, in one transaction; see the module docstring.

    ``aliases`` None derives each page's aliases from its frontmatter; a list is the alias table
    for the imported pages (rows for slugs without a page are kept as gbrain's orphan rows).
    ``source_id`` moves everything into that source.
    """
    if source_id is not None:
        pages, aliases = rehome(pages, aliases, source_id)
    refused = [refusal(page.slug, problem) for page in pages if (problem := page_problem(page)) is not None]
    if refused:
        pages = [page for page in pages if page_problem(page) is None]
    keys: dict[tuple[str, str], Page] = {}
    for page in pages:
        _check_page(page)
        if (page.source_id, page.slug) in keys:
            raise BrainImportError(f"page {page.slug!r} appears twice in source {page.source_id!r}")
        keys[(page.source_id, page.slug)] = page

    if aliases is None:
        wanted = [AliasRow(p.source_id, norm, p.slug) for p in pages for norm in normalize_alias_list(p.frontmatter.get("aliases"))]
    else:
        wanted = list(dict.fromkeys(aliases))
    for row in wanted:
        if "\x00" in row.alias_norm + row.slug + row.source_id:
            raise BrainImportError(f"alias row {row.alias_norm!r} -> {row.slug!r} contains NUL")
    alias_keys = list(dict.fromkeys([*keys, *((a.source_id, a.slug) for a in wanted)]))

    sources = sorted({p.source_id for p in pages} | {a.source_id for a in wanted})
    report = ImportReport(pages_total=len(pages), sources=sources, refused=refused)
    with borrowed(target) as conn, conn.transaction():
        _ensure_sources(conn, sources)
        with conn.cursor() as cur:
            set_json_dumps(orjson.dumps, cur)
            done = 0
            for start in range(0, len(pages), batch_size):
                batch = pages[start : start + batch_size]
                cur.execute(
                    UPSERT_SQL,
                    (
                        [p.source_id for p in batch], [p.slug for p in batch], [p.type for p in batch],
                        [p.title for p in batch], [p.compiled_truth for p in batch],
                        [Jsonb(p.frontmatter) for p in batch], [p.deleted for p in batch],
                    ),
                )
                written = cur.fetchall()
                report.pages_inserted += sum(1 for (ins,) in written if ins)
                report.pages_updated += sum(1 for (ins,) in written if not ins)
                report.pages_unchanged += len(batch) - len(written)
                done += len(batch)
                if progress is not None:
                    progress(done, len(pages))
            report.pages_deleted = sum(1 for p in pages if p.deleted)

            for start in range(0, max(len(alias_keys), 1), batch_size * 10):
                chunk = alias_keys[start : start + batch_size * 10]
                if not chunk:
                    break
                chunk_set = set(chunk)
                want = [a for a in wanted if (a.source_id, a.slug) in chunk_set]
                cur.execute(
                    ALIAS_DELETE_SQL,
                    (
                        [k[0] for k in chunk], [k[1] for k in chunk],
                        [a.source_id for a in want], [a.alias_norm for a in want], [a.slug for a in want],
                    ),
                )
                report.alias_rows_removed += max(cur.rowcount, 0)
                cur.execute(
                    ALIAS_INSERT_SQL,
                    ([a.source_id for a in want], [a.alias_norm for a in want], [a.slug for a in want]),
                )
                report.alias_rows_inserted += max(cur.rowcount, 0)
    return report

