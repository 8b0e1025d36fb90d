"""How fast the application client is: TurnPublisher publish rate and VolunteeredConsumer read rate.

    python bench/client_bench.py                      # embedded broker, 50k turns over 500 sessions
    python bench/client_bench.py --turns 200000 --sessions 5000 --broker kafka://127.0.0.1:9092

Prints figures; asserts nothing. Publishing includes validation with the worker's decoder and the
per-session numbering; "acknowledged" waits for every turn's broker acknowledgement (flush).
Reading counts Volunteered records decoded by a consumer of all sessions, and by a consumer
filtered to one session (which skips other sessions' records by key, without decoding them).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipeline.client import TurnPublisher, Volunteered, VolunteeredConsumer  # noqa: E402
from pipeline.core.types import VolunteeredPage  # noqa: E402
from pipeline.embedded.tansu import EmbeddedBroker  # noqa: E402
from pipeline.settings import Settings, load_settings  # noqa: E402
from topics.clients import make_producer  # noqa: E402
from topics.definitions import ensure_topics  # noqa: E402
from topics.records import event_id_for  # noqa: E402

TEXT = "Can you help me prep for the Q3 Board Meeting with Alice Example from Northwind next week?"


async def bench_publish(settings: Settings, turns: int, sessions: int, linger_ms: int) -> None:
    async with TurnPublisher(settings, linger_ms=linger_ms) as publisher:
        start = time.perf_counter()
        for i in range(turns):
            await publisher.publish(f"session-{i % sessions}", "user" if i % 2 else "assistant", TEXT)
        queued = time.perf_counter() - start
        await publisher.flush()
        acked = time.perf_counter() - start
    print(f"publish  linger={linger_ms:>3} ms: {turns} turns / {sessions} sessions: "
          f"queued {turns / queued:>9,.0f}/s, acknowledged {turns / acked:>9,.0f}/s ({acked:.2f} s)")


async def seed_volunteered(settings: Settings, count: int, sessions: int) -> None:
    producer = make_producer(settings, acks="all")
    await producer.start()
    try:
        for i in range(count):
            session = f"session-{i % sessions}"
            turn = i // sessions + 1
            page = Volunteered(event_id_for(session, turn, "default", "people/alice-example", "stream"), session,
                               turn, VolunteeredPage("people/alice-example", "default", "Alice Example",
                                                     0.8500000000000001, "title", "exact title match",
                                                     "Partner at Northwind Ventures."),
                               "stream", "2026-01-01T10:00:00.000Z")
            await producer.send(settings.topic_volunteered, page.to_json(), key=session.encode())
        await producer.flush()
    finally:
        await producer.stop()


async def bench_read(settings: Settings, count: int, sessions: int) -> None:
    for label, session in (("all sessions", None), ("one session", "session-0")):
        async with VolunteeredConsumer(settings, session_id=session, start="earliest") as consumer:
            start = time.perf_counter()
            pages = await consumer.drain(timeout=300)
            took = time.perf_counter() - start
        print(f"read     {label:>12}: {len(pages):>7} pages of {count} records in {took:.2f} s "
              f"= {count / took:>9,.0f} records/s scanned")


async def main_async(args: argparse.Namespace, broker: str) -> None:
    tag = uuid.uuid4().hex[:6]
    settings = load_settings(broker=broker, topic_turns=f"bench-{tag}-turns",
                             topic_volunteered=f"bench-{tag}-volunteered", topic_dlq=f"bench-{tag}-dlq",
                             topic_partitions=args.partitions)
    await ensure_topics(settings)
    print(f"broker {broker}, {args.partitions} partitions requested")
    for linger in (0, 5, 20):
        await bench_publish(settings, args.turns, args.sessions, linger)
    await seed_volunteered(settings, args.pages, args.sessions)
    await bench_read(settings, args.pages, args.sessions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", help="broker URL (default: a fresh embedded broker)")
    parser.add_argument("--turns", type=int, default=50_000)
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--pages", type=int, default=50_000, help="Volunteered records to read back")
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()
    if args.broker:
        asyncio.run(main_async(args, args.broker))
        return
    with EmbeddedBroker(cluster_id="client-bench") as broker:
        asyncio.run(main_async(args, broker.url))


if __name__ == "__main__":
    main()
