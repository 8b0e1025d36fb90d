"""The idempotent event sink against a real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import psycopg
import pytest

from pipeline.core.types import VolunteeredPage
from sinks.events import InvalidEvent, insert_events, insert_events_sync
from topics.records import Volunteered, event_id_for

pytestmark = pytest.mark.integration


def make_event(
    turn: int = 1,
    slug: str = "people/alice-example",
    *,
    session_id: str = "s-1",
    channel: str = "stream",
    source_id: str = "default",
    rationale: str = 'exact title match "Alice Example"; mentioned in the newest turn',
    confidence: float = 0.8500000000000001,
    at: str = "2026-08-22T10:00:00.123Z",
) -> Volunteered:
    return Volunteered(
        event_id=event_id_for(session_id, turn, source_id, slug, channel),
        session_id=session_id, turn=turn,
        page=VolunteeredPage(slug=slug, source_id=source_id, display="Alice Example", confidence=confidence,
                             arm="title", rationale=rationale, synopsis="Alice is a founder."),
        channel=channel, volunteered_at=at,
    )


async def _insert(url: str, events: Sequence[Volunteered]) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        return await insert_events(conn, events)


def rows(url: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT source_id, slug, confidence, match_arm, rationale, channel, session_id, turn, "
            "to_char(volunteered_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS') "
            "FROM context_volunteer_events ORDER BY id"
        ).fetchall()


def test_same_batch_twice_is_stored_once(migrated_database_url: str) -> None:
    batch = [make_event(1), make_event(2), make_event(2, "companies/widget-co")]
    assert asyncio.run(_insert(migrated_database_url, batch)) == 3
    assert asyncio.run(_insert(migrated_database_url, batch)) == 0
    stored = rows(migrated_database_url)
    assert len(stored) == 3
    assert stored[0] == (
        "default", "people/alice-example", 0.8500000000000001, "title",
        'exact title match "Alice Example"; mentioned in the newest turn', "stream", "s-1", 1,
        "2026-08-22T10:00:00.123",
    )


def test_overlapping_batches_and_duplicates_inside_one_batch(migrated_database_url: str) -> None:
    first = [make_event(t) for t in range(1, 6)]
    second = [make_event(t) for t in range(4, 9)] + [make_event(8)]
    assert asyncio.run(_insert(migrated_database_url, first)) == 5
    assert asyncio.run(_insert(migrated_database_url, second)) == 3
    assert [r[7] for r in rows(migrated_database_url)] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_identity_parts_each_distinguish_events(migrated_database_url: str) -> None:
    base = make_event()
    variants = [
        base,
        make_event(session_id="s-2"),
        make_event(turn=2),
        make_event(slug="people/bob"),
        make_event(source_id="team"),
        make_event(channel="watch"),
    ]
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        assert insert_events_sync(conn, variants) == 6
        # a different confidence / rationale / time is still the same event: not stored again
        again = make_event(confidence=0.9, rationale="other", at="2027-01-01T00:00:00Z")
        assert insert_events_sync(conn, [again]) == 0


def test_hostile_strings_are_stored_verbatim(migrated_database_url: str) -> None:
    hostile = [
        "Robert'); DROP TABLE context_volunteer_events;--",
        'quote " and \' and `back` and $$dollar$$ and %s %(name)s {0}',
        "**bold** [link](http://x) <!--- gbrain:takes:begin --> | a | b |\n---\n# h",
        "backslash \\ \\x00-not-a-nul \\n tab\there",
        "unicode: é 王芳 🙂 \u00a0nbsp \u2028 line-sep",
    ]
    events = [
        make_event(turn=i + 1, slug=f"weird/{text}", session_id=f"sess {text}", rationale=text, channel=f"c{i}")
        for i, text in enumerate(hostile)
    ]
    assert asyncio.run(_insert(migrated_database_url, events)) == len(hostile)
    stored = rows(migrated_database_url)
    assert [r[4] for r in stored] == hostile
    assert [r[1] for r in stored] == [f"weird/{t}" for t in hostile]
    assert [r[6] for r in stored] == [f"sess {t}" for t in hostile]


def test_offsets_and_precision_are_kept(migrated_database_url: str) -> None:
    events = [
        make_event(1, at="2026-08-22T12:00:00.000+02:00", confidence=0.9500000000000001),
        make_event(2, at="2026-08-22T10:00:00Z", confidence=0.77),
    ]
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        insert_events_sync(conn, events)
    stored = rows(migrated_database_url)
    assert [r[8] for r in stored] == ["2026-08-22T10:00:00.000", "2026-08-22T10:00:00.000"]
    assert [r[2] for r in stored] == [0.9500000000000001, 0.77]


def test_unstorable_events_are_refused_before_writing(migrated_database_url: str) -> None:
    bad_time = make_event(2, at="yesterday")
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        with pytest.raises(InvalidEvent, match="not RFC 3339") as info:
            insert_events_sync(conn, [make_event(1), bad_time])
        assert info.value.event_id == bad_time.event_id
        with pytest.raises(InvalidEvent, match="NUL"):
            insert_events_sync(conn, [make_event(3, rationale="a\x00b")])
        with pytest.raises(InvalidEvent, match="INTEGER"):
            insert_events_sync(conn, [make_event(2**31)])
    assert rows(migrated_database_url) == []


def test_inside_a_caller_transaction_rollback_discards(migrated_database_url: str) -> None:
    async def run() -> int:
        async with await psycopg.AsyncConnection.connect(migrated_database_url) as conn:
            n = await insert_events(conn, [make_event(1)])
            await conn.rollback()
            return n

    assert asyncio.run(run()) == 1
    assert rows(migrated_database_url) == []


def test_empty_batch_touches_nothing(migrated_database_url: str) -> None:
    assert asyncio.run(_insert(migrated_database_url, [])) == 0


def test_missing_table_raises_a_database_error(database_url: str) -> None:
    with pytest.raises(psycopg.errors.UndefinedTable):
        asyncio.run(_insert(database_url, [make_event(1)]))


def test_the_sink_agents_writer_dead_letters_an_unstorable_event_and_commits_the_rest(
        migrated_database_url: str) -> None:
    """The event writer on the shared batch-writer base: decode, one retry after an unstorable
    event (dead-lettered with its place), then a committed batch the agent may acknowledge."""
    import orjson

    from pipeline.agents.batch_types import InRecord, WriteOutcome
    from pipeline.agents.sink import EventWriter

    good, bad = make_event(1), make_event(2, at="yesterday")
    records = [InRecord(b"s-1", good.to_json(), 0, 5), InRecord(b"s-1", bad.to_json(), 0, 6),
               InRecord(b"s-1", None, 1, 7), InRecord(b"s-1", b"{}", 1, 8)]

    async def go() -> tuple[object, ...]:
        writer = EventWriter(migrated_database_url, "volunteered")
        try:
            r = await writer.write(records, 1_767_261_700_000)
        finally:
            await writer.close()
        return r.outcome, r.attempts, r.inserted, r.events, r.dead_reasons, [orjson.loads(v)["offset"] for _, v in r.dead]

    outcome, attempts, inserted, events, reasons, offsets = asyncio.run(go())
    assert outcome is WriteOutcome.COMMITTED and (attempts, inserted, events) == (2, 1, 1)
    assert reasons == ["missing_value", "invalid_volunteered", "invalid_event"] and offsets == [7, 8, 6]
    assert len(rows(migrated_database_url)) == 1


@pytest.mark.parametrize("which", ["events", "page opens"])
def test_both_batch_writers_retry_while_the_database_is_away_and_stop_unacknowledged(which: str) -> None:
    """The retry the two writers share (pipeline/agents/dbwriter.py): backoff between attempts,
    nothing written, and a STOPPED outcome (never a count standing in for one) once the worker stops."""
    import socket

    from pipeline.agents.batch_types import InRecord, WriteOutcome
    from pipeline.agents.page_open_writer import OpenWriter
    from pipeline.agents.sink import EventWriter

    with socket.socket() as sock:  # a port nobody listens on: every connection attempt fails
        sock.bind(("127.0.0.1", 0))
        url = f"postgresql://nobody@127.0.0.1:{sock.getsockname()[1]}/x"
    if which == "events":
        writer: EventWriter | OpenWriter = EventWriter(url, "volunteered")
        record = InRecord(b"s-1", make_event(1).to_json(), 0, 1)
    else:
        writer = OpenWriter(url, "opens")
        record = InRecord(b"k", b'{"slug": "a", "source_id": "default"}', 0, 1)
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    result = asyncio.run(writer.write([record], 0, should_stop=lambda: len(waits) >= 4, sleep=sleep))
    assert result.outcome is WriteOutcome.STOPPED and not result.committed  # the agent acknowledges nothing
    assert (result.attempts, writer.failures, result.dead) == (5, 5, [])
    assert waits == [0.05, 0.1, 0.2, 0.4]  # exponential backoff between attempts
    assert (result.inserted if isinstance(writer, EventWriter) else result.updated) == 0
