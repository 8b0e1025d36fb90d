"""Plain-aiokafka helpers for the client tests: seed a topic, read a topic back, run a coroutine.

The client under test is never used to check itself: records are read back and seeded with the
project's ordinary aiokafka factories (``topics.clients``).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import TypeVar

import orjson
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from pipeline.core.types import VolunteeredPage
from pipeline.settings import Settings
from topics.clients import make_consumer, make_producer
from topics.records import Volunteered, decode_turn, event_id_for, rfc3339_ms

T = TypeVar("T")
HANG_GUARD_S = 60.0
ROOT = Path(__file__).resolve().parents[3]
SAMPLE_BRAIN = ROOT / "pipeline" / "samples" / "brain"
SAMPLE_TRANSCRIPT = ROOT / "pipeline" / "samples" / "transcript.jsonl"


def run(coro: Awaitable[T], timeout: float = HANG_GUARD_S) -> T:
    """Run ``coro`` on a fresh loop; the timeout only stops a hang."""

    async def guarded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(guarded())


def page(session_id: str, turn: int, slug: str, *, confidence: float = 0.85, arm: str = "alias") -> Volunteered:
    """A Volunteered record as a worker would publish it."""
    return Volunteered(
        event_id=event_id_for(session_id, turn, "default", slug, "stream"),
        session_id=session_id, turn=turn,
        page=VolunteeredPage(slug=slug, source_id="default", display=slug.rsplit("/", 1)[-1].replace("-", " ").title(),
                             confidence=confidence, arm=arm, rationale=f"matched alias for {slug}",
                             synopsis=f"About {slug}."),
        channel="stream", volunteered_at=f"2025-06-01T12:00:{turn % 60:02d}.000Z",
    )


async def seed_pages(settings: Settings, pages: Iterable[Volunteered]) -> None:
    """Publish pages to the volunteered topic, keyed by session id, and wait for the acks."""
    producer = make_producer(settings, acks="all")
    await producer.start()
    try:
        futures = [await producer.send(settings.topic_volunteered, p.to_json(), key=p.session_id.encode())
                   for p in pages]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def seed_raw(settings: Settings, topic: str, items: Iterable[tuple[bytes | None, bytes | None]]) -> None:
    producer = make_producer(settings, acks="all")
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in items]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def read_topic(settings: Settings, topic: str, expected: int, *, settle_s: float = 0.3) -> list[ConsumerRecord[bytes, bytes]]:
    """All records of ``topic`` from the beginning, sorted by (partition, offset).

    Reads until ``expected`` records arrived, then ``settle_s`` longer so extra records (which a
    test must notice) are caught as well.
    """
    consumer = make_consumer(settings)
    await consumer.start()
    try:
        await consumer.topics()
        partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records: list[ConsumerRecord[bytes, bytes]] = []
        loop = asyncio.get_running_loop()
        settle_until: float | None = None
        while settle_until is None or loop.time() < settle_until:
            batches = await consumer.getmany(timeout_ms=50)
            for batch in batches.values():
                records.extend(batch)
            if settle_until is None and len(records) >= expected:
                settle_until = loop.time() + settle_s
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        await consumer.stop()


def replay_pages(turn_lines: list[bytes], brain: Path = SAMPLE_BRAIN) -> list[Volunteered]:
    """The real decision core over Turn records, as Volunteered records a worker would publish."""
    done = subprocess.run([sys.executable, "-m", "pipeline", "replay", "-", "--brain", str(brain), "--json"],
                          input=b"\n".join(turn_lines) + b"\n", capture_output=True, cwd=ROOT,
                          timeout=HANG_GUARD_S, check=False)
    assert done.returncode == 0, done.stderr.decode()
    channels = {}
    for line in turn_lines:
        turn = decode_turn(line)
        assert turn is not None and turn.turn is not None
        channels[(turn.session_id, turn.turn)] = (turn.channel or "stream", turn.ts_ms or 1_767_261_600_000)
    pages = []
    for line in done.stdout.splitlines():
        obj = orjson.loads(line)
        channel, ts_ms = channels[(obj["session_id"], obj["turn"])]
        pages.append(Volunteered(
            event_id=event_id_for(obj["session_id"], obj["turn"], obj["source_id"], obj["slug"], channel),
            session_id=obj["session_id"], turn=obj["turn"], page=VolunteeredPage.from_dict(obj), channel=channel,
            volunteered_at=rfc3339_ms(ts_ms)))
    return pages
