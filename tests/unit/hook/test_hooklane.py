"""Delivered-only accounting in the window agent's batch logic (no Faust, real decision core).

Hook-channel turns only propose pages; a delivery record makes exactly the printed ones surfaced
and Volunteered; undelivered pages stay eligible; redelivery after a crash re-emits the same events.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline.agents.batch_types import BatchOutput, InRecord
from pipeline.agents.session_table import SessionRecord
from pipeline.agents.window_batch import WindowProcessor
from pipeline.braindir import load_brain_dir
from pipeline.core.brain import BrainIndex
from pipeline.settings import Settings, load_settings
from topics.delivery import Delivery
from topics.records import DeadLetter, Turn, Volunteered, event_id_for

SAMPLES = Path(__file__).resolve().parents[3] / "pipeline" / "samples"
NOW = 1_800_000_000_000
ALICE = "people/alice-example"
SID = "cc-session-1"


@pytest.fixture(scope="module")
def brain() -> BrainIndex:
    return load_brain_dir(SAMPLES / "brain")


@pytest.fixture
def settings() -> Settings:
    """Pages only (VOLUNTEER_REFLEX=off): the accounting tests below are about pages; the turn
    context (pointers first) has its own tests at the end."""
    return load_settings(broker="kafka://127.0.0.1:9092", reflex=False)


@pytest.fixture
def reflex_settings() -> Settings:
    return load_settings(broker="kafka://127.0.0.1:9092")


class Partition:
    """A growing log of one partition plus the saved table, driven batch by batch."""

    def __init__(self, processor: WindowProcessor, brain: BrainIndex) -> None:
        self.processor, self.brain = processor, brain
        self.log: list[bytes] = []
        self.table: dict[bytes, bytes] = {}

    def append(self, *values: bytes) -> list[InRecord]:
        start = len(self.log)
        self.log.extend(values)
        return [InRecord(SID.encode(), v, 0, start + i) for i, v in enumerate(values)]

    def run(self, recs: list[InRecord], save: bool = True) -> BatchOutput:
        out = self.processor.process(recs, self.brain, self.table.get, NOW)
        if save:
            for key, record in out.states.items():
                self.table[key] = record.to_bytes()
        return out


def turn(n: int, text: str, channel: str = "claude-code", role: str = "user") -> bytes:
    return Turn(SID, role, text, turn=n, channel=channel).to_json()


def delivered(n: int, *slugs: str, channel: str = "claude-code", ts: int = NOW + 5) -> bytes:
    return Delivery(SID, n, slugs, channel, ts).to_json()


def state_of(part: Partition) -> SessionRecord:
    return SessionRecord.from_bytes(part.table[SID.encode()])


def volunteered(out: BatchOutput) -> list[Volunteered]:
    return [Volunteered.from_json(v) for _, v in out.volunteered]


def test_hook_turns_propose_without_surfacing_or_publishing(brain: BrainIndex, settings: Settings) -> None:
    part = Partition(WindowProcessor(settings), brain)
    out = part.run(part.append(turn(1, "Did Alice Example reply?")))
    assert out.volunteered == []
    assert [(p.session_id, p.turn, p.duplicate) for p in out.proposals] == [(SID, 1, False)]
    assert [pg.slug for pg in out.proposals[0].pages] == [ALICE]
    state = state_of(part).state
    assert ALICE not in state.surfaced
    assert [p.slug for p in state.emissions[1]] == [ALICE]  # kept for re-proposal and delivery

    # Not delivered: the next turn that mentions Alice proposes her again.
    again = part.run(part.append(turn(2, "Ping Alice Example again")))
    assert [pg.slug for pg in again.proposals[0].pages] == [ALICE]


def test_a_turn_without_pages_is_still_answered(brain: BrainIndex, settings: Settings) -> None:
    part = Partition(WindowProcessor(settings), brain)
    out = part.run(part.append(turn(1, "nothing to see here")))
    assert [(p.turn, p.pages) for p in out.proposals] == [(1, ())]


def test_delivery_records_exactly_the_printed_pages(brain: BrainIndex, settings: Settings) -> None:
    part = Partition(WindowProcessor(settings), brain)
    first = part.run(part.append(turn(1, "Saoirse Byrne and Alice Example met Swami.")))
    proposed = [p.slug for p in first.proposals[0].pages]
    assert len(proposed) >= 2 and ALICE in proposed
    printed = [s for s in proposed if s != ALICE]

    out = part.run(part.append(delivered(1, *printed, "people/never-proposed")))
    events = volunteered(out)
    assert [e.slug for e in events] == printed  # the unproposed slug adds nothing
    for e in events:
        assert (e.channel, e.turn, e.session_id) == ("claude-code", 1, SID)
        assert e.event_id == event_id_for(SID, 1, e.source_id, e.slug, "claude-code")
        assert e.volunteered_at.startswith("2027-01-15T08:00:00.005")
    state = state_of(part).state
    assert {s: state.surfaced[s] for s in printed} == dict.fromkeys(printed, 1)
    assert ALICE not in state.surfaced

    # Printed pages are deduped for the rest of the session; the unprinted one is not.
    later = part.run(part.append(turn(2, "Saoirse Byrne, Alice Example and Swami again")))
    assert [p.slug for p in later.proposals[0].pages] == [ALICE]


def test_redelivered_records_after_a_crash_emit_the_same_events(brain: BrainIndex, settings: Settings) -> None:
    part = Partition(WindowProcessor(settings), brain)
    part.run(part.append(turn(1, "Did Alice Example reply?")))
    recs = part.append(delivered(1, ALICE), turn(2, "Alice Example said yes"))
    crashed = part.run(recs, save=False)  # published, then died before saving
    again = part.run(recs)
    assert [e.event_id for e in volunteered(again)] == [e.event_id for e in volunteered(crashed)]
    assert len(volunteered(again)) == 1
    assert again.proposals[0].pages == ()  # delivered at turn 1: not proposed at turn 2
    # Saved now: the same records redelivered are skipped, nothing is emitted twice.
    assert part.run(recs).volunteered == []


def test_duplicate_turn_numbers_answer_the_first_proposal(brain: BrainIndex, settings: Settings) -> None:
    part = Partition(WindowProcessor(settings), brain)
    part.run(part.append(turn(1, "Did Alice Example reply?"), delivered(1, ALICE)))
    out = part.run(part.append(turn(1, "a different prompt, same number")))
    (proposal,) = out.proposals
    assert proposal.duplicate and proposal.last_turn == 1
    assert [p.slug for p in proposal.pages] == [ALICE]
    assert state_of(part).state.surfaced == {ALICE: 1}  # a duplicate undoes nothing


def test_other_channels_are_unchanged(brain: BrainIndex, settings: Settings) -> None:
    part = Partition(WindowProcessor(settings), brain)
    out = part.run(part.append(turn(1, "Did Alice Example reply?", channel="stream")))
    assert out.proposals == []
    assert [e.slug for e in volunteered(out)] == [ALICE]
    assert state_of(part).state.surfaced == {ALICE: 1}


@pytest.mark.parametrize(("value", "code"), [
    (b'{"kind":"delivered", nope', "invalid_json"),
    (b'{"kind":"delivered","session_id":"other","turn":1,"slugs":[],"channel":"codex","ts":1}', "key_mismatch"),
    (b'{"kind":"delivered","session_id":"cc-session-1","turn":0,"slugs":[],"channel":"codex","ts":1}',
     "invalid_delivery"),
    (b'{"kind":"delivered","session_id":"cc-session-1","turn":1,"slugs":[],"channel":"stream","ts":1}',
     "invalid_delivery"),
])
def test_bad_delivery_records_are_dead_lettered(brain: BrainIndex, settings: Settings, value: bytes,
                                                code: str) -> None:
    part = Partition(WindowProcessor(settings), brain)
    out = part.run(part.append(value))
    assert out.volunteered == [] and out.proposals == []
    (letter,) = [orjson.loads(v) for _, v in out.dead]
    assert letter["error"] == code
    assert DeadLetter(**letter).original_value() == value


# ----------------------------------------------------------------------------- turn context (reflex on)

KITELINE, NORTHWIND, SAOIRSE, SWAMI = ("companies/kiteline", "companies/northwind-ventures",
                                       "people/saoirse-byrne", "people/swaminathan-iyer")
FIVE = "Alice Example, Saoirse Byrne, Swami, Kiteline and Northwind Ventures all met today."


def test_a_harness_turn_proposes_pointers_then_pages(brain: BrainIndex, reflex_settings: Settings) -> None:
    part = Partition(WindowProcessor(reflex_settings), brain)
    out = part.run(part.append(turn(1, FIVE)))
    (proposal,) = out.proposals
    assert out.volunteered == []
    assert len(proposal.pointers) == 3 and 1 <= len(proposal.pages) <= 2
    slugs = {p.slug for p in proposal.pointers} | {p.slug for p in proposal.pages}
    assert slugs == {ALICE, SAOIRSE, SWAMI, KITELINE, NORTHWIND}
    for p in proposal.pointers:
        assert p.rationale == f'{p.arm} match "{p.display}"' and p.confidence in (0.9, 0.8, 0.72, 0.6)
    assert [k for k, _ in proposal.items()] == ["pointer"] * 3 + ["page"] * len(proposal.pages)
    state = state_of(part).state
    assert state.surfaced == {}  # proposals only
    assert [p.slug for p in state.pointers[1]] == [p.slug for p in proposal.pointers]


def test_delivered_pointers_are_published_as_pointers_with_the_reflex_rationale(
        brain: BrainIndex, reflex_settings: Settings) -> None:
    part = Partition(WindowProcessor(reflex_settings), brain)
    (proposal,) = part.run(part.append(turn(1, FIVE))).proposals
    pointer, page = proposal.pointers[0], proposal.pages[0]
    events = volunteered(part.run(part.append(delivered(1, pointer.slug, page.slug))))
    assert [(e.slug, e.kind) for e in events] == [(pointer.slug, "pointer"), (page.slug, "page")]
    assert (events[0].rationale, events[0].confidence) == (pointer.rationale, pointer.confidence)
    assert orjson.loads(events[0].to_json())["kind"] == "pointer" and "kind" not in orjson.loads(events[1].to_json())
    # The next turn naming all five again proposes only the three that were not printed.
    (again,) = part.run(part.append(turn(2, FIVE))).proposals
    assert {p.slug for p in (*again.pointers, *again.pages)} == {ALICE, SAOIRSE, SWAMI, KITELINE, NORTHWIND} - {
        pointer.slug, page.slug}


def test_a_redelivered_harness_turn_proposes_the_same_items(brain: BrainIndex, reflex_settings: Settings) -> None:
    part = Partition(WindowProcessor(reflex_settings), brain)
    recs = part.append(turn(1, FIVE))
    crashed = part.run(recs, save=False).proposals[0]
    again = part.run(recs).proposals[0]
    assert (again.pointers, again.pages) == (crashed.pointers, crashed.pages)
    dup = part.run(part.append(turn(1, "same number, other words"))).proposals[0]
    assert dup.duplicate and (dup.pointers, dup.pages) == (crashed.pointers, crashed.pages)


def test_reflex_off_restores_pages_only(brain: BrainIndex, settings: Settings) -> None:
    part = Partition(WindowProcessor(settings), brain)
    (proposal,) = part.run(part.append(turn(1, FIVE))).proposals
    assert proposal.pointers == () and len(proposal.pages) == 3


def test_stream_turns_get_the_turn_context_only_when_asked(brain: BrainIndex) -> None:
    plain = Partition(WindowProcessor(load_settings(broker="kafka://127.0.0.1:9092")), brain)
    assert {e.kind for e in volunteered(plain.run(plain.append(turn(1, FIVE, channel="stream"))))} == {"page"}
    asked = Partition(WindowProcessor(load_settings(broker="kafka://127.0.0.1:9092", reflex_stream=True)), brain)
    events = volunteered(asked.run(asked.append(turn(1, FIVE, channel="stream"))))
    assert [e.kind for e in events][:3] == ["pointer"] * 3 and len(events) == 5
    assert state_of(asked).state.surfaced == dict.fromkeys([e.slug for e in events], 1)


def test_a_redelivered_delivery_emits_the_same_pointer_events(brain: BrainIndex, reflex_settings: Settings) -> None:
    part = Partition(WindowProcessor(reflex_settings), brain)
    (proposal,) = part.run(part.append(turn(1, FIVE))).proposals
    slugs = [p.slug for p in (*proposal.pointers, *proposal.pages)]
    recs = part.append(delivered(1, *slugs), turn(2, FIVE))
    crashed = part.run(recs, save=False)  # published, then died before saving
    again = part.run(recs)
    assert [(e.event_id, e.kind) for e in volunteered(again)] == [(e.event_id, e.kind) for e in volunteered(crashed)]
    assert [e.kind for e in volunteered(again)] == ["pointer"] * 3 + ["page"] * len(proposal.pages)
    assert (again.proposals[0].pointers, again.proposals[0].pages) == ((), ())  # all given at turn 1
    assert part.run(recs).volunteered == []


@pytest.mark.parametrize(("hook_window", "stream"), [(5, False), (4, False), (5, True)])
def test_harness_sessions_keep_the_reference_hooks_window_of_five(brain: BrainIndex, hook_window: int,
                                                                   stream: bool) -> None:
    """The reference hook decides over the transcript's last 4 turns plus the prompt. A first prompt
    arrives with 4 warm-up turns whose proposals were never printed: with a window of 5 the oldest
    warm turn's entity is still in the window at the prompt; with 4 (or the stream channels' window)
    it has scrolled out."""
    settings = load_settings(broker="kafka://127.0.0.1:9092", reflex=False, hook_window_turns=hook_window)
    part = Partition(WindowProcessor(settings), brain)
    channel = "stream" if stream else "claude-code"
    warm = [turn(1, "Did Alice Example reply?", channel), turn(2, "not yet", channel, "assistant"),
            turn(3, "ok", channel), turn(4, "noted", channel, "assistant")]
    part.run(part.append(*warm))
    out = part.run(part.append(turn(5, "and now?", channel)))
    window = state_of(part).state.window_turns
    if stream:  # the stream channels keep window_turns (4), as the reference's watch does
        assert window == [2, 3, 4, 5]
        return
    assert window == ([1, 2, 3, 4, 5] if hook_window == 5 else [2, 3, 4, 5])
    (proposal,) = out.proposals
    assert ([p.slug for p in proposal.pages] == [ALICE]) is (hook_window == 5)
