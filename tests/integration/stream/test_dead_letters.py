"""Malformed records reach the dead-letter topic with a reason; good records in the same partitions
are processed exactly as usual, and nothing is dropped silently."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from pipeline.settings import Settings
from tests.integration.stream.conftest import WorkerFactory
from tests.integration.stream.harness import (
    CONFORMANCE_BRAIN,
    assert_rows_match,
    conformance_sessions,
    distinct_by_session,
    expected_events,
    interleave,
    run,
    volunteered_on_topic,
    wait_for_rows,
)
from topics.clients import make_producer
from topics.io import read_all, turn_items

pytestmark = pytest.mark.integration

MAX_TEXT = 10_000  # above every conformance turn (the longest is under 3 kB)


def turn(session: str, **fields: Any) -> bytes:
    return orjson.dumps({"session_id": session, "role": "user", "text": "hello", **fields})


BAD: list[tuple[str, bytes | None, bytes | None]] = [  # (expected error, key, value)
    ("invalid_json", b"bad-json", b'{"session_id": "bad-json", "role": "user", "text": '),
    ("not_an_object", b"bad-array", b"[1, 2, 3]"),
    ("wrong_type", b"bad-type", turn("bad-type", text=42)),
    ("missing_field", b"bad-missing", orjson.dumps({"session_id": "bad-missing", "role": "user"})),
    ("text_too_large", b"bad-big", turn("bad-big", text="x" * (MAX_TEXT + 1))),
    ("invalid_utf8", b"bad-utf8", b'{"session_id": "bad-utf8", "role": "user", "text": "\xff\xfe"}'),
    ("unknown_role", b"bad-role", turn("bad-role", role="system")),
    ("key_mismatch", b"someone-else", turn("bad-key")),
    ("missing_key", None, turn("bad-nokey")),
    ("missing_value", b"bad-tombstone", None),
    ("invalid_turn", b"bad-turn", turn("bad-turn", turn=0)),
    ("invalid_ts", b"bad-ts", turn("bad-ts", ts="yesterday")),
    ("session_id_too_long", b"s" * 300, turn("s" * 300)),
]


def test_bad_turn_records_are_dead_lettered_and_good_ones_processed(
        pipeline_settings: Settings, start_worker: WorkerFactory) -> None:
    settings = pipeline_settings
    sessions = conformance_sessions()[:60]
    expected = expected_events(sessions)
    total = sum(len(v) for v in expected.values())
    good = list(turn_items(interleave(sessions)))
    blank = (b"blank-session", turn("blank-session", text="   \n\t "))

    async def produce() -> dict[str, tuple[int, int]]:
        producer = make_producer(settings)
        await producer.start()
        origin: dict[str, tuple[int, int]] = {}
        try:
            step = max(1, len(good) // len(BAD))
            for i, (key, value) in enumerate(good):
                await producer.send(settings.topic_turns, value, key=key)
                if i % step == 0 and i // step < len(BAD):
                    code, bad_key, bad_value = BAD[i // step]
                    meta = await (await producer.send(settings.topic_turns, bad_value, key=bad_key))
                    origin[code] = (meta.partition, meta.offset)
            await producer.send_and_wait(settings.topic_turns, blank[1], key=blank[0])
        finally:
            await producer.stop()
        return origin

    origin = run(produce())
    assert len(origin) == len(BAD)
    assert len({p for p, _ in origin.values()}) > 1  # the bad records are spread over partitions
    worker = start_worker("--brain", str(CONFORMANCE_BRAIN), VOLUNTEER_MAX_TEXT_BYTES=MAX_TEXT)

    events = volunteered_on_topic(settings, total)
    assert distinct_by_session(events) == {sid: evs for sid, evs in expected.items() if evs}
    assert_rows_match(wait_for_rows(settings.database_url, total), expected)

    letters = [orjson.loads(r.value) for r in run(read_all(settings, settings.topic_dlq, expect=len(BAD)))]
    by_code = {letter["error"]: letter for letter in letters}
    assert sorted(by_code) == sorted(code for code, _, _ in BAD) and len(letters) == len(BAD)
    for code, key, value in BAD:
        letter = by_code[code]
        assert (letter["partition"], letter["offset"]) == origin[code]
        assert letter["topic"] == settings.topic_turns
        assert letter["message"]
        if value is None:
            assert letter["value"] is None
        elif letter["value_encoding"] == "base64":
            assert base64.b64decode(letter["value"]) == value
        else:
            assert letter["value"].encode() == value
        assert (letter["key"].encode() if letter["key"] is not None else None) == key
    assert by_code["invalid_utf8"]["value_encoding"] == "base64"
    assert worker.stop() == 0


def test_bad_volunteered_records_are_dead_lettered_by_the_sink(
        pipeline_settings: Settings, start_worker: WorkerFactory) -> None:
    settings = pipeline_settings
    good = {"event_id": "e1", "session_id": "s1", "turn": 1, "slug": "people/a", "source_id": "default",
            "display": "A", "confidence": 0.9, "arm": "alias", "rationale": "r", "synopsis": "", "channel": "op",
            "volunteered_at": "2026-01-01T00:00:00.000Z"}
    records = [
        (b"s1", b"not json"),
        (b"s1", orjson.dumps({**good, "event_id": "e2", "slug": "people/\x00nul"})),
        (b"s1", orjson.dumps(good)),
        (b"s1", orjson.dumps(good)),  # a redelivered event: one row
    ]

    async def produce() -> None:
        producer = make_producer(settings)
        await producer.start()
        try:
            for key, value in records:
                await producer.send_and_wait(settings.topic_volunteered, value, key=key)
        finally:
            await producer.stop()

    run(produce())
    worker = start_worker("--brain", str(CONFORMANCE_BRAIN))
    letters = [orjson.loads(r.value) for r in run(read_all(settings, settings.topic_dlq, expect=2))]
    assert sorted(letter["error"] for letter in letters) == ["invalid_event", "invalid_volunteered"]
    assert {letter["topic"] for letter in letters} == {settings.topic_volunteered}
    rows = wait_for_rows(settings.database_url, 1)
    assert [(r[0], r[1], r[2]) for r in rows] == [("s1", 1, "people/a")]
    assert worker.stop() == 0
