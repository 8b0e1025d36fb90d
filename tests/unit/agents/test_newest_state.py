"""Table recovery keeps each session's newest state, so a fenced worker's late writes lose nothing."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.agents.session_table import NO_OFFSET, SessionRecord, newest_states, read_header
from pipeline.core.session import SessionState


@dataclass
class _Message:
    value: bytes | None
    partition: int = 1


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
    kept, dropped = newest_states(events, lambda key: NO_OFFSET)
    assert dropped == 1
    assert [(e.key, read_header(e.message.value)[1]) for e in kept] == [(b"s", 37), (b"s", 40), (b"t", 5)]


def test_the_value_already_in_the_store_counts() -> None:
    kept, dropped = newest_states([_event(b"s", _state(30, 9)), _event(b"s", _state(50, 13))],
                                  lambda key: 41 if key == b"s" else NO_OFFSET)
    assert dropped == 1 and [read_header(e.message.value)[1] for e in kept] == [50]


def test_a_tombstone_is_applied_and_forgets_the_offset() -> None:
    events = [_event(b"s", _state(40, 12)), _event(b"s", None), _event(b"s", _state(3, 1))]
    kept, dropped = newest_states(events, lambda key: NO_OFFSET)
    assert dropped == 0 and len(kept) == 3


def test_an_unreadable_value_is_passed_on_for_the_agent_to_report() -> None:
    kept, dropped = newest_states([_event(b"s", b"\x09garbage")], lambda key: 100)
    assert dropped == 0 and len(kept) == 1
