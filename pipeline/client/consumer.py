"""``VolunteeredConsumer``: applications read the pages the pipeline volunteered, as they arrive.

Two ways to read, because applications need both:

- **assign** (no ``group_id``): this process reads every partition itself, from now (``start=
  "latest"``) or from the oldest record kept (``"earliest"``). Nothing is committed; each process
  sees everything. Right for an agent harness following its own session.
- **group** (``group_id="..."``): processes sharing the id split the partitions and resume where the
  group left off. Right for a service that must handle every page once, e.g. a notifier.

Either way ``session_id`` narrows the stream to one conversation (by record key, the session id).
In group mode offsets are committed only for pages the application has finished with: a page counts
as finished when the application asks for the next one (or leaves the ``async with`` block without
an error), so a crash never skips a page it had not handled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import ConsumerStoppedError, KafkaError
from aiokafka.structs import OffsetAndMetadata

from pipeline.client.errors import ConsumerClosed, TopicUnavailable
from pipeline.settings import Settings, load_settings
from topics.records import InvalidRecord, Volunteered

log = logging.getLogger(__name__)

Start = Literal["latest", "earliest"]


@dataclass(frozen=True, slots=True)
class _Entry:
    """A fetched record in arrival order; ``page`` is None when it is filtered out or invalid."""

    tp: TopicPartition
    offset: int
    page: Volunteered | None


class _Listener(ConsumerRebalanceListener):
    """Commit finished pages of partitions this member loses; note when the group is joined."""

    def __init__(self, owner: VolunteeredConsumer) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self.owner._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self.owner._joined.set()


class VolunteeredConsumer:
    """Async iterator over :class:`~topics.records.Volunteered` records.

    ::

        async with VolunteeredConsumer(session_id="s-1") as pages:     # from now on
            async for event in pages:
                print(event.turn, event.page.slug, event.page.confidence)

    ``drain()`` returns what is already on the topic (for the filter) without waiting for more.
    Records that are not valid Volunteered JSON are skipped, logged and counted in
    :attr:`skipped_invalid`. ``close()`` (from any task) ends an ``async for`` cleanly.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        session_id: str | None = None,
        group_id: str | None = None,
        start: Start = "latest",
        commit_interval: float = 5.0,
        poll_timeout: float = 1.0,
        max_records: int = 500,
        join_timeout: float = 60.0,
        **consumer_overrides: Any,
    ) -> None:
        if start not in ("latest", "earliest"):
            raise ValueError(f"start must be 'latest' or 'earliest', got {start!r}")
        if session_id is not None and (not isinstance(session_id, str) or not session_id):
            raise ValueError("session_id must be a non-empty string (or None for every session)")
        self.settings = settings if settings is not None else load_settings()
        self.topic = self.settings.topic_volunteered
        self.session_id = session_id
        self.group_id = group_id
        self.start_mode: Start = start
        self.skipped_invalid = 0
        self._key = session_id.encode("utf-8") if session_id is not None else None
        self._commit_interval = commit_interval
        self._poll_ms = max(1, int(poll_timeout * 1000))
        self._max_records = max_records
        self._join_timeout = join_timeout
        self._overrides = consumer_overrides
        self._consumer: AIOKafkaConsumer | None = None
        self._buffer: deque[_Entry] = deque()
        self._done: dict[TopicPartition, int] = {}  # next offset after the finished pages
        self._committed: dict[TopicPartition, int] = {}
        self._in_hand: list[_Entry] = []  # handed to the application, not yet finished
        self._last_commit = time.monotonic()
        self._joined = asyncio.Event()
        self._closed = False

    # ------------------------------------------------------------------------- lifecycle

    async def start(self) -> VolunteeredConsumer:
        """Connect and fix the starting position, so that "from now" means now, not later."""
        if self._consumer is not None:
            return self
        if self._closed:
            raise ConsumerClosed("this VolunteeredConsumer was closed; create a new one")
        from topics.clients import make_consumer, start_consumer  # imports the broker quirks lazily

        options: dict[str, Any] = {
            "group_id": self.group_id,
            "enable_auto_commit": False,  # we commit finished pages ourselves
            "auto_offset_reset": self.start_mode,
            "max_poll_records": self._max_records,
            **self._overrides,
        }
        consumer = make_consumer(self.settings, **options)
        try:
            if self.group_id is None:
                # start_consumer's LeaveGroup fix needs a group coordinator; assign mode has none.
                await asyncio.wait_for(consumer.start(), self._join_timeout)
                await self._assign_all(consumer)
            else:
                await asyncio.wait_for(start_consumer(consumer, self.settings), self._join_timeout)
                await self._require_topic(consumer)
                consumer.subscribe([self.topic], listener=_Listener(self))
                await asyncio.wait_for(self._joined.wait(), self._join_timeout)
                await self._pin_positions(consumer, consumer.assignment())
        except BaseException as exc:
            await consumer.stop()
            if isinstance(exc, TimeoutError | KafkaError | OSError):
                raise TopicUnavailable(
                    f"cannot read topic {self.topic!r} on {self.settings.broker}: "
                    f"{exc or type(exc).__name__}"
                ) from exc
            raise
        self._consumer = consumer
        return self

    async def _require_topic(self, consumer: AIOKafkaConsumer) -> None:
        """Fail clearly on a missing topic. Listing all topics never creates one, whereas a
        metadata request for it would make an auto-creating broker create it with its own
        partition count."""
        if self.topic not in await consumer.topics():
            raise TopicUnavailable(
                f"topic {self.topic!r} does not exist on {self.settings.broker}; start a worker "
                "(it creates the topics) or create it"
            )

    async def _assign_all(self, consumer: AIOKafkaConsumer) -> None:
        await self._require_topic(consumer)
        partitions = consumer.partitions_for_topic(self.topic)
        if not partitions:
            raise TopicUnavailable(f"topic {self.topic!r} on {self.settings.broker} has no partitions")
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await self._pin_positions(consumer, set(tps), resume_committed=False)

    async def _pin_positions(self, consumer: AIOKafkaConsumer, tps: set[TopicPartition],
                             resume_committed: bool = True) -> None:
        """Resolve each partition's start now. ``latest`` uses the true log end (on the embedded
        broker ListOffsets answers too early, which would replay old pages)."""
        from topics import tansu_client

        fresh = set(tps)
        if resume_committed:  # group mode: partitions with a committed offset resume there
            for tp in tps:
                if await consumer.committed(tp) is not None:
                    fresh.discard(tp)
        if not fresh:
            return
        if self.start_mode == "earliest":
            await consumer.seek_to_beginning(*fresh)
        else:
            ends = await tansu_client.end_offsets(consumer, fresh, self.settings.broker_is_embedded)
            for tp, end in ends.items():
                consumer.seek(tp, end)
        for tp in fresh:
            await consumer.position(tp)

    async def close(self) -> None:
        """Commit finished pages (group mode) and disconnect. Idempotent; ends a running ``async for``."""
        self._closed = True
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        try:
            if self.group_id is not None:
                await self._commit(consumer)
        except KafkaError as exc:
            log.warning("could not commit volunteered offsets on close: %s", exc)
        finally:
            await consumer.stop()

    async def __aenter__(self) -> VolunteeredConsumer:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if exc is None:
            self._finish_in_hand()  # left the block normally: the last page was handled
        await self.close()

    # ------------------------------------------------------------------------- reading

    def __aiter__(self) -> VolunteeredConsumer:
        return self

    async def __anext__(self) -> Volunteered:
        self._finish_in_hand()
        while True:
            entry = self._take()
            if entry is not None:
                assert entry.page is not None
                self._in_hand = [entry]
                return entry.page
            if self._closed or self._consumer is None:
                raise StopAsyncIteration
            await self._maybe_commit()
            if not await self._fetch():
                raise StopAsyncIteration

    async def drain(self, timeout: float | None = 30.0) -> list[Volunteered]:
        """Every matching page between the current position and the end of the topic *now*.

        Does not wait for new pages; raises ``TimeoutError`` if the end is not reached in time
        (e.g. the broker went away). In group mode the pages count as finished at the next call.
        """
        consumer = self._require()
        self._finish_in_hand()
        from topics import tansu_client

        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        tps = set(consumer.assignment())
        ends = await tansu_client.end_offsets(consumer, tps, self.settings.broker_is_embedded) if tps else {}
        taken: list[_Entry] = []
        while True:
            # Hand over buffered entries below the end snapshot; later ones stay for the iterator.
            keep: deque[_Entry] = deque()
            for entry in self._buffer:
                (taken if entry.offset < ends.get(entry.tp, -1) else keep).append(entry)
            self._buffer = keep
            positions = {tp: await consumer.position(tp) for tp in tps if tp in consumer.assignment()}
            if all(positions[tp] >= ends[tp] for tp in positions) and not any(
                    e.offset < ends.get(e.tp, -1) for e in self._buffer):
                break
            if deadline is not None and loop.time() > deadline:
                raise TimeoutError(f"drain of {self.topic!r} did not reach the end within {timeout} s")
            if not await self._fetch():
                break
        self._in_hand = taken
        return [e.page for e in taken if e.page is not None]

    async def commit(self) -> None:
        """Commit the pages finished so far (group mode; a no-op without a group)."""
        consumer = self._require()
        if self.group_id is not None:
            await self._commit(consumer)

    # ------------------------------------------------------------------------- internals

    def _require(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise ConsumerClosed("VolunteeredConsumer is not started (or was closed)")
        return self._consumer

    def _take(self) -> _Entry | None:
        """Pop the next matching page, marking filtered-out entries before it as finished."""
        while self._buffer:
            entry = self._buffer.popleft()
            if entry.page is not None:
                return entry
            self._done[entry.tp] = entry.offset + 1
        return None

    def _finish_in_hand(self) -> None:
        for entry in self._in_hand:
            self._done[entry.tp] = max(self._done.get(entry.tp, 0), entry.offset + 1)
        self._in_hand = []

    async def _fetch(self) -> bool:
        """One poll into the buffer; False once the consumer is stopped."""
        consumer = self._consumer
        if consumer is None:
            return False
        try:
            batches = await consumer.getmany(timeout_ms=self._poll_ms, max_records=self._max_records)
        except ConsumerStoppedError:
            return False
        for tp, records in batches.items():
            for record in records:
                self._buffer.append(_Entry(tp, record.offset, self._decode(record.key, record.value, tp,
                                                                            record.offset)))
        return True

    def _decode(self, key: bytes | None, value: bytes | None, tp: TopicPartition, offset: int) -> Volunteered | None:
        if self._key is not None and key is not None and key != self._key:
            return None  # another session: skipped without decoding
        if value is None:
            self._invalid(tp, offset, "record has no value")
            return None
        try:
            page = Volunteered.from_json(value)
        except InvalidRecord as exc:
            self._invalid(tp, offset, exc.message)
            return None
        if self.session_id is not None and page.session_id != self.session_id:
            return None
        return page

    def _invalid(self, tp: TopicPartition, offset: int, why: str) -> None:
        self.skipped_invalid += 1
        log.warning("skipped invalid record %s[%d]@%d: %s", tp.topic, tp.partition, offset, why)

    async def _maybe_commit(self) -> None:
        if self.group_id is None or self._consumer is None:
            return
        if time.monotonic() - self._last_commit >= self._commit_interval:
            try:
                await self._commit(self._consumer)
            except KafkaError as exc:  # retried at the next interval; never fatal to reading
                log.warning("commit of volunteered offsets failed (will retry): %s", exc)

    async def _commit(self, consumer: AIOKafkaConsumer, only: set[TopicPartition] | None = None) -> None:
        self._last_commit = time.monotonic()
        owned = consumer.assignment()
        offsets = {
            tp: OffsetAndMetadata(offset, "")
            for tp, offset in self._done.items()
            if tp in owned and (only is None or tp in only) and self._committed.get(tp) != offset
        }
        if not offsets:
            return
        await consumer.commit(offsets)
        for tp, meta in offsets.items():
            self._committed[tp] = meta.offset

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        """Before losing partitions: commit what is finished, drop what is buffered for them (their
        next owner starts from the commit, so nothing is skipped)."""
        consumer = self._consumer
        if consumer is not None and revoked:
            try:
                await self._commit(consumer, only=revoked)
            except KafkaError as exc:
                log.warning("commit before rebalance failed; the next owner may repeat pages: %s", exc)
        self._buffer = deque(e for e in self._buffer if e.tp not in revoked)
        for tp in revoked:
            self._done.pop(tp, None)
            self._committed.pop(tp, None)
