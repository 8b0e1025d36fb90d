"""The brain index's compact layout answers exactly what its lookups promise (docs/performance.md,
"Brain index"): shared keys in page-id order whatever the input order, a slug shared by sources,
alias targets as live pages, and the nested alias view built from them."""

from __future__ import annotations

import pytest

from pipeline.core.brain import BrainIndex, DuplicatePage
from pipeline.core.pages import AliasRow, Page


def test_shared_keys_come_back_in_page_id_order_whatever_the_input_order() -> None:
    brain = BrainIndex.build([
        Page(30, "people/ann-lee", "Ann Lee"), Page(10, "team/ann-lee", "Ann Lee", type="company"),
        Page(20, "people/bo-lee", "Bo Lee"), Page(5, "solo", "Solo"),
    ])
    assert brain.ids_with_title("ann lee") == (10, 30)
    assert brain.ids_with_slug_tail("ann-lee") == (10, 30)
    assert brain.person_ids_with_surname("lee") == (20, 30)  # the company is no person
    assert brain.ids_with_slug("solo") == (5,) and brain.ids_with_slug_tail("solo") == ()
    assert brain.query_info("Ann Lee")[3] == (10, 30)
    assert brain.query_info("Lee")[3:] == ((), (20, 30))


def test_a_slug_in_several_sources_is_one_live_page_per_source() -> None:
    brain = BrainIndex.build([
        Page(2, "people/x", "X", source_id="b"), Page(1, "people/x", "X", source_id="a"),
        Page(3, "people/x", "X", source_id="c", deleted=True),
    ])
    page_a, page_b = brain.live_page("a", "people/x"), brain.live_page("b", "people/x")
    assert page_a is not None and page_b is not None and (page_a.id, page_b.id) == (1, 2)
    assert brain.live_page("c", "people/x") is None and brain.live_page("a", "people/y") is None
    assert brain.ids_with_slug("people/x") == (1, 2)
    assert brain.sources == frozenset({"a", "b", "c"})


def test_a_deleted_page_still_owns_its_source_and_slug() -> None:
    with pytest.raises(DuplicatePage, match="pages 1 and 2 share"):
        BrainIndex.build([Page(1, "a", "A", deleted=True), Page(2, "a", "B")])
    with pytest.raises(DuplicatePage, match="page id 1 is used twice"):
        BrainIndex.build([Page(1, "a", "A"), Page(1, "b", "B")])
    assert BrainIndex.build([Page(1, "a", "A", deleted=True), Page(1, "b", "B")]).live_page_count == 1


def test_alias_targets_are_live_pages_and_the_nested_view_agrees() -> None:
    x, y, z = Page(1, "people/x", "X"), Page(2, "people/y", "Y", source_id="team"), Page(3, "people/z", "Z")
    gone = Page(4, "people/gone", "Gone", deleted=True)
    rows = [AliasRow("default", "xy", "people/z"), AliasRow("team", "xy", "people/y"), AliasRow("default", "xy", "people/x"),
            AliasRow("default", "xy", "people/x"), AliasRow("default", "xy", "people/gone"), AliasRow("default", "one", "people/x"),
            AliasRow("default", "stale", "people/gone"), AliasRow("nowhere", "one", "people/x")]
    brain = BrainIndex.build([x, y, z, gone], rows)
    assert brain.alias_pages("one") is x
    assert brain.alias_pages("xy") == (x, z, y)  # ordered by (source, slug); duplicate and stale rows dropped
    assert brain.alias_pages("stale") is None and "stale" not in brain.alias_pages_index
    assert brain.alias_row_count == len(rows) and "nowhere" in brain.sources
    assert dict(brain.alias_targets("xy") or {}) == {"default": ("people/x", "people/z"), "team": ("people/y",)}
    assert {k: dict(v) for k, v in brain.alias_index.items()} == {
        "xy": {"default": ("people/x", "people/z"), "team": ("people/y",)}, "one": {"default": ("people/x",)}}


def test_frontmatter_aliases_are_normalised_like_the_alias_table() -> None:
    page = Page(1, "people/ann", "Ann", frontmatter={"aliases": ["Annie", "  ANNIE ", "(Nan)", "Ann  B", "", 7, "Ａｎｎ"]})
    brain = BrainIndex.build([page, Page(2, "people/old", "Old", deleted=True, frontmatter={"aliases": "Olde, O"})])
    assert sorted(brain.alias_pages_index) == ["ann", "ann b", "annie", "nan"]
    assert brain.alias_row_count == 4 + 2  # distinct norms per page, the deleted page's rows counted
