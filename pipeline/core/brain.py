"""An immutable in-memory index of the brain, so every resolver lookup is a hash lookup.

gbrain answers each turn with SQL over ``pages`` and ``page_aliases``; the index answers the same
questions from dictionaries built once: pages by lowercased title, by exact slug, by slug tail (the
``LIKE '%/tail'`` arm), person pages by surname (the part of the lowercased title after its last
space), and live alias targets per ``(alias_norm, source)``. Deleted pages are never returned
(``deleted_at IS NULL`` everywhere), but their alias rows are kept as the stale rows they are.

Lists of page ids are sorted by ``Page.id`` so arm-2 rows come back in insertion order.

The layout is chosen for a 100,000-page brain (docs/performance.md, "Brain index"): one entry per
page and map, no per-page tuple or list. A key that names one page holds its id (or the page)
itself; only keys shared by several pages hold a tuple. Live pages by slug is one flat map whose
value is the page, or a per-source map for the rare slug that several sources share. The alias
table is kept as live target pages per norm (:meth:`alias_pages`); the older nested view
(:attr:`alias_index`) is built from it on first use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias

from pipeline.core.extract import has_whitespace, starts_uppercase
from pipeline.core.jscompat import utf16_len
from pipeline.core.normalize import normalize_alias, normalize_alias_list, slugify
from pipeline.core.pages import AliasRow, Page
from pipeline.core.synopsis import safe_synopsis

_EMPTY: Final[tuple[int, ...]] = ()
_QUERY_CACHE_MAX: Final = 200_000

Ids: TypeAlias = int | tuple[int, ...]
"""One page id, or the ascending ids of every page sharing a key."""
AliasPages: TypeAlias = Page | tuple[Page, ...]
"""The one live page an alias norm names, or every one, ordered by ``(source_id, slug)``."""
_BySlug: TypeAlias = Page | dict[str, Page]


class DuplicatePage(ValueError):
    """Two pages share ``(source_id, slug)``, which gbrain's unique constraint forbids."""


def _as_ids(value: Ids | None) -> tuple[int, ...]:
    if value is None:
        return _EMPTY
    if isinstance(value, int):
        return (value,)
    return value


def _add(index: dict[str, Ids], key: str, page_id: Any, shared: dict[str, list[int]]) -> None:
    """Record ``page_id`` under ``key``; a key's second id moves it to ``shared`` (sorted at the end).

    ``page_id`` is typed ``Any`` on purpose: the compiled core then passes the one boxed int object
    along instead of boxing a new one per map (100,000 pages: ~8 MiB of duplicate ints)."""
    known = index.setdefault(key, page_id)
    if known == page_id:  # just inserted: no other live page has this id (equality, not identity,
        return  # because the compiled core may box the same int twice)
    if isinstance(known, int):
        shared[key] = [known, page_id]
        index[key] = _EMPTY  # placeholder, replaced by _settle
    else:
        shared[key].append(page_id)


def _settle(index: dict[str, Ids], shared: dict[str, list[int]]) -> None:
    for key, ids in shared.items():
        index[key] = tuple(sorted(ids))


class BrainIndex:
    """Pages and aliases of every source, indexed for the resolver. Build with :meth:`build`."""

    __slots__ = (
        "_alias",
        "_alias_view",
        "_by_id",
        "_by_slug",
        "_query_cache",
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
        self._by_slug: dict[str, _BySlug] = {}
        self._title: dict[str, Ids] = {}
        self._tail: dict[str, Ids] = {}
        self._surname: dict[str, Ids] = {}
        self._alias: dict[str, AliasPages] = {}
        self._alias_view: dict[str, dict[str, tuple[str, ...]]] | None = None
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
        by_id = self._by_id
        by_slug = self._by_slug
        title = self._title
        tail = self._tail
        surname = self._surname
        shared_title: dict[str, list[int]] = {}
        shared_tail: dict[str, list[int]] = {}
        shared_surname: dict[str, list[int]] = {}
        deleted: dict[str, dict[str, int]] = {}  # slug -> source -> id: deleted pages still own their key
        sources: set[str] = set()
        derive = aliases is None
        targets: dict[str, list[Page]] = {}  # alias norms with a second live target
        page_count = 0
        count = 0
        for page in pages:
            page_count += 1
            source = page.source_id
            slug = page.slug
            # setdefault: one probe of each big map per page, where get-then-set took two
            held = by_slug.get(slug) if page.deleted else by_slug.setdefault(slug, page)
            owner: Page | None = None
            if held is not None and held is not page:
                if isinstance(held, Page):
                    if held.source_id == source:
                        owner = held
                else:
                    owner = held.get(source)
            first = owner.id if owner is not None else _deleted_owner(deleted, source, slug)
            if first is not None:
                raise DuplicatePage(f"pages {first} and {page.id} share source_id {source!r} and slug {slug!r}")
            sources.add(source)
            if derive:
                listed = page.frontmatter.get("aliases")
                norms = _alias_norms(listed) if listed is not None else None
            else:
                norms = None
            if page.deleted:
                deleted.setdefault(slug, {})[source] = page.id
                if norms is not None:
                    count += len(norms)  # rows of a deleted page: counted, never live
                continue
            page_id: Any = page.id  # boxed once, shared by every map (see _add)
            if by_id.setdefault(page_id, page) is not page:
                raise DuplicatePage(f"page id {page_id} is used twice")
            if held is not page:  # the slug is in another source too
                if isinstance(held, Page):
                    by_slug[slug] = {held.source_id: held, source: page}
                elif held is not None:
                    held[source] = page
            title_lc = page.title.lower()
            _add(title, title_lc, page_id, shared_title)
            cut = slug.rfind("/")
            if cut != -1:
                _add(tail, slug[cut + 1 :], page_id, shared_tail)
            if page.type == "person":
                space = title_lc.rfind(" ")
                if space != -1:
                    _add(surname, title_lc[space + 1 :], page_id, shared_surname)
            if norms is not None:
                count += len(norms)
                for norm in norms:
                    self._add_alias(norm, page, targets)
        _settle(title, shared_title)
        _settle(tail, shared_tail)
        _settle(surname, shared_surname)
        self.page_count = page_count
        self.live_page_count = len(by_id)

        if aliases is not None:
            for row in aliases:
                count += 1
                sources.add(row.source_id)
                live = self.live_page(row.source_id, row.slug)
                if live is not None:  # stale rows (page deleted or missing) are dropped
                    self._add_alias(row.alias_norm, live, targets)
        for norm, several in targets.items():
            several.sort(key=_source_and_slug)
            self._alias[norm] = tuple(several)
        self.alias_row_count = count
        self.sources = frozenset(sources)
        return self

    def _add_alias(self, norm: str, page: Page, several: dict[str, list[Page]]) -> None:
        known = self._alias.get(norm)
        if known is None:
            self._alias[norm] = page
        elif isinstance(known, Page):
            if known is not page:
                several[norm] = [known, page]
                self._alias[norm] = ()  # placeholder, replaced at the end of build
        else:
            listed = several[norm]
            for other in listed:
                if other is page:
                    return
            listed.append(page)

    # ------------------------------------------------------------------ lookups (live pages only)

    def page(self, page_id: int) -> Page:
        return self._by_id[page_id]

    @property
    def pages_by_id(self) -> Mapping[int, Page]:
        """Live pages by id (read-only view for hot loops)."""
        return self._by_id

    def live_page(self, source_id: str, slug: str) -> Page | None:
        held = self._by_slug.get(slug)
        if held is None:
            return None
        if isinstance(held, Page):
            return held if held.source_id == source_id else None
        return held.get(source_id)

    def ids_with_title(self, title_lc: str) -> tuple[int, ...]:
        """``lower(title) = title_lc``."""
        return _as_ids(self._title.get(title_lc))

    def ids_with_slug(self, slug: str) -> tuple[int, ...]:
        """``slug = slug``."""
        held = self._by_slug.get(slug)
        if held is None:
            return _EMPTY
        if isinstance(held, Page):
            return (held.id,)
        return tuple(sorted(p.id for p in held.values()))

    def ids_with_slug_tail(self, tail: str) -> tuple[int, ...]:
        """``slug LIKE '%/' || tail`` for a tail without ``/``."""
        return _as_ids(self._tail.get(tail))

    def person_ids_with_surname(self, token_lc: str) -> tuple[int, ...]:
        """``type = 'person' AND lower(title) LIKE '% ' || token`` for a token without spaces."""
        return _as_ids(self._surname.get(token_lc))

    def alias_pages(self, norm: str) -> AliasPages | None:
        """The live pages the alias rows of ``norm`` name, every source: one :class:`Page`, or a
        tuple of several ordered by ``(source_id, slug)``; ``None`` when there is none. The compact
        form of :meth:`alias_targets` (same rows, stale ones already dropped)."""
        return self._alias.get(norm)

    @property
    def alias_pages_index(self) -> Mapping[str, AliasPages]:
        """norm -> :meth:`alias_pages`, as a read-only view for hot loops."""
        return self._alias

    @property
    def alias_index(self) -> Mapping[str, Mapping[str, tuple[str, ...]]]:
        """norm -> source -> live slugs, as a read-only view for hot loops (see :meth:`alias_targets`).

        Built from :meth:`alias_pages` on first use (one small map per norm)."""
        view = self._alias_view
        if view is None:
            view = self._alias_view = {norm: _by_source(found) for norm, found in self._alias.items()}
        return view

    def alias_targets(self, norm: str) -> Mapping[str, tuple[str, ...]] | None:
        """Live alias targets of ``norm``: source -> distinct slugs (stale rows already dropped)."""
        return self.alias_index.get(norm)

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

    def query_hits(self, query: str) -> bool:
        """``bool(info[3] or info[4])`` of :meth:`query_info` (a page by title, slug or slug tail, or
        a person by surname), without building its ids or caching it. The relevance test asks this of
        every new candidate, weak words included, whose :meth:`query_info` the resolver never reads:
        building and storing it was most of that test. ``tests/unit/core/test_properties.py``
        compares the two."""
        info = self._query_cache.get(query)
        if info is not None:
            return bool(info[3] or info[4])
        lowered = query.lower()
        if _has_ids(self._title.get(lowered)):
            return True
        if query.isascii() and query.isalnum():  # one word of letters and digits (most weak words):
            # its slug is its lowercase, and it is a surname token when it is capitalised and 3 long
            if self._has_slug(lowered) or _has_ids(self._tail.get(lowered)):
                return True
            return len(query) >= 3 and "A" <= query[0] <= "Z" and _has_ids(self._surname.get(lowered))
        slug = slugify(query)
        if slug and (self._has_slug(slug) or _has_ids(self._tail.get(slug))):
            return True
        token = _surname_token(query, lowered)
        return token is not None and _has_ids(self._surname.get(token))

    def _has_slug(self, slug: str) -> bool:
        """``bool(self.ids_with_slug(slug))``."""
        held = self._by_slug.get(slug)
        return held is not None and (isinstance(held, Page) or len(held) > 0)

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
            by_title = self._title.get(lowered)
            by_slug: tuple[int, ...] = _EMPTY
            by_tail: Ids | None = None
            if slug:
                by_slug = self.ids_with_slug(slug)
                by_tail = self._tail.get(slug)
            if by_slug or by_tail is not None:
                ids = set(_as_ids(by_title))
                ids.update(by_slug)
                ids.update(_as_ids(by_tail))
                found = tuple(sorted(ids))
            else:
                found = _as_ids(by_title)
            surname_ids = _as_ids(self._surname.get(token)) if token is not None else _EMPTY
            info = (lowered, slug, token, found, surname_ids)
            self._query_cache[query] = info
        return info


def _has_ids(value: Ids | None) -> bool:
    """``bool(_as_ids(value))``, without building the tuple."""
    return value is not None and (isinstance(value, int) or len(value) > 0)


def _deleted_owner(deleted: dict[str, dict[str, int]], source: str, slug: str) -> int | None:
    """The id of an earlier deleted page with this ``(source, slug)``, if any."""
    by_source = deleted.get(slug)
    return by_source.get(source) if by_source is not None else None


def _alias_norms(listed: object) -> list[str]:
    """:func:`normalize_alias_list`, with a shortcut for the common alias: ASCII letters and digits
    in words one space apart, whose norm is just its lowercase (NFKC, whitespace and wrapper rules
    change nothing there)."""
    if not isinstance(listed, list):
        return normalize_alias_list(listed)
    if len(listed) == 1:
        norm = _alias_norm(listed[0])
        return [norm] if norm else []
    out: dict[str, None] = {}
    for item in listed:
        norm = _alias_norm(item)
        if norm:
            out.setdefault(norm, None)
    return list(out)


def _alias_norm(item: object) -> str:
    if isinstance(item, str) and item.isascii() and item.replace(" ", "").isalnum() and item[0] != " " \
            and item[-1] != " " and "  " not in item:
        return item.lower()
    return normalize_alias(item)


def _source_and_slug(page: Page) -> tuple[str, str]:
    return (page.source_id, page.slug)


def _by_source(found: AliasPages) -> dict[str, tuple[str, ...]]:
    if isinstance(found, Page):
        return {found.source_id: (found.slug,)}
    grouped: dict[str, list[str]] = {}
    for page in found:  # ordered by (source, slug): each source's slugs come out sorted
        grouped.setdefault(page.source_id, []).append(page.slug)
    return {source: tuple(slugs) for source, slugs in grouped.items()}


def _surname_token(query: str, lowered: str) -> str | None:
    """A strong single token of ≥3 UTF-16 units starting with an uppercase letter may be a surname.

    For an ASCII query (most) the same tests without the two regexes: its UTF-16 length is its
    length, ``\\p{Lu}`` is ``A-Z``, and its only JS whitespace besides the space are control
    characters, which ``str.isprintable`` rules out first."""
    if query.isascii():
        if len(query) < 3 or not "A" <= query[0] <= "Z" or " " in query or (
                not query.isprintable() and has_whitespace(query)):
            return None
        return lowered
    # The capital first: most non-ASCII queries (CJK grams, lowercase words) fail it. ``\\p{Lu}`` of
    # the first character only: an ASCII one is A-Z, one of the extractor's CJK ranges never is
    # (tests/unit/core/test_properties.py checks both on every code point), so the regex is asked
    # only of another first character (a CJK gram was most of its calls).
    first = query[:1]
    if first < "\x80":
        upper = "A" <= first <= "Z"
    elif "\u4e00" <= first <= "\u9fff" or "\u3040" <= first <= "\u30ff" or "\uac00" <= first <= "\ud7af":
        upper = False
    else:
        upper = starts_uppercase(query)
    if not upper or has_whitespace(query) or utf16_len(query) < 3:
        return None
    return lowered
