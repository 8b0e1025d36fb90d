"""Table values (header + state) and the idle-session choice."""

from __future__ import annotations

import pytest

from pipeline.agents.expiry import MAX_SWEEP_S, MIN_SWEEP_S, idle_sessions, is_idle, sweep_interval
from pipeline.agents.session_table import HEADER_SIZE, CorruptState, SessionRecord, read_header
from pipeline.core.session import SessionState


def record(partition: int, offset: int, activity: int, last_turn: int = 3) -> bytes:
    return SessionRecord(SessionState(last_turn=last_turn), partition, offset, activity).to_bytes()


def test_round_trip_and_header_without_decoding_the_state() -> None:
    raw = record(7, 123_456_789_012, 1_700_000_000_000)
    assert read_header(raw) == (7, 123_456_789_012, 1_700_000_000_000)
    back = SessionRecord.from_bytes(raw)
    assert (back.partition, back.offset, back.last_activity_ms, back.state.last_turn) == (
        7, 123_456_789_012, 1_700_000_000_000, 3)
    assert raw[HEADER_SIZE:] == SessionState(last_turn=3).to_bytes()


def test_fresh_record_has_applied_nothing() -> None:
    fresh = SessionRecord()
    assert not fresh.already_applied(0, 0)
    saved = SessionRecord.from_bytes(record(2, 10, 0))
    assert saved.already_applied(2, 10) and saved.already_applied(2, 3)
    assert not saved.already_applied(2, 11)
    assert not saved.already_applied(1, 5)  # another partition: offsets are not comparable


@pytest.mark.parametrize("raw", [b"", b"\x01\x00", b"\x09" + b"\x00" * 30, record(0, 0, 0)[:HEADER_SIZE] + b"{"])
def test_corrupt_values_are_reported(raw: bytes) -> None:
    with pytest.raises(CorruptState):
        SessionRecord.from_bytes(raw)


def test_only_idle_sessions_of_owned_partitions_expire() -> None:
    items = [
        (b"old-mine", record(1, 5, 1_000)),
        (b"new-mine", record(1, 6, 9_000)),
        (b"old-theirs", record(2, 5, 1_000)),
        (b"broken", b"???"),
    ]
    assert idle_sessions(items, cutoff_ms=5_000, partitions={0, 1}) == [(b"old-mine", 1)]
    assert is_idle(record(1, 5, 4_999), 5_000, {1}) == 1
    assert is_idle(record(1, 5, 5_000), 5_000, {1}) is None


def test_sweep_interval_is_bounded() -> None:
    assert sweep_interval(1) == MIN_SWEEP_S
    assert sweep_interval(8) == 2
    assert sweep_interval(7 * 24 * 3600) == MAX_SWEEP_S
