"""Candidates -> pages, arm by arm, in the reference's push order (reference-behaviour.md §5, gbrain ``resolveEntitiesToPointers``).

Order of pushes, first claim of a ``(source_id, slug)`` wins:

1. alias (0.9): strong norms per source, in scope order then salience order, unique live hit only;
   then weak norms, unique live hit across the whole scope;
2. arm 2, rows in page-id order: exact title (0.8), else exact slug / slug tail (0.6);
3. surname (0.72): a single capitalised token naming exactly one person page in scope, and that
   page not claimed by title or slug;
4. CJK (0.72): pure-CJK weak n-grams still unresolved, exactly one page by exact title or slug.

Pointers are then built in push order with slug-substring suppression against ``prior_context``
and capped (10 for the volunteer path, so the gate sees the whole pool).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from pipeline.core.brain import BrainIndex
from pipeline.core.extract import CJK_CHARS, Candidate
from pipeline.core.gate import candidates_by_norm
from pipeline.core.memo import Memo
from pipeline.core.normalize import is_plain
from pipeline.core.pages import Page
from pipeline.core.types import ARM_CONFIDENCE, Pointer, new_pointer
from pipeline.core.window import WindowCandidate, as_list

RESOLVER_POOL: Final = 10
"""The volunteer path resolves up to 2 x the hard page cap of 5, before the gate."""

_PURE_CJK_RE: Final = re.compile(f"[{CJK_CHARS}]+")
_CJK_FIRST: Final = "\u3040"  # cheap pre-check: every CJK range lies between these two
_CJK_LAST: Final = "\ud7af"

_Push = tuple[Page, str, str]  # (page, arm, matched_norm)


def could_resolve(turns: Sequence[tuple[str, Sequence[Candidate]]], brain: BrainIndex) -> bool:
    """Whether any candidate of the window's turns has something in the brain to resolve to.

    A cheap superset of what :func:`resolve_with_index` can push: every merged candidate carries the
    ``(query, norm)`` of one of these, and every arm needs an alias target of its norm, a page by
    its query (title, slug, slug tail, surname) or, for CJK, a page by its norm. When nothing
    qualifies the merge and the resolver can be skipped: that is a third of all turns.
    """
    alias = brain.alias_index
    for _, cands in as_list(turns):
        for _display, query, norm, _weak in as_list(cands):
            if norm in alias:
                return True
            info = brain.query_info(query)
            if info[3] or info[4]:
                return True
            if not norm.isascii() and _CJK_FIRST <= norm[:1] <= _CJK_LAST and (
                    brain.ids_with_title(norm) or brain.ids_with_slug(norm)):
                return True
    return False


_odd_titles: Final[dict[object, frozenset[str]]] = {}
"""brain token -> norms of live titles whose lowercase is not already their norm (:func:`_odd_title_norms`)."""


def _odd_title_norms(brain: BrainIndex) -> frozenset[str]:
    """Title norms that are not a lowercased title, computed once per brain (two brains kept: the
    live one and the one it replaces)."""
    odd = _odd_titles.get(brain.token)
    if odd is None:
        found: set[str] = set()
        for page in brain.pages_by_id.values():
            title = page.title
            if not is_plain(title):
                norm = brain.title_norm(page)
                if norm != title.lower():
                    found.add(norm)
        if len(_odd_titles) >= 2:
            _odd_titles.clear()
        odd = _odd_titles[brain.token] = frozenset(found)
    return odd


def turn_relevance(cands: Sequence[Candidate], brain: BrainIndex) -> tuple[bool, frozenset[str]]:
    """One turn's candidates against ``brain``: whether the turn is live (:func:`could_resolve`),
    and the norms that can make any difference to a decision over a window holding this turn.

    A norm matters when it has something to resolve to (the :func:`could_resolve` tests) or names a
    page title (then it may label that page's pointer). Every other candidate only takes a place in
    the salience order, which matters only when the window has more candidates than the merge keeps;
    :func:`pipeline.core.window.merge_window` with ``keep`` checks that and merges everything then.
    """
    memo = _relevance_memo.get(id(cands))
    if memo is not None and memo[0] is cands and memo[1] is brain.token:
        return memo[2], memo[3]
    codes = _candidate_codes(brain)
    live = False
    keep: list[str] = []
    for _display, query, norm, _weak in as_list(cands):
        known = codes.get(query)
        if known is not None and known[0] == norm:
            code = known[1]
        else:
            code = _candidate_code(query, norm, brain)
            if len(codes) >= _CODES_MAX:
                codes.clear()
            codes[query] = (norm, code)
        if code == _HIT:
            live = True
            keep.append(norm)
        elif code == _LABEL:
            keep.append(norm)
    relevant = frozenset(keep) if keep else _NO_NORMS
    if not _relevance_memo.rest_one():  # resting, the entry would be dropped: not even built
        _relevance_memo.put(id(cands), (cands, brain.token, live, relevant))
    return live, relevant


_NO_NORMS: Final[frozenset[str]] = frozenset()
"""The relevant norms of a turn with none (most turns): one shared empty set, not a new one each."""
_NONE: Final = 0
_LABEL: Final = 1
_HIT: Final = 2
_CODES_MAX: Final = 200_000
_codes: Final[dict[object, dict[str, tuple[str, int]]]] = {}
"""brain token -> query -> ``(norm, code)`` of :func:`_candidate_code` (two brains kept, like
:data:`_odd_titles`): the same words come back turn after turn, and the code depends on the brain,
the query and the norm only (the norm is stored and compared, so a candidate whose norm is not the
query's own never takes another's code)."""


def _candidate_codes(brain: BrainIndex) -> dict[str, tuple[str, int]]:
    return _of_brain(_codes, brain)


def _of_brain(store: dict[object, dict[Any, Any]], brain: BrainIndex) -> dict[Any, Any]:
    """``brain``'s map in ``store`` (brain token -> map; two brains kept: the live one and the one it
    replaces), made empty on first use."""
    found = store.get(brain.token)
    if found is None:
        if len(store) >= 2:
            store.clear()
        found = store[brain.token] = {}
    return found


def _candidate_code(query: str, norm: str, brain: BrainIndex) -> int:
    """One candidate in :func:`turn_relevance`: ``_HIT`` (something to resolve to), ``_LABEL`` (names a
    page title: may label a pointer) or ``_NONE``."""
    if norm in brain.alias_index:
        return _HIT
    if brain.query_hits(query) or (not norm.isascii() and _CJK_FIRST <= norm[:1] <= _CJK_LAST
                              and (brain.ids_with_title(norm) or brain.ids_with_slug(norm))):
        return _HIT
    if norm in _odd_title_norms(brain) or brain.ids_with_title(norm):
        return _LABEL
    return _NONE


_relevance_memo: Final[Memo[int, tuple[Sequence[Candidate], object, bool, frozenset[str]]]] = Memo(8192)
""":func:`turn_relevance` per candidate list (by identity: the entry keeps the list alive and a hit
compares it), for the lists the text memo of :func:`~pipeline.core.extract.extract_candidates`
hands to every turn of the same text."""


def resolve(
    candidates: Sequence[WindowCandidate],
    brain: BrainIndex,
    source_ids: Sequence[str],
    *,
    prior_context: str | None = None,
    lexical_arms: bool = True,
    max_pointers: int = RESOLVER_POOL,
) -> list[Pointer]:
    """Resolve window candidates (salience order, norms unique) to pointers, in resolver order."""
    return resolve_with_index(
        candidates, brain, source_ids, prior_context=prior_context, lexical_arms=lexical_arms, max_pointers=max_pointers
    )[0]


def resolve_with_index(
    candidates: Sequence[WindowCandidate],
    brain: BrainIndex,
    source_ids: Sequence[str],
    *,
    prior_context: str | None = None,
    lexical_arms: bool = True,
    max_pointers: int = RESOLVER_POOL,
    synopses: bool = True,
) -> tuple[list[Pointer], dict[str, WindowCandidate]]:
    """:func:`resolve`, also returning the norm -> candidate map it built (empty when nothing
    resolved), so the gate can reuse it instead of building it again.

    ``synopses=False``: every pointer's ``synopsis`` is left empty, for a caller that hands them to
    :func:`~pipeline.core.gate.gate` with the brain, which then makes the synopses of the pages it
    lets through only. Most pointers never need one (the slug arm's 0.6 is under the default
    threshold, the cap keeps 3 of up to 10), and a first synopsis of a page strips its fences."""
    if not candidates or not source_ids:
        return [], {}
    # A tuple and a list typed as such: in the compiled core a loop over a ``Sequence`` allocates an
    # iterator object (tracked by the garbage collector) and calls through it per item, and these
    # loops run several times per resolved window (the scope once per weak alias hit).
    scope: tuple[str, ...] = source_ids if isinstance(source_ids, tuple) else tuple(source_ids)
    cands: list[WindowCandidate] = candidates if isinstance(candidates, list) else list(candidates)

    weak_norms = [c.norm for c in cands if c.weak] if lexical_arms else []
    strong_norms: list[str] = []
    titles_lc: dict[str, str] = {}  # title_lc -> first norm (titleToNorm); the keys are the title set
    slug_to_norm: dict[str, str] = {}
    surname_to_norm: dict[str, str] = {}  # armed surname token -> first norm, in candidate order
    row_ids: set[int] = set()  # arm 2: every page matched by title, slug, slug tail or surname
    for c in cands:
        if c.weak:
            continue
        norm = c.norm
        strong_norms.append(norm)
        title_lc, slug, token, ids, surname_ids = brain.query_info(c.query)
        titles_lc.setdefault(title_lc, norm)
        if slug:
            slug_to_norm.setdefault(slug, norm)
        if ids:
            row_ids.update(ids)
        if lexical_arms and token is not None:
            surname_to_norm.setdefault(token, norm)
            if surname_ids:
                row_ids.update(surname_ids)
    if not strong_norms and not weak_norms:
        return [], {}

    pushes: list[_Push] = []
    claimed: set[object] = set()
    single = len(scope) == 1

    # Arm 1: alias. Strong norms are unique per source; weak norms must be unique over the scope.
    alias_targets = brain.alias_index.get
    strong_hits = [(norm, targets) for norm in strong_norms if (targets := alias_targets(norm)) is not None]
    for src in scope:
        for norm, targets in strong_hits:
            slugs = targets.get(src)
            if slugs is not None and len(slugs) == 1:
                page = brain.live_page(src, slugs[0])
                if page is not None:
                    _push(claimed, single, pushes, page, "alias", norm)
    for norm in weak_norms:
        targets = alias_targets(norm)
        if targets is None:
            continue
        total, hit = 0, None
        for src in scope:
            slugs = targets.get(src)
            if slugs:
                total += len(slugs)
                if total > 1:
                    break
                hit = (src, slugs[0])
        if total == 1 and hit is not None:
            page = brain.live_page(*hit)
            if page is not None:
                _push(claimed, single, pushes, page, "alias", norm)

    # Arm 2: exact title, else exact slug / slug tail, else surname; rows in page-id order.
    if row_ids:
        in_scope = frozenset(scope)
        by_id = brain.pages_by_id
        facts = _of_brain(_row_facts, brain)
        surname_hits: dict[str, list[Page]] = {}
        surname_coverage: dict[str, int] = {}
        row_order: list[Any] = sorted(row_ids)  # Any: the set's own int objects are the keys below, none boxed again
        for page_id in row_order:
            page = by_id[page_id]
            if page.source_id not in in_scope:
                continue
            known = facts.get(page_id)
            if known is None:
                known = _facts_of(facts, page_id, page)
            title_lc, surname, tail = known
            token = surname if surname is not None and surname in surname_to_norm else None
            if token is not None:
                surname_coverage[token] = surname_coverage.get(token, 0) + 1
            title_norm = titles_lc.get(title_lc)
            if title_norm is not None:
                _push(claimed, single, pushes, page, "title", title_norm)
                continue
            slug_norm = slug_to_norm.get(page.slug)
            if slug_norm is None:
                slug_norm = slug_to_norm.get(tail)
            if slug_norm is not None:
                _push(claimed, single, pushes, page, "slug-suffix", slug_norm)
                continue
            if token is not None:
                surname_hits.setdefault(token, []).append(page)
        for token, hits in surname_hits.items():
            if len(hits) == 1 and surname_coverage.get(token) == 1:
                _push(claimed, single, pushes, hits[0], "title-surname", surname_to_norm[token])

    # Arm 2.5: pure-CJK weak n-grams no earlier arm resolved; exactly one page by title or slug.
    if weak_norms:
        cjk_norms = [n for n in weak_norms if _CJK_FIRST <= n[0] <= _CJK_LAST and _PURE_CJK_RE.fullmatch(n)]
        if cjk_norms:
            resolved_norms = {norm for _, _, norm in pushes}
            cjk_norms = [n for n in cjk_norms if n not in resolved_norms]
            _cjk_arm(cjk_norms, brain, frozenset(scope), claimed, single, pushes)

    if not pushes:
        return [], {}
    prior_lc = prior_context.lower() if prior_context else ""
    by_norm = candidates_by_norm(cands)
    pointers: list[Pointer] = []
    made = _of_brain(_pointers if synopses else _bare_pointers, brain)
    for page, arm, norm in pushes:
        if prior_lc and page.slug.lower() in prior_lc:
            continue
        # The label: the surface of the candidate whose norm is the page title's (weak ones only
        # when the lexical arms are on), else the title, else the slug tail.
        cand = by_norm.get(brain.title_norm(page))
        display = cand.display if cand is not None and (lexical_arms or not cand.weak) else ""
        display = display or page.title or page.slug[page.slug.rfind("/") + 1 :]
        pointers.append(_pointer(made, brain, page, display, arm, norm, synopses))
        if len(pointers) >= max_pointers:
            break
    return pointers, by_norm


_pointers: Final[dict[object, dict[int, tuple[str, str, str, Pointer]]]] = {}
"""brain token -> page id -> ``(arm, norm, display, pointer)``: the pointer last built for that page.
The same page is resolved again in every window its mention stays in (a window of 4 turns: four
times), and a pointer is a function of the page, the arm, the claiming norm and the label; building
it (a named tuple, its synopsis and confidence looked up) cost more than this lookup."""
_bare_pointers: Final[dict[object, dict[int, tuple[str, str, str, Pointer]]]] = {}
"""The same for pointers built without their synopsis (``resolve_with_index(synopses=False)``)."""


def _pointer(made: dict[int, tuple[str, str, str, Pointer]], brain: BrainIndex, page: Page, display: str, arm: str,
             norm: str, synopses: bool) -> Pointer:
    """``new_pointer(display, page.slug, page.source_id, brain.synopsis(page), arm, ARM_CONFIDENCE[arm],
    norm)`` (the synopsis ``""`` without ``synopses``), reusing the one ``made`` holds for ``page``
    when it was built with the same arm, norm and label."""
    page_id: Any = page.id
    known = made.get(page_id)
    if known is not None and known[0] == arm and known[1] == norm and known[2] == display:
        return known[3]
    pointer = new_pointer(display, page.slug, page.source_id, brain.synopsis(page) if synopses else "", arm,
                          ARM_CONFIDENCE[arm], norm)
    if len(made) >= _CODES_MAX:
        made.clear()
    made[page_id] = (arm, norm, display, pointer)
    return pointer


def _push(claimed: set[object], single: bool, pushes: list[_Push], page: Page, arm: str, norm: str) -> None:
    """Push ``page`` by ``arm`` unless its ``(source_id, slug)`` was claimed by an earlier push.

    Every pushed page is a live page of the scope, so with one source in scope (``single``: the
    stream's case) the slug alone names it, and no key tuple is built per push."""
    key: object = page.slug if single else (page.source_id, page.slug)
    if key not in claimed:
        claimed.add(key)
        pushes.append((page, arm, norm))


def _cjk_arm(
    cjk_norms: list[str], brain: BrainIndex, in_scope: frozenset[str], claimed: set[object], single: bool,
    pushes: list[_Push],
) -> None:
    """Push each CJK norm that names exactly one in-scope page by lowercased title or exact slug."""
    ids: set[int] = set()
    for n in cjk_norms:
        ids.update(brain.ids_with_title(n))
        ids.update(brain.ids_with_slug(n))
    hits: dict[str, list[Page]] = {}
    for page in map(brain.page, sorted(ids)):
        if page.source_id not in in_scope:
            continue
        title_lc = page.title.lower()
        for n in cjk_norms:
            if title_lc == n or page.slug == n:
                hits.setdefault(n, []).append(page)
    for n, pages in hits.items():
        if len(pages) == 1:
            _push(claimed, single, pushes, pages[0], "cjk-title", n)


_RowFacts = tuple[str, str | None, str]
_ROW_FACTS_MAX: Final = 50_000
_row_facts: Final[dict[object, dict[int, _RowFacts]]] = {}
"""brain token -> page id -> :func:`_facts_of` of that page (two brains kept, like :data:`_codes`)."""


def _facts_of(facts: dict[int, _RowFacts], page_id: Any, page: Page) -> _RowFacts:
    """What arm 2 reads of a row, kept per page: its lowercased title, the surname token of a person
    page (what follows the title's last space), and its slug tail. A page comes back as a row in
    every window its name stays in; computed per row, the lowercase and the two slices were new
    strings to hash for every lookup. At most 50,000 pages kept (then started over)."""
    title_lc = page.title.lower()
    space = title_lc.rfind(" ") if page.type == "person" else -1
    found = (title_lc, title_lc[space + 1 :] if space != -1 else None, page.slug[page.slug.rfind("/") + 1 :])
    if len(facts) >= _ROW_FACTS_MAX:
        facts.clear()
    facts[page_id] = found
    return found
