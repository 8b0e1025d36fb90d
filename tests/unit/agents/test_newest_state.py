"""Table recovery keeps each session's newest state, so a fenced worker's late writes lose nothing; what
it leaves out is told apart: states written late, and older states of sessions the table already held."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.agents.session_table import NO_OFFSET, LeftOut, SessionRecord, newest_states, read_header
from pipeline.core.session import SessionState


@dataclass
class _Message:
    value: bytes | None
    partition: int = 1
    offset: int | None = None  # the record's place in the changelog
    timestamp: float | None = None  # when its producer made it


@dataclass
class _Event:
    key: bytes
    message: _Message


def _state(offset: int, last_turn: int) -> bytes:
    state = SessionState()
    state.last_turn = last_turn
    return SessionRecord(state=state, partition=1, offset=offset).to_bytes()


def _event(key: bytes, value: bytes | None) -> _Event:
    return _Event(key, _Message(value))


def test_a_state_written_late_with_an_older_offset_is_left_out() -> None:
    # The new owner saved turn 12 (offset 40); the fenced worker's held request then wrote turn 11 (offset 37).
    events = [_event(b"s", _state(37, 11)), _event(b"s", _state(40, 12)), _event(b"s", _state(37, 11)),
              _event(b"t", _state(5, 1))]
    kept, left_out = newest_states(events, lambda key: NO_OFFSET)
    assert left_out == LeftOut(superseded=0, late=1)
    assert [(e.key, read_header(e.message.value)[1]) for e in kept] == [(b"s", 37), (b"s", 40), (b"t", 5)]


def test_the_value_already_in_the_store_counts() -> None:
    kept, left_out = newest_states([_event(b"s", _state(30, 9)), _event(b"s", _state(50, 13))],
                                   lambda key: 41 if key == b"s" else NO_OFFSET)
    assert left_out == LeftOut(superseded=1, late=0) and [read_header(e.message.value)[1] for e in kept] == [50]


def test_a_partition_read_again_over_its_own_states_is_superseded_not_late() -> None:
    # A partition kept across a rebalance is read again from its start while the store holds its
    # newest states (offset 50 for s): the older records are superseded, none was written late.
    events = [_event(b"s", _state(10, 2)), _event(b"s", _state(30, 9)), _event(b"s", _state(50, 13))]
    kept, left_out = newest_states(events, lambda key: 50 if key == b"s" else NO_OFFSET)
    assert left_out == LeftOut(superseded=2, late=0) and [read_header(e.message.value)[1] for e in kept] == [50]


def test_a_late_write_is_late_also_when_the_newer_state_came_in_an_earlier_batch() -> None:
    # One recovery applies the changelog in several batches: the newer state (40) was applied by the
    # first, so by the second it is the store's value, and yet the older one (37) came after it.
    read: set[bytes] = set()
    stored: dict[bytes, int] = {}
    first, late_first = newest_states([_event(b"s", _state(40, 12))], lambda key: stored.get(key, NO_OFFSET), read)
    stored[b"s"] = 40
    second, late_second = newest_states([_event(b"s", _state(37, 11))], lambda key: stored.get(key, NO_OFFSET), read)
    assert len(first) == 1 and second == []
    assert late_first == LeftOut() and late_second == LeftOut(superseded=0, late=1)


def test_a_tombstone_is_applied_and_forgets_the_offset() -> None:
    events = [_event(b"s", _state(40, 12)), _event(b"s", None), _event(b"s", _state(3, 1))]
    kept, left_out = newest_states(events, lambda key: NO_OFFSET)
    assert not left_out and len(kept) == 3


def test_an_unreadable_value_is_passed_on_for_the_agent_to_report() -> None:
    kept, left_out = newest_states([_event(b"s", b"\x09garbage")], lambda key: 100)
    assert not left_out and len(kept) == 1


def test_a_late_state_is_told_by_where_it_sits_and_how_much_earlier_it_was_made() -> None:
    # The old owner made turn 11's state at t=100.0 s; the new owner made turn 12's at t=100.64 s, and
    # that reached the changelog first (offset 1174): the old owner's landed after it (offset 1180).
    events = [_Event(b"s", _Message(_state(40, 12), offset=1174, timestamp=100.64)),
              _Event(b"s", _Message(_state(37, 11), offset=1180, timestamp=100.0))]
    _, left_out = newest_states(events, lambda key: NO_OFFSET)
    assert left_out.late == 1
    assert left_out.examples == ["partition 1 offset 1180 (turns offset 37 < 40 kept at 1174, made 640 ms before it)"]
    total = LeftOut()
    for _ in range(5):
        total.add(left_out)
    assert total.late == 5 and len(total.examples) == 3  # a few examples, never a flood
