"""The hook lane's turn context against the reference rules (docs/reference-behaviour.md §13.1, §10, §5.5, §6).

Pointers: the resolver's pointers for the window in resolver order, slug-only suppression before
the cap, cap 3 by default, no confidence gate, base arm confidence, rationale ``<arm> match
"<display>"``. Pages: the ordinary gate with the pointer slugs excluded, up to ``max_pages``.
Then the same through :func:`step` over labelled multi-entity sessions: every entity a turn names
arrives on that turn, re-mentions stay silent, distractors are never pushed.
"""

from __future__ import annotations

import orjson
import pytest

from pipeline.core.brain import BrainIndex
from pipeline.core.extract import extract_candidates
from pipeline.core.pages import Page
from pipeline.core.session import DecisionOptions, SessionState, step
from pipeline.core.turn_context import (
    clamp_reflex_max_pointers,
    reflex_pointers,
    reflex_rationale,
    turn_context,
)
from pipeline.core.types import ARM_CONFIDENCE

ALICE, BOB, CAROL, DAN, SWAMI, ACME = ("people/alice-example", "people/bob-sample", "people/carol-demo",
                                       "people/dan-trial", "people/swaminathan-iyer", "companies/acme")


def brain() -> BrainIndex:
    return BrainIndex.build([
        Page(1, ALICE, "Alice Example", compiled_truth="Alice is a founder."),
        Page(2, BOB, "Bob Sample", compiled_truth="Bob is an engineer."),
        Page(3, CAROL, "Carol Demo", compiled_truth="Carol runs sales."),
        Page(4, DAN, "Dan Trial", compiled_truth=""),
        Page(5, SWAMI, "Swaminathan Iyer", compiled_truth="Swami reviews designs.",
             frontmatter={"aliases": ["Swami"]}),
        Page(6, ACME, "Acme Holdings Group", type="company", compiled_truth="Acme makes anvils."),
        Page(7, "private/diary", "Private Diary", type="note", compiled_truth="Secret."),
    ])


BRAIN = brain()


def window(*turns: tuple[str, str]) -> list[tuple[str, list[tuple[str, str, str, bool]]]]:
    return [(role, extract_candidates(text)) for role, text in turns]


FIVE = window(("user", "Swami, Alice Example, Bob Sample, Carol Demo and Dan Trial met yesterday."))


def test_five_entities_three_pointers_then_two_pages() -> None:
    ctx = turn_context(FIVE, BRAIN, source_ids=("default",))
    # resolver order: the alias hit first, then arm-2 rows in page-id order
    assert [p.slug for p in ctx.pointers] == [SWAMI, ALICE, BOB]
    assert [p.slug for p in ctx.pages] == [CAROL, DAN]
    assert ctx.slugs == [SWAMI, ALICE, BOB, CAROL, DAN]
    for p in ctx.pointers:
        assert p.confidence == ARM_CONFIDENCE[p.arm]  # base: no boost although named in the newest turn
        assert p.rationale == reflex_rationale(p.arm, p.display) == f'{p.arm} match "{p.display}"'
    assert (ctx.pointers[0].arm, ctx.pointers[0].display) == ("alias", "Swaminathan Iyer")
    assert ctx.pointers[0].synopsis == "Swami reviews designs."
    for p in ctx.pages:  # the ordinary gate: boosted, with the volunteer rationale
        assert p.confidence == 0.8500000000000001
        assert p.rationale.startswith('exact title match "') and "mentioned in the newest turn" in p.rationale


def test_pointers_have_no_gate() -> None:
    turns = window(("user", "Did Acme reply?"))
    (pointer,) = reflex_pointers(turns, BRAIN, source_ids=("default",))
    assert (pointer.slug, pointer.arm, pointer.confidence) == (ACME, "slug-suffix", 0.6)
    assert pointer.rationale == 'slug-suffix match "Acme Holdings Group"'
    # the volunteer path would never push it (0.65 < 0.7), and it is not a page here either
    assert turn_context(turns, BRAIN, source_ids=("default",)).pages == []


def test_suppression_is_by_slug_and_comes_before_the_cap() -> None:
    ctx = turn_context(FIVE, BRAIN, source_ids=("default",), exclude_slugs={SWAMI: 1, ALICE: 1})
    assert [p.slug for p in ctx.pointers] == [BOB, CAROL, DAN]
    assert ctx.pages == []
    everything = {SWAMI, ALICE, BOB, CAROL, DAN}
    assert turn_context(FIVE, BRAIN, source_ids=("default",), exclude_slugs=everything).slugs == []
    # a title does not suppress, only the slug (slug-only mode)
    assert [p.slug for p in reflex_pointers(FIVE, BRAIN, source_ids=("default",),
                                            exclude_slugs={"Alice Example"})][:2] == [SWAMI, ALICE]


def test_many_suppressed_slugs_cannot_crowd_out_the_cap() -> None:
    pages = [Page(i, f"people/p{i}", f"Person Number{i}", compiled_truth=f"P{i}.") for i in range(1, 16)]
    big = BrainIndex.build(pages)
    text = ", ".join(f"Person Number{i}" for i in range(1, 16))
    turns = window(("user", text))
    excluded = {f"people/p{i}" for i in range(1, 11)}
    got = reflex_pointers(turns, big, source_ids=("default",), exclude_slugs=excluded)
    assert len(got) == 2 and all(p.slug not in excluded for p in got)  # 12 candidates at most: p11, p12


def test_given_slugs_are_suppressed_inside_the_resolver_walk_for_the_pages_too() -> None:
    """7 given pages ahead of 5 new ones in resolver order: 3 pointers, and the gate still sees the
    other 2 (the reference suppresses before the pool of 10, not after it)."""
    big = BrainIndex.build([Page(i, f"people/p{i}", f"Person Number{i}", compiled_truth=f"P{i}.")
                            for i in range(1, 13)])
    turns = window(("user", ", ".join(f"Person Number{i}" for i in range(1, 13))))
    given = {f"people/p{i}": 1 for i in range(1, 8)}
    ctx = turn_context(turns, big, source_ids=("default",), exclude_slugs=given)
    assert [p.slug for p in ctx.pointers] == ["people/p8", "people/p9", "people/p10"]
    assert [p.slug for p in ctx.pages] == ["people/p11", "people/p12"]


def test_cap_clamps_like_the_reference_knobs() -> None:
    assert [clamp_reflex_max_pointers(v) for v in (None, 0, -1, 0.5, float("nan"), "3", True)] == [3] * 7
    assert [clamp_reflex_max_pointers(v) for v in (1, 2.9, 5, 50)] == [1, 2, 5, 10]
    one = turn_context(FIVE, BRAIN, source_ids=("default",), max_pointers=1, max_pages=5)
    assert [p.slug for p in one.pointers] == [SWAMI] and [p.slug for p in one.pages] == [ALICE, BOB, CAROL, DAN]
    capped = turn_context(FIVE, BRAIN, source_ids=("default",), max_pointers=1, max_pages=2)
    assert [p.slug for p in capped.pages] == [ALICE, BOB]


def test_excluded_prefixes_apply_to_pointers_too() -> None:
    turns = window(("user", "Private Diary and Alice Example"))
    ctx = turn_context(turns, BRAIN, source_ids=("default",), exclude_slug_prefixes=("private/",))
    assert ctx.slugs == [ALICE]


def test_nothing_for_an_empty_window_or_no_candidates() -> None:
    assert turn_context([], BRAIN, source_ids=("default",)).slugs == []
    assert turn_context(window(("user", "nothing here at all")), BRAIN, source_ids=("default",)).slugs == []
    assert turn_context(FIVE, BRAIN, source_ids=()).slugs == []


# ----------------------------------------------------------------------------- through step(), labelled

REFLEX = DecisionOptions(reflex=True)

SESSIONS: list[list[tuple[str, str, set[str]]]] = [
    [  # (role, text, slugs that must arrive on exactly this turn)
        ("user", "Swami, Alice Example, Bob Sample, Carol Demo and Dan Trial met yesterday.",
         {SWAMI, ALICE, BOB, CAROL, DAN}),
        ("assistant", "Noted: Alice Example and Bob Sample will follow up.", set()),
        ("user", "Did Carol Demo or Swami reply to Alice Example?", set()),
        ("user", "Mention Paris, Monday, Claude and Python only.", set()),
        ("user", "What does Acme do?", {ACME}),
        ("user", "Thanks, that is all for Acme and Dan Trial.", set()),
    ],
    [
        ("user", "Could you ask Bob Sample?", {BOB}),
        ("user", "Bob Sample said Carol Demo and Alice Example agree.", {CAROL, ALICE}),
        ("user", "Hello there, General Kenobi.", set()),
        ("user", "Bob Sample, Carol Demo, Alice Example, Dan Trial, Swami: the whole team.", {DAN, SWAMI}),
    ],
]


@pytest.mark.parametrize("session", SESSIONS)
def test_labelled_sessions_get_each_entity_on_its_turn_once(session: list[tuple[str, str, set[str]]]) -> None:
    state = SessionState()
    for n, (role, text, want) in enumerate(session, start=1):
        result = step(state, role, text, BRAIN, source_id="default", options=REFLEX, turn_no=n)
        got = [p.slug for p in (*result.pointers, *result.pages)]
        assert len(got) == len(set(got))
        assert set(got) == want, (n, text)
        state = SessionState.from_bytes(state.to_bytes())  # as the table keeps it


def test_pages_only_without_the_reflex() -> None:
    state = SessionState()
    result = step(state, "user", FIVE_TEXT, BRAIN, source_id="default", options=DecisionOptions(), turn_no=1)
    assert result.pointers == [] and [p.slug for p in result.pages] == [SWAMI, ALICE, BOB]
    assert orjson.loads(state.to_bytes())["v"] == 1


FIVE_TEXT = "Swami, Alice Example, Bob Sample, Carol Demo and Dan Trial met yesterday."


def test_pointers_are_kept_for_redelivery_and_old_states_still_read() -> None:
    state = SessionState()
    first = step(state, "user", FIVE_TEXT, BRAIN, source_id="default", options=REFLEX, turn_no=1)
    data = state.to_bytes()
    assert orjson.loads(data)["v"] == 2 and "p" in orjson.loads(data)
    restored = SessionState.from_bytes(data)
    again = step(restored, "user", FIVE_TEXT, BRAIN, source_id="default", options=REFLEX, turn_no=1)
    assert again.duplicate and (again.pointers, again.pages) == (first.pointers, first.pages)
    # the state before this turn was processed gives the same proposal again (crash before save)
    replay = step(SessionState(), "user", FIVE_TEXT, BRAIN, source_id="default", options=REFLEX, turn_no=1)
    assert (replay.pointers, replay.pages) == (first.pointers, first.pages)
    old = b'{"v":1,"t":3,"s":{"people/alice-example":2},"e":{"2":[["people/alice-example","default",' \
          b'"Alice Example",0.85,"title","r",""]]}}'
    legacy = SessionState.from_bytes(old)
    assert (legacy.last_turn, legacy.pointers, list(legacy.emissions)) == (3, {}, [2])


# ----------------------------------------------------------------------------- against the reference's own composition


def reference_composition(turns: list[tuple[str, str]], brain: BrainIndex, given: list[str],
                          source: str) -> tuple[list[str], list[str]]:
    """§13.1 written the reference's way, from the public pieces: the earlier blocks as prior
    context (slug-substring suppression inside the resolver), pointers = resolver with cap 3, then
    ``volunteerContext`` with the same prior context and the pointer slugs excluded."""
    from pipeline.core.op import decide
    from pipeline.core.resolve import resolve
    from pipeline.core.window import extract_window

    prior = "\n".join(f"- → `{slug}`" for slug in given)
    pointers = resolve(extract_window(turns), brain, [source], prior_context=prior, max_pointers=3)
    pages = decide([(r, extract_candidates(t)) for r, t in turns], brain, source_ids=[source],
                   prior_context=prior, exclude_slugs={p.slug for p in pointers})
    return [p.slug for p in pointers], [p.slug for p in pages]


def test_every_conformance_session_matches_the_reference_composition(conformance_brain: BrainIndex) -> None:
    """All watch sessions of the conformance set, every turn a harness prompt whose items were all
    printed. The only allowed difference is the reference's substring suppression (a given slug
    inside another slug), which the session state replaces by exact slugs."""
    from tests.unit.core.conftest import WATCH_CASES
    from tests.unit.core.test_session import turns_of

    compared = differed = 0
    for case in WATCH_CASES:
        if case["flags"]:
            continue
        source = "default"
        state = SessionState()
        history: list[tuple[str, str]] = []
        given: list[str] = []
        for role, text in turns_of(case):
            history.append((role, text))
            result = step(state, role, text, conformance_brain, source_id=source, options=REFLEX)
            want = reference_composition(history[-4:], conformance_brain, given, source)
            got = ([p.slug for p in result.pointers], [p.slug for p in result.pages])
            compared += 1
            if got != want:
                differed += 1
                assert any(g != s and s in g for g in given for s in (*got[0], *got[1])), (case["id"], got, want)
            for p in result.pointers:
                assert p.rationale == f'{p.arm} match "{p.display}"' and p.confidence == ARM_CONFIDENCE[p.arm]
            given += got[0] + got[1]
    assert compared > 1000 and differed <= compared // 50, (compared, differed)
