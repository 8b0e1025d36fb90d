"""Sealed session states: exact round trips, old plain values still read, wrong keys and swaps refused."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import orjson
import pytest

from pipeline.agents.batch_types import InRecord
from pipeline.agents.session_table import (
    HEADER_SIZE,
    PLAIN_VERSION,
    SEALED_VERSION,
    CorruptState,
    SessionRecord,
    read_header,
)
from pipeline.agents.statecrypt import (
    StateCipher,
    StateKeyError,
    cipher_from,
    load_or_create_key_file,
    new_key_text,
    parse_key,
)
from pipeline.agents.window_batch import WindowProcessor
from pipeline.braindir import load_brain_dir
from pipeline.core.session import SessionState
from pipeline.settings import load_settings

SAMPLES = Path(__file__).resolve().parents[3] / "pipeline" / "samples"


def test_sealed_round_trip_is_exact_and_hides_the_words() -> None:
    cipher = StateCipher(parse_key(new_key_text()))
    record = SessionRecord(SessionState(last_turn=3), partition=2, offset=41, last_activity_ms=99)
    sealed = record.to_bytes(cipher, b"session-a")
    assert sealed[0] == SEALED_VERSION and read_header(sealed) == (2, 41, 99)
    back = SessionRecord.from_bytes(sealed, cipher, b"session-a")
    assert back.state.to_bytes() == record.state.to_bytes() and (back.partition, back.offset) == (2, 41)
    assert sealed[HEADER_SIZE:] != record.state.to_bytes()
    assert record.to_bytes(cipher, b"session-a") != sealed  # a fresh nonce every time


def test_a_sealed_window_holds_no_candidate_word_and_decides_the_same() -> None:
    """Two processors, sealed and plain, over the same turns: same pages, and only the plain
    table values show the conversation's words."""
    settings = load_settings(broker="kafka://127.0.0.1:9092")
    brain = load_brain_dir(SAMPLES / "brain")
    lines = [orjson.dumps({"session_id": "s", "role": "user", "turn": i + 1,
                           "text": f"Did Alice Example meet Quorvex Blanditum number {i}?"}) for i in range(6)]
    cipher = StateCipher(parse_key(new_key_text()))
    outputs = []
    for processor in (WindowProcessor(settings), WindowProcessor(settings, cipher=cipher)):
        table: dict[bytes, bytes] = {}
        pages = []
        for offset, line in enumerate(lines):
            out = processor.process([InRecord(b"s", line, 0, offset)], brain, table.get, 1_800_000_000_000)
            for key, record in out.states.items():
                table[key] = processor.encode(key, record)
            pages.extend(value for _, value in out.volunteered)
        outputs.append((pages, table[b"s"]))
    (plain_pages, plain_value), (sealed_pages, sealed_value) = outputs
    assert plain_pages == sealed_pages and plain_pages
    assert b"Quorvex" in plain_value  # what an unsealed changelog would show
    assert b"Quorvex" not in sealed_value and b"Alice" not in sealed_value and b"Blanditum" not in sealed_value


def test_nonces_never_repeat_across_threads_and_a_new_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four threads seal at once while the counter runs past its limit several times: every nonce
    is new, each prefix hands out each count once, and every value still opens."""
    from pipeline.agents import statecrypt

    monkeypatch.setattr(statecrypt, "_COUNTER_LIMIT", 50)
    cipher = StateCipher(b"k" * 32)
    sealed: list[list[bytes]] = [[] for _ in range(4)]

    def seal_many(out: list[bytes]) -> None:
        out.extend(cipher.seal(b"state %d" % i, b"session") for i in range(300))

    threads = [threading.Thread(target=seal_many, args=(out,)) for out in sealed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    values = [v for out in sealed for v in out]
    nonces = [v[:12] for v in values]
    assert len(set(nonces)) == len(nonces) == 1200
    assert len({n[:8] for n in nonces}) >= 1200 // 50  # a new prefix at least every 50 seals
    assert all(int.from_bytes(n[8:], "big") < 50 for n in nonces)
    assert sorted(cipher.open(v, b"session") for v in sealed[0]) == sorted(b"state %d" % i for i in range(300))


def test_plain_version_1_values_are_still_read() -> None:
    cipher = StateCipher(parse_key(new_key_text()))
    old = SessionRecord(SessionState(last_turn=5), 1, 10, 20).to_bytes()
    assert old[0] == PLAIN_VERSION
    assert SessionRecord.from_bytes(old, cipher, b"s").state.last_turn == 5


def test_wrong_key_other_session_or_tampering_is_refused() -> None:
    one, two = (StateCipher(parse_key(new_key_text())) for _ in range(2))
    sealed = SessionRecord(SessionState(last_turn=1), 0, 1, 2).to_bytes(one, b"s1")
    with pytest.raises(CorruptState, match="state key"):
        SessionRecord.from_bytes(sealed, two, b"s1")
    with pytest.raises(CorruptState):
        SessionRecord.from_bytes(sealed, one, b"s2")  # moved to another session
    moved = sealed[:3] + b"\x00" * 8 + sealed[11:]  # another offset in the header
    with pytest.raises(CorruptState):
        SessionRecord.from_bytes(moved, one, b"s1")
    with pytest.raises(CorruptState, match="no state key"):
        SessionRecord.from_bytes(sealed, None, b"s1")


@pytest.mark.parametrize("text", ["", "not base64!", "c2hvcnQ=", "A" * 100])
def test_bad_keys_are_one_line_errors(text: str) -> None:
    with pytest.raises(StateKeyError) as info:
        parse_key(text)
    assert "\n" not in str(info.value)


def test_key_file_is_created_0600_in_a_0700_folder_once(tmp_path: Path) -> None:
    old = os.umask(0)  # creation must not depend on the umask
    try:
        path = tmp_path / "state" / "volunteer" / "state.key"
        keys: list[bytes] = []
        threads = [threading.Thread(target=lambda: keys.append(load_or_create_key_file(path))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        os.umask(old)
    assert len(set(keys)) == 1 and len(keys) == 8  # racing workers end with one key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["state.key"]
    os.chmod(path, 0o644)
    with pytest.raises(StateKeyError, match="readable by others"):
        load_or_create_key_file(path)


def test_environment_key_wins_over_the_file(tmp_path: Path) -> None:
    key = new_key_text()
    a = cipher_from(key, str(tmp_path / "unused.key"))
    b = StateCipher(parse_key(key))
    assert b.open(a.seal(b"x", b"ad"), b"ad") == b"x"
    assert not (tmp_path / "unused.key").exists()
