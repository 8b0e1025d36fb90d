"""``VOLUNTEER_STATE_SEAL=false``: plain version-1 values for a rolling upgrade from a release that
cannot open sealed ones, while sealed values are still read."""

from __future__ import annotations

from pipeline.agents.session_table import PLAIN_VERSION, SEALED_VERSION, SessionRecord
from pipeline.agents.statecrypt import StateCipher, new_key_text, parse_key
from pipeline.agents.window_batch import WindowProcessor
from pipeline.core.session import SessionState
from pipeline.settings import load_settings


def test_sealing_off_writes_plain_values_and_still_reads_sealed_ones() -> None:
    cipher = StateCipher(parse_key(new_key_text()))
    record = SessionRecord(SessionState(), partition=3, offset=41, last_activity_ms=7)
    sealed = WindowProcessor(load_settings(), cipher=cipher).encode(b"s1", record)
    plain_writer = WindowProcessor(load_settings(state_seal=False), cipher=cipher)
    plain = plain_writer.encode(b"s1", record)
    assert sealed[0] == SEALED_VERSION and plain[0] == PLAIN_VERSION
    assert SessionRecord.from_bytes(plain).offset == 41  # no cipher needed: what an old release does
    assert SessionRecord.from_bytes(sealed, cipher, b"s1").offset == 41
