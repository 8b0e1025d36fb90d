"""The throttled ``last_retrieved_at`` write on a real PostgreSQL: the reference's 5-minute rule,
deleted and unknown pages, the record's own time, idempotence, and one statement per batch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from sinks.retrieval import Open, mark_retrieved, mark_retrieved_sync

pytestmark = pytest.mark.integration

PAGES = ["fresh", "recent", "stale", "gone", "other-source"]


@pytest.fixture
def conn(migrated_database_url: str) -> psycopg.Connection:
    conn = psycopg.connect(migrated_database_url, autocommit=True)
    for slug in PAGES:
        source = "work" if slug == "other-source" else "default"
        conn.execute("INSERT INTO pages (source_id, slug, type, title) VALUES (%s, %s, 'note', %s)",
                     (source, slug, slug))
    conn.execute("UPDATE pages SET last_retrieved_at = now() - interval '4 minutes' WHERE slug = 'recent'")
    conn.execute("UPDATE pages SET last_retrieved_at = now() - interval '6 minutes' WHERE slug = 'stale'")
    conn.execute("UPDATE pages SET deleted_at = now() WHERE slug = 'gone'")
    return conn


def retrieved(conn: psycopg.Connection) -> dict[str, datetime | None]:
    rows = conn.execute("SELECT slug, last_retrieved_at FROM pages").fetchall()
    return {str(slug): at for slug, at in rows}


def db_now(conn: psycopg.Connection) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def test_the_five_minute_throttle_deleted_and_unknown_pages(conn: psycopg.Connection) -> None:
    before = retrieved(conn)
    opens = [Open("default", s) for s in ("fresh", "recent", "stale", "gone", "no-such-page")]
    opens.append(Open("default", "other-source"))  # that slug lives in source "work" only
    changed = mark_retrieved_sync(conn, opens)
    after = retrieved(conn)
    assert changed == 2
    assert before["fresh"] is None and after["fresh"] is not None
    assert after["stale"] is not None and before["stale"] is not None and after["stale"] > before["stale"]
    assert after["recent"] == before["recent"]  # opened 4 minutes ago: throttled
    assert after["gone"] is None and after["other-source"] is None
    # applying the same opens again changes nothing (redelivery)
    assert mark_retrieved_sync(conn, opens) == 0
    assert retrieved(conn) == after


def test_the_record_time_is_written_never_moves_back_and_is_capped_at_now(conn: psycopg.Connection) -> None:
    now = db_now(conn)
    at = now - timedelta(hours=1)
    ms = int(at.timestamp() * 1000)
    assert mark_retrieved_sync(conn, [Open("default", "fresh", ms)]) == 1
    assert retrieved(conn)["fresh"] == datetime.fromtimestamp(ms / 1000, UTC)
    # an older open (late delivery) never moves it back; one 5+ minutes later moves it forward
    assert mark_retrieved_sync(conn, [Open("default", "fresh", ms - 3_600_000)]) == 0
    assert mark_retrieved_sync(conn, [Open("default", "fresh", ms + 240_000)]) == 0
    assert mark_retrieved_sync(conn, [Open("default", "fresh", ms + 360_000)]) == 1
    assert retrieved(conn)["fresh"] == datetime.fromtimestamp((ms + 360_000) / 1000, UTC)
    # a client clock a day ahead cannot push the page into the future
    future = int((now + timedelta(days=1)).timestamp() * 1000)
    assert mark_retrieved_sync(conn, [Open("default", "stale", future)]) == 1
    stale = retrieved(conn)["stale"]
    assert stale is not None and stale <= db_now(conn)


def test_a_batch_touches_each_page_once_with_its_latest_open(conn: psycopg.Connection) -> None:
    now_ms = int(db_now(conn).timestamp() * 1000)
    opens = [Open("default", "fresh", now_ms - 50_000), Open("default", "fresh", now_ms - 10_000),
             Open("default", "fresh", now_ms - 90_000)]
    assert mark_retrieved_sync(conn, opens) == 1
    assert retrieved(conn)["fresh"] == datetime.fromtimestamp((now_ms - 10_000) / 1000, UTC)
    assert mark_retrieved_sync(conn, []) == 0


def test_the_async_variant_matches(migrated_database_url: str, conn: psycopg.Connection) -> None:
    import asyncio

    async def run() -> int:
        async with await psycopg.AsyncConnection.connect(migrated_database_url, autocommit=True) as aconn:
            return await mark_retrieved(aconn, [Open("default", "fresh"), Open("default", "recent")])

    assert asyncio.run(run()) == 1
    assert retrieved(conn)["fresh"] is not None


def test_updates_do_not_count_as_brain_changes(conn: psycopg.Connection) -> None:
    """Workers reload the brain on a version change; page opens must not trigger one."""
    from sinks.brain_pg import brain_version

    version = brain_version(conn)
    mark_retrieved_sync(conn, [Open("default", "fresh"), Open("default", "stale")])
    assert brain_version(conn) == version


def test_the_agents_writer_decodes_dead_letters_and_applies_the_rest(migrated_database_url: str,
                                                                     conn: psycopg.Connection) -> None:
    import asyncio

    import orjson

    from pipeline.agents.batch_types import InRecord
    from pipeline.agents.page_open_writer import OpenWriter

    records = [
        InRecord(b"default/fresh", b'{"slug": "fresh", "source_id": "default", "session_id": "s1"}', 0, 10),
        InRecord(b"x", b'{"slug": "fresh"}', 0, 11),
        InRecord(b"x", b"\xff\xfe", 1, 12),
        InRecord(b"default/stale", b'{"slug": "stale", "source_id": "default", "opened_at": 1767261607000}', 1, 13),
    ]

    async def go() -> tuple[int, int, list[str], list[dict[str, object]]]:
        writer = OpenWriter(migrated_database_url, "opens")
        try:
            result = await writer.write(records, 1_767_261_700_000)
        finally:
            await writer.close()
        return result.opens, result.updated, result.dead_reasons, [orjson.loads(v) for _, v in result.dead]

    opens, updated, reasons, letters = asyncio.run(go())
    assert (opens, updated) == (2, 1)  # "stale" was opened 6 minutes ago; its record's time is older still
    assert reasons == ["missing_field", "invalid_json"]
    assert [(d["topic"], d["partition"], d["offset"]) for d in letters] == [("opens", 0, 11), ("opens", 1, 12)]
    assert letters[1]["value_encoding"] == "base64"
    assert retrieved(conn)["fresh"] is not None
