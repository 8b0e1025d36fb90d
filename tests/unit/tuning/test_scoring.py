"""Micro-averaged push precision / recall on hand-made turns, overall and per arm."""

from __future__ import annotations

import pytest

from pipeline.core.types import ARMS, VolunteeredPage
from pipeline.tuning.labels import Labels
from pipeline.tuning.scoring import Tally, f1


def page(slug: str, arm: str = "title", source: str = "default") -> VolunteeredPage:
    return VolunteeredPage(slug, source, slug, 0.85, arm, "", "")


def labels(expected: set[str], acceptable: set[str] | None = None) -> Labels:
    return Labels(frozenset(expected), frozenset(acceptable or ()))


def test_precision_and_recall_are_sums_over_turns_not_averages_of_ratios() -> None:
    tally = Tally()
    # turn 1: 2 pushed, a expected (hit), b neither -> 1/2 correct
    tally.add_turn([page("a"), page("b")], labels({"a", "c"}))
    # turn 2: 1 pushed, acceptable -> correct but no hit; d expected and missed
    tally.add_turn([page("e", "alias")], labels({"d"}, {"e"}))
    # turn 3: nothing pushed, nothing expected
    tally.add_turn([], labels(set()))
    assert (tally.turns, tally.labelled_turns, tally.volunteered) == (3, 3, 3)
    assert (tally.correct, tally.scored, tally.hits, tally.expected) == (2, 3, 1, 3)
    assert tally.precision == pytest.approx(2 / 3)
    assert tally.recall == pytest.approx(1 / 3)
    assert tally.f1 == pytest.approx(2 * (2 / 3) * (1 / 3) / (2 / 3 + 1 / 3))


def test_per_arm_recall_is_the_share_of_all_expected_slugs_that_arm_delivered() -> None:
    tally = Tally()
    tally.add_turn([page("a", "alias"), page("b", "title-surname")], labels({"a", "b", "c"}))
    tally.add_turn([page("x", "title-surname"), page("d", "slug-suffix")], labels({"d"}))
    alias, surname, slug = (tally.arm_figures(a) for a in ("alias", "title-surname", "slug-suffix"))
    assert alias == {"volunteered": 1, "scored": 1, "correct": 1, "hits": 1, "precision": 1.0, "recall": 0.25}
    assert surname["precision"] == 0.5 and surname["recall"] == 0.25
    assert slug["recall"] == 0.25
    assert sum(tally.arm_figures(a)["recall"] for a in ARMS) == pytest.approx(tally.recall)
    assert tally.arm_figures("title") == {"volunteered": 0, "scored": 0, "correct": 0, "hits": 0,
                                          "precision": None, "recall": 0.0}


def test_unlabelled_turns_count_pages_but_not_the_ratios() -> None:
    tally = Tally()
    tally.add_turn([page("a"), page("b")], None)
    assert (tally.turns, tally.volunteered, tally.labelled_turns) == (1, 2, 0)
    assert tally.precision is None and tally.recall is None and tally.f1 is None
    tally.add_turn([page("c")], labels({"c"}))
    assert tally.volunteered == 3 and tally.scored == 1
    assert tally.precision == 1.0 and tally.recall == 1.0


def test_ratios_without_a_denominator_are_null() -> None:
    silent = Tally()
    silent.add_turn([], labels({"a"}))
    assert silent.precision is None and silent.recall == 0.0 and silent.f1 is None
    nothing_expected = Tally()
    nothing_expected.add_turn([page("a")], labels(set()))
    assert nothing_expected.precision == 0.0 and nothing_expected.recall is None
    assert f1(0.0, 0.0) == 0.0


def test_one_slug_from_two_sources_is_scored_once_per_turn() -> None:
    tally = Tally()
    tally.add_turn([page("a"), page("a", source="team")], labels({"a"}))
    assert tally.volunteered == 2  # both pages were pushed
    assert (tally.scored, tally.correct, tally.hits) == (1, 1, 1)


def test_merge_adds_every_counter() -> None:
    one, two, both = Tally(), Tally(), Tally()
    turns = [([page("a", "alias")], labels({"a"})), ([page("b")], None), ([page("c", "cjk-title")], labels({"d"}, {"c"}))]
    for i, (pages, lab) in enumerate(turns):
        (one if i % 2 else two).add_turn(pages, lab)
        both.add_turn(pages, lab)
    one.merge(two)
    assert one == both
    assert one.to_dict() == both.to_dict()


def test_json_figures_have_every_arm_in_core_order() -> None:
    tally = Tally()
    tally.add_turn([page("a")], labels({"a"}))
    data = tally.to_dict()
    assert list(data["arms"]) == list(ARMS)
    assert data["precision"] == 1.0 and data["arms"]["title"]["hits"] == 1
