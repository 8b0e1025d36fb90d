"""An immutable in-memory index of the brain, so every resolver lookup is a hash lookup.

gbrain answers each turn with SQL over ``pages`` and ``page_aliases``; the index answers the same
questions from dictionaries built once: pages by lowercased title, by exact slug, by slug tail (the
``LIKE '%/tail'`` arm), person pages by surname (the part of the lowercased title after its last
space), and live alias targets per ``(alias_norm, source)``. Deleted pages are never returned
(``deleted_at IS NULL`` everywhere), but their alias rows are kept as the stale rows they are.

Lists of page ids are sorted by ``Page.id`` so arm-2 rows come back in insertion order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from pipeline.core.extract import has_whitespace, starts_uppercase
from pipeline.core.jscompat import utf16_len
from pipeline.core.normalize import normalize_alias, normalize_alias_list, slugify
from pipeline.core.pages import AliasRow, Page
from pipeline.core.synopsis import safe_synopsis

_EMPTY: Final[tuple[int, ...]] = ()
_QUERY_CACHE_MAX = 200_000


class DuplicatePage(ValueError):
    """Two pages share ``(source_id, slug)``, which gbrain's unique constraint forbids."""


def _freeze(index: dict[str, list[int]]) -> dict[str, tuple[int, ...]]:
    return {key: tuple(sorted(ids)) for key, ids in index.items()}


class BrainIndex:
    """Pages and aliases of every source, indexed for the resolver. Build with :meth:`build`."""

    __slots__ = (
        "_alias",
        "_by_id",
        "_by_key",
        "_query_cache",
        "_slug",
        "_surname",
        "_synopsis",
        "_tail",
        "_title",
        "_title_norm",
        "alias_row_count",
        "live_page_count",
        "page_count",
        "sources",
        "token",
    )

    def __init__(self) -> None:
        self._by_id: dict[int, Page] = {}
        self._by_key: dict[tuple[str, str], Page] = {}
        self._title: dict[str, tuple[int, ...]] = {}
        self._slug: dict[str, tuple[int, ...]] = {}
        self._tail: dict[str, tuple[int, ...]] = {}
        self._surname: dict[str, tuple[int, ...]] = {}
        self._alias: dict[str, dict[str, tuple[str, ...]]] = {}
        self._title_norm: dict[int, str] = {}
        self._synopsis: dict[int, str] = {}
        self._query_cache: dict[str, tuple[str, str, str | None, tuple[int, ...], tuple[int, ...]]] = {}
        self.page_count = 0
        self.live_page_count = 0
        self.alias_row_count = 0
        self.sources: frozenset[str] = frozenset()
        self.token = object()
        """Unique per index (a copy gets its own): lets per-session caches tell brains apart without
        holding a reference that would keep a swapped-out brain alive."""

    @classmethod
    def build(cls, pages: Iterable[Page], aliases: Iterable[AliasRow] | None = None) -> BrainIndex:
        """Index ``pages`` (any order; ``Page.id`` decides output order) and the alias table.

        With ``aliases=None`` the alias rows are derived from every page's ``frontmatter['aliases']``
        (deleted pages included, as gbrain's import does); otherwise ``aliases`` is the table as given.
        """
        self = cls()
        all_pages = list(pages)
        title: dict[str, list[int]] = {}
        slug: dict[str, list[int]] = {}
        tail: dict[str, list[int]] = {}
        surname: dict[str, list[int]] = {}
        seen_keys: dict[tuple[str, str], int] = {}
        sources: set[str] = set()
        for page in all_pages:
            key = (page.source_id, page.slug)
            if key in seen_keys:
                raise DuplicatePage(
                    f"pages {seen_keys[key]} and {page.id} share source_id {page.source_id!r} and slug {page.slug!r}"
                )
            seen_keys[key] = page.id
            sources.add(page.source_id)
            if page.deleted:
                continue
            if page.id in self._by_id:
                raise DuplicatePage(f"page id {page.id} is used twice")
            self._by_id[page.id] = page
            self._by_key[key] = page
            title_lc = page.title.lower()
            title.setdefault(title_lc, []).append(page.id)
            slug.setdefault(page.slug, []).append(page.id)
            cut = page.slug.rfind("/")
            if cut != -1:
                tail.setdefault(page.slug[cut + 1 :], []).append(page.id)
            if page.type == "person":
                space = title_lc.rfind(" ")
                if space != -1:
                    surname.setdefault(title_lc[space + 1 :], []).append(page.id)
        self._title = _freeze(title)
        self._slug = _freeze(slug)
        self._tail = _freeze(tail)
        self._surname = _freeze(surname)
        self.page_count = len(all_pages)
        self.live_page_count = len(self._by_id)

        if aliases is None:
            rows: Iterable[AliasRow] = (
                AliasRow(page.source_id, norm, page.slug)
                for page in all_pages
                for norm in normalize_alias_list(page.frontmatter.get("aliases"))
            )
        else:
            rows = aliases
        live: dict[str, dict[str, list[str]]] = {}
        count = 0
        for row in rows:
            count += 1
            sources.add(row.source_id)
            if (row.source_id, row.slug) not in self._by_key:
                continue  # stale: page deleted or missing; liveness is checked before uniqueness
            per_source = live.setdefault(row.alias_norm, {}).setdefault(row.source_id, [])
            if row.slug not in per_source:
                per_source.append(row.slug)
        self._alias = {norm: {src: tuple(sorted(s)) for src, s in by_src.items()} for norm, by_src in live.items()}
        self.alias_row_count = count
        self.sources = frozenset(sources)
        return self

    # ------------------------------------------------------------------ lookups (live pages only)

    def page(self, page_id: int) -> Page:
        return self._by_id[page_id]

    @property
    def pages_by_id(self) -> Mapping[int, Page]:
        """Live pages by id (read-only view for hot loops)."""
        return self._by_id

    def live_page(self, source_id: str, slug: str) -> Page | None:
        return self._by_key.get((source_id, slug))

    def ids_with_title(self, title_lc: str) -> tuple[int, ...]:
        """``lower(title) = title_lc``."""
        return self._title.get(title_lc, _EMPTY)

    def ids_with_slug(self, slug: str) -> tuple[int, ...]:
        """``slug = slug``."""
        return self._slug.get(slug, _EMPTY)

    def ids_with_slug_tail(self, tail: str) -> tuple[int, ...]:
        """``slug LIKE '%/' || tail`` for a tail without ``/``."""
        return self._tail.get(tail, _EMPTY)

    def person_ids_with_surname(self, token_lc: str) -> tuple[int, ...]:
        """``type = 'person' AND lower(title) LIKE '% ' || token`` for a token without spaces."""
        return self._surname.get(token_lc, _EMPTY)

    @property
    def alias_index(self) -> Mapping[str, Mapping[str, tuple[str, ...]]]:
        """norm -> source -> live slugs, as a read-only view for hot loops (see :meth:`alias_targets`)."""
        return self._alias

    def alias_targets(self, norm: str) -> Mapping[str, tuple[str, ...]] | None:
        """Live alias targets of ``norm``: source -> distinct slugs (stale rows already dropped)."""
        return self._alias.get(norm)

    # ------------------------------------------------------------------ per-page and per-query caches

    def title_norm(self, page: Page) -> str:
        cached = self._title_norm.get(page.id)
        if cached is None:
            cached = self._title_norm[page.id] = normalize_alias(page.title)
        return cached

    def synopsis(self, page: Page) -> str:
        cached = self._synopsis.get(page.id)
        if cached is None:
            cached = self._synopsis[page.id] = safe_synopsis(page.compiled_truth, page.frontmatter)
        return cached

    def query_info(self, query: str) -> tuple[str, str, str | None, tuple[int, ...], tuple[int, ...]]:
        """For a strong candidate's query: ``(query.lower(), slugify(query), surname token or None,
        ids by exact title / exact slug / slug tail, person ids by that surname)``. Cached."""
        info = self._query_cache.get(query)
        if info is None:
            if len(self._query_cache) >= _QUERY_CACHE_MAX:
                self._query_cache.clear()
            lowered = query.lower()
            slug = slugify(query)
            token = _surname_token(query, lowered)
            ids = set(self._title.get(lowered, _EMPTY))
            if slug:
                ids.update(self._slug.get(slug, _EMPTY))
                ids.update(self._tail.get(slug, _EMPTY))
            surname_ids = self._surname.get(token, _EMPTY) if token is not None else _EMPTY
            info = (lowered, slug, token, tuple(sorted(ids)), surname_ids)
            self._query_cache[query] = info
        return info


def _surname_token(query: str, lowered: str) -> str | None:
    """A strong single token of ≥3 UTF-16 units starting with an uppercase letter may be a surname."""
    if has_whitespace(query) or utf16_len(query) < 3 or not starts_uppercase(query):
        return None
    return lowered
