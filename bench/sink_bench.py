"""Event sink throughput: unnest INSERT (what sinks.events uses) vs executemany vs COPY-into-temp.

Every method is idempotent (ON CONFLICT DO NOTHING on the identity index) and commits once per
batch, like the sink agent. Prints rows/s per method, plus the all-duplicates redelivery case.

    python bench/sink_bench.py [--events 100000] [--batch 500] [--database-url URL]

Without --database-url it starts a throwaway embedded PostgreSQL (fsync off: measures CPU and
protocol cost, not disk).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Sequence

import psycopg

from pipeline.core.types import VolunteeredPage
from pipeline.embedded.postgres import EmbeddedPostgres
from sinks.events import event_columns, insert_events
from sinks.schema import migrate
from topics.records import Volunteered, event_id_for, rfc3339_ms

COLUMNS = "source_id, slug, confidence, match_arm, rationale, channel, session_id, turn, volunteered_at"


def make_events(n: int) -> list[Volunteered]:
    out = []
    base_ms = 1_780_000_000_000
    for i in range(n):
        session, turn, slug = f"session-{i // 40}", i % 40 + 1, f"people/person-{i % 997}"
        out.append(Volunteered(
            event_id=event_id_for(session, turn, "default", slug, "stream"), session_id=session, turn=turn,
            page=VolunteeredPage(slug=slug, source_id="default", display=f"Person {i % 997}",
                                 confidence=0.8500000000000001, arm="title",
                                 rationale=f'exact title match "Person {i % 997}"; mentioned in the newest turn',
                                 synopsis="A person."),
            channel="stream", volunteered_at=rfc3339_ms(base_ms + i),
        ))
    return out


def batches(events: list[Volunteered], size: int) -> list[list[Volunteered]]:
    return [events[i : i + size] for i in range(0, len(events), size)]


def run_unnest(url: str, chunks: Sequence[Sequence[Volunteered]]) -> int:
    async def go() -> int:
        total = 0
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            for chunk in chunks:
                total += await insert_events(conn, chunk)
        return total

    return asyncio.run(go())


def run_executemany(url: str, chunks: Sequence[Sequence[Volunteered]]) -> int:
    sql = f"INSERT INTO context_volunteer_events ({COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING"
    total = 0
    with psycopg.connect(url) as conn:
        for chunk in chunks:
            cols = event_columns(chunk)
            rows = list(zip(*cols, strict=True))
            with conn.cursor() as cur:
                cur.executemany(sql, rows, returning=False)
                total += max(cur.rowcount, 0)
            conn.commit()
    return total


def run_copy(url: str, chunks: Sequence[Sequence[Volunteered]]) -> int:
    total = 0
    with psycopg.connect(url) as conn:
        conn.execute(
            "CREATE TEMP TABLE sink_stage (LIKE context_volunteer_events INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
        )
        conn.commit()
        for chunk in chunks:
            cols = event_columns(chunk)
            with conn.cursor() as cur:
                with cur.copy(f"COPY sink_stage ({COLUMNS}) FROM STDIN") as copy:
                    for row in zip(*cols, strict=True):
                        copy.write_row(row)
                cur.execute(
                    f"INSERT INTO context_volunteer_events ({COLUMNS}) SELECT {COLUMNS} FROM sink_stage "
                    "ON CONFLICT DO NOTHING"
                )
                total += max(cur.rowcount, 0)
            conn.commit()
    return total


def run_sink_writer(url: str, chunks: Sequence[Sequence[Volunteered]]) -> int:
    """The sink agent's own path: Volunteered JSON records -> EventWriter.write (decode, validate,
    unnest INSERT with synchronous_commit on), one batch at a time."""
    from pipeline.agents.batch_types import InRecord
    from pipeline.agents.sink import EventWriter

    batches = [[InRecord(ev.session_id.encode(), ev.to_json(), 0, i) for i, ev in enumerate(chunk)]
               for chunk in chunks]

    async def go() -> int:
        writer = EventWriter(url, "volunteered")
        total = 0
        try:
            for batch in batches:
                total += (await writer.write(batch, 0)).inserted
        finally:
            await writer.close()
        return total

    return asyncio.run(go())


def rows_per_s(url: str, fn: Callable[[str, Sequence[Sequence[Volunteered]]], int],
               chunks: Sequence[Sequence[Volunteered]], n: int, *, truncate: bool = True) -> float:
    if truncate:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("TRUNCATE context_volunteer_events")
    started = time.perf_counter()
    fn(url, chunks)
    return n / (time.perf_counter() - started)


def figures(url: str, events: int = 100_000, batch: int = 500) -> dict[str, float]:
    """The suite's sink figures (rows/s): the sink's own path, the same again as all duplicates
    (redelivery), and the other idempotent insert forms for comparison."""
    chunks = batches(make_events(events), batch)
    return {
        "sink_writer": rows_per_s(url, run_sink_writer, chunks, events),
        "sink_writer_duplicates": rows_per_s(url, run_sink_writer, chunks, events, truncate=False),
        "unnest": rows_per_s(url, run_unnest, chunks, events),
        "executemany": rows_per_s(url, run_executemany, chunks, events),
        "copy_temp": rows_per_s(url, run_copy, chunks, events),
        "events": events,
        "batch": batch,
    }


def measure(name: str, url: str, fn: Callable[[str, Sequence[Sequence[Volunteered]]], int],
            chunks: Sequence[Sequence[Volunteered]], n: int, *, truncate: bool = True) -> None:
    if truncate:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("TRUNCATE context_volunteer_events")
    started = time.perf_counter()
    inserted = fn(url, chunks)
    elapsed = time.perf_counter() - started
    print(f"{name:<34} {n / elapsed:>10,.0f} rows/s   {elapsed:6.2f} s   inserted {inserted}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()

    events = make_events(args.events)
    chunks = batches(events, args.batch)
    pg = None if args.database_url else EmbeddedPostgres().start()
    url = args.database_url or (pg.url if pg else "")
    try:
        migrate(url)
        print(f"{args.events} events in batches of {args.batch}, one commit per batch")
        measure("sink agent path (EventWriter.write)", url, run_sink_writer, chunks, args.events)
        measure("unnest INSERT (sinks.events)", url, run_unnest, chunks, args.events)
        measure("  redelivery, all duplicates", url, run_unnest, chunks, args.events, truncate=False)
        measure("executemany (pipeline mode)", url, run_executemany, chunks, args.events)
        measure("COPY into temp + INSERT SELECT", url, run_copy, chunks, args.events)
        measure("unnest INSERT again (warm)", url, run_unnest, chunks, args.events)
    finally:
        if pg is not None:
            pg.close()


if __name__ == "__main__":
    main()
