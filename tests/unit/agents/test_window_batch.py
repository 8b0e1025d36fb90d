"""The window agent's batch logic, without Faust: same per-session results as ``volunteer replay``,
dead letters with reasons, and the crash-consistency rules of docs/contracts.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.agents.batch_types import BatchOutput, InRecord
from pipeline.agents.session_table import SessionRecord
from pipeline.agents.window_batch import DECODED_CACHE_EVICT, DECODED_CACHE_MAX, WindowProcessor
from pipeline.braindir import load_brain_dir
from pipeline.core.brain import BrainIndex
from pipeline.core.session import DecisionOptions
from pipeline.replay import replay_lines
from pipeline.settings import Settings, load_settings
from topics.records import MAX_TURN_NUMBER, Turn, Volunteered, decode_turn, event_id_for, rfc3339_ms

SAMPLES = Path(__file__).resolve().parents[3] / "pipeline" / "samples"
NOW = 1_800_000_000_000


@pytest.fixture(scope="module")
def brain() -> BrainIndex:
    return load_brain_dir(SAMPLES / "brain")


@pytest.fixture
def settings() -> Settings:
    return load_settings(broker="kafka://127.0.0.1:9092", channel="stream-test")


def transcript() -> list[bytes]:
    return [line for line in (SAMPLES / "transcript.jsonl").read_bytes().splitlines() if line.strip()]


def records(values: list[bytes], keys: list[bytes | None] | None = None, partition: int = 0,
            first_offset: int = 0) -> list[InRecord]:
    out = []
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else orjson.loads(value)["session_id"].encode()
        out.append(InRecord(key, value, partition, first_offset + i))
    return out


class Table(dict[bytes, bytes]):
    def save(self, out: BatchOutput) -> None:
        for key, record in out.states.items():
            self[key] = record.to_bytes()


def events(out: BatchOutput) -> list[Volunteered]:
    return [Volunteered.from_json(value) for _, value in out.volunteered]


def test_same_pages_as_replay_in_one_batch_or_many(brain: BrainIndex, settings: Settings) -> None:
    lines = transcript()
    want: list[tuple[str, int, str]] = []
    replay_lines(lines, brain, options=DecisionOptions(), on_page=lambda s, t, p: want.append((s, t, p.slug)))
    assert len(want) >= 10

    one = WindowProcessor(settings).process(records(lines), brain, Table().get, NOW)
    assert [(e.session_id, e.turn, e.slug) for e in events(one)] == want

    table, got = Table(), []
    processor = WindowProcessor(settings)
    for i, rec in enumerate(records(lines)):
        out = processor.process([rec], brain, table.get, NOW + i)
        table.save(out)
        got.extend((e.session_id, e.turn, e.slug) for e in events(out))
    assert got == want


def test_event_fields(brain: BrainIndex, settings: Settings) -> None:
    lines = transcript()
    out = WindowProcessor(settings).process(records(lines), brain, Table().get, NOW)
    turns = {(t.session_id, t.turn): t for t in (decode_turn(v) for v in lines) if t is not None}
    assert out.volunteered
    for key, value in out.volunteered:
        event = Volunteered.from_json(value)
        assert key == event.session_id.encode()
        turn = turns[(event.session_id, event.turn)]
        assert event.channel == turn.channel == "demo"  # the turn's channel wins over the settings
        assert event.event_id == event_id_for(event.session_id, event.turn, event.source_id, event.slug, "demo")
        assert turn.ts_ms is not None
        assert event.volunteered_at == rfc3339_ms(turn.ts_ms)  # from the turn's ts, not processing time


def test_defaults_for_channel_source_and_time(brain: BrainIndex, settings: Settings) -> None:
    turn = Turn("s", "user", "Alice Example called about Northwind.")
    out = WindowProcessor(settings).process(records([turn.to_json()]), brain, Table().get, NOW)
    got = events(out)
    assert [e.slug for e in got] == ["companies/northwind-ventures", "people/alice-example"]
    assert {e.channel for e in got} == {"stream-test"}
    assert {e.source_id for e in got} == {"default"}
    assert {e.volunteered_at for e in got} == {"2027-01-15T08:00:00.000Z"}
    other = WindowProcessor(load_settings(source="team")).process(records([turn.to_json()]), brain,
                                                                  Table().get, NOW)
    assert events(other) == []  # the sample brain has no 'team' source


def test_redelivery_after_the_state_was_saved_is_skipped(brain: BrainIndex, settings: Settings) -> None:
    """Records at or before the offset saved with their session were fully handled: skip them,
    also when they carry no turn number (else they would be counted as new turns)."""
    values = [Turn("s", "user", "Alice Example called.").to_json(),
              Turn("s", "user", "Ronan Galewright too.").to_json()]
    table = Table()
    processor = WindowProcessor(settings)
    first = processor.process(records(values), brain, table.get, NOW)
    table.save(first)
    assert [(e.turn, e.slug) for e in events(first)] == [(1, "people/alice-example"),
                                                         (2, "people/ronan-galewright")]
    again = processor.process(records(values), brain, table.get, NOW)
    assert again.volunteered == [] and again.skipped == 2
    later = processor.process(records([Turn("s", "user", "Alice Example again, and Kiteline.").to_json()],
                                      first_offset=2), brain, table.get, NOW)
    assert [(e.turn, e.slug) for e in events(later)] == [(3, "companies/kiteline")]  # numbering and dedupe kept


def test_reprocessing_from_the_old_state_emits_identical_events(brain: BrainIndex, settings: Settings) -> None:
    """A crash before the state was saved: the batch runs again from the older state and must
    publish exactly the same records (same event_id, same bytes)."""
    lines = transcript()
    table = Table()
    processor = WindowProcessor(settings)
    head = processor.process(records(lines[:5]), brain, table.get, NOW)
    table.save(head)
    first = processor.process(records(lines[5:], first_offset=5), brain, table.get, NOW)
    second = processor.process(records(lines[5:], first_offset=5), brain, table.get, NOW + 999)
    assert first.volunteered and first.volunteered == second.volunteered


def test_duplicate_turn_numbers_are_ignored(brain: BrainIndex, settings: Settings) -> None:
    """A turn number at or below the last is a duplicate and is ignored (docs/contracts.md): no event, even
    under another channel (that would be a row its first processing never produced), no state change."""
    table = Table()
    processor = WindowProcessor(settings)
    value = Turn("s", "user", "Alice Example called.", turn=7).to_json()
    first = processor.process(records([value]), brain, table.get, NOW)
    table.save(first)
    assert [(e.turn, e.slug) for e in events(first)] == [(7, "people/alice-example")]
    # the producer sent turn 7 again (new offsets), once under another channel, and an older turn
    again = [value, Turn("s", "user", "Alice Example called.", turn=7, channel="other").to_json(),
             Turn("s", "user", "Kiteline too.", turn=3).to_json()]
    dup = processor.process(records(again, first_offset=1), brain, table.get, NOW)
    assert dup.volunteered == [] and dup.dead == [] and (dup.skipped, dup.turns) == (3, 0)
    table.save(dup)
    later = processor.process(records([Turn("s", "user", "Alice Example and Kiteline.", turn=8).to_json()],
                                      first_offset=4), brain, table.get, NOW)
    assert [(e.turn, e.slug) for e in events(later)] == [(8, "companies/kiteline")]  # window and dedupe intact


def test_an_unnumbered_turn_after_the_highest_turn_number_is_dead_lettered(brain: BrainIndex,
                                                                        settings: Settings) -> None:
    """Its number would not fit the INTEGER column: a dead letter, not events the sink cannot store."""
    values = [Turn("s", "user", "Alice Example called.", turn=MAX_TURN_NUMBER).to_json(),
              Turn("s", "user", "Kiteline too.").to_json()]
    out = WindowProcessor(settings).process(records(values), brain, Table().get, NOW)
    assert [(e.turn, e.slug) for e in events(out)] == [(MAX_TURN_NUMBER, "people/alice-example")]
    assert [orjson.loads(letter)["error"] for _, letter in out.dead] == ["turn_overflow"]


BAD_CASES: list[tuple[bytes | None, bytes | None, str]] = [
    (None, Turn("s", "user", "hi").to_json(), "missing_key"),
    (b"s", b"{nope", "invalid_json"),
    (b"s", b'{"session_id": "s", "role": "user", "text": "\xff"}', "invalid_utf8"),
    (b"s", b'{"session_id": "s", "role": "robot", "text": "hi"}', "unknown_role"),
    (b"t", Turn("s", "user", "hi").to_json(), "key_mismatch"),
    (b"s", None, "missing_value"),
]


@pytest.mark.parametrize(("key", "value", "code"), BAD_CASES)
def test_bad_records_become_dead_letters(brain: BrainIndex, settings: Settings, key: bytes | None,
                                         value: bytes | None, code: str) -> None:
    out = WindowProcessor(settings).process([InRecord(key, value, 3, 41)], brain, Table().get, NOW)
    assert out.volunteered == [] and not out.states
    ((dead_key, letter),) = out.dead
    obj: dict[str, Any] = orjson.loads(letter)
    assert dead_key == key
    assert (obj["error"], obj["partition"], obj["offset"], obj["topic"]) == (code, 3, 41, settings.topic_turns)
    assert obj["message"]


def test_blank_turns_are_not_turns(brain: BrainIndex, settings: Settings) -> None:
    out = WindowProcessor(settings).process(records([Turn("s", "user", "x").to_json().replace(b'"x"', b'"  "')]),
                                            brain, Table().get, NOW)
    assert out.dead == [] and out.volunteered == [] and out.skipped == 1 and out.turns == 0


def test_a_failing_decision_is_dead_lettered_not_raised(settings: Settings) -> None:
    class Broken:
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError("brain exploded")

    out = WindowProcessor(settings).process(records([Turn("s", "user", "Alice Example").to_json()]),
                                            Broken(), Table().get, NOW)  # type: ignore[arg-type]
    assert [orjson.loads(v)["error"] for _, v in out.dead] == ["processing_error"]
    message = orjson.loads(out.dead[0][1])["message"]
    # the pure core fails inside the fake brain, the compiled one on its type before calling it
    assert "brain exploded" in message or "BrainIndex object expected" in message, message


def test_unreadable_saved_state_starts_the_session_afresh(brain: BrainIndex, settings: Settings) -> None:
    table = Table({b"s": b"garbage"})
    out = WindowProcessor(settings).process(records([Turn("s", "user", "Alice Example").to_json()]), brain,
                                            table.get, NOW)
    assert [e.slug for e in events(out)] == ["people/alice-example"]
    assert SessionRecord.from_bytes(out.states[b"s"].to_bytes()).state.last_turn == 1


def test_decoded_states_are_reused_only_while_they_are_the_saved_ones(brain: BrainIndex,
                                                                        settings: Settings) -> None:
    """The processor keeps decoded states between batches; a batch that is not saved (failed
    publish, revoked partition) must not leak its mutations into the next attempt."""
    processor = WindowProcessor(settings)
    table = Table()

    def save(out: BatchOutput) -> None:
        for key, record in out.states.items():
            value = record.to_bytes()
            table[key] = value
            processor.saved(key, value, record)

    first = processor.process(records([Turn("s", "user", "Alice Example called.").to_json()]), brain,
                              table.get, NOW)
    save(first)
    batch = records([Turn("s", "user", "Ronan Galewright and Alice Example.").to_json()], first_offset=1)
    attempt = processor.process(batch, brain, table.get, NOW)
    assert attempt.states[b"s"] is first.states[b"s"]  # reused, not decoded again
    retry = processor.process(batch, brain, table.get, NOW)  # the attempt was never saved
    assert retry.states[b"s"] is not attempt.states[b"s"]
    assert retry.volunteered == attempt.volunteered
    assert [(e.turn, e.slug) for e in events(retry)] == [(2, "people/ronan-galewright")]
    save(retry)
    table[b"s"] = bytes(bytearray(table[b"s"]))  # another value object, e.g. recovered from the changelog
    recovered = processor.process(records([Turn("s", "user", "Kiteline?").to_json()], first_offset=2), brain,
                                  table.get, NOW)
    assert recovered.states[b"s"] is not retry.states[b"s"]
    assert recovered.states[b"s"].state.last_turn == 3


def test_the_decoded_cache_stays_in_bounds_and_lets_the_least_recently_saved_go_first(settings: Settings) -> None:
    """More sessions than the cache holds, saved round-robin (each save after its session's use, as a
    batch does): the cache never grows past its size, the states saved last are always there, and
    the ones that go are the least recently saved (a sixteenth of the cache at a time)."""
    processor = WindowProcessor(settings)
    cache = processor._decoded
    record = SessionRecord()
    sessions = DECODED_CACHE_MAX + DECODED_CACHE_MAX // 2
    for round_no in range(2):
        for i in range(sessions):
            key = b"s%d" % i
            cache.pop(key, None)  # taken out while a batch uses it, as _load does
            processor.saved(key, b"v%d-%d" % (round_no, i), record)
            assert len(cache) <= DECODED_CACHE_MAX
            if i >= DECODED_CACHE_MAX:
                assert len(cache) >= DECODED_CACHE_MAX - DECODED_CACHE_EVICT
    kept = list(cache)
    assert kept == [b"s%d" % i for i in range(sessions - len(kept), sessions)]  # the newest, oldest first
    assert cache[b"s%d" % (sessions - 1)] == (b"v1-%d" % (sessions - 1), record)


def test_an_expired_session_leaves_the_decoded_cache(settings: Settings) -> None:
    """Idle expiry calls ``forget``: the week-long churn bench had the cache holding up to its size
    of decoded states of sessions already gone from the table."""
    processor = WindowProcessor(settings)
    processor.saved(b"gone", b"v1", SessionRecord())
    processor.saved(b"kept", b"v2", SessionRecord())
    processor.forget(b"gone")
    processor.forget(b"never-seen")  # a session saved before a restart: nothing to drop
    assert list(processor._decoded) == [b"kept"]
