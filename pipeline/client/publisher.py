"""``TurnPublisher``: applications put conversation turns on the ``turns`` topic.

Why a client at all: the pipeline relies on three producer-side promises that are easy to get
wrong by hand — the record key is the session id (it picks the partition, hence the worker that
owns the session), turn numbers grow per session (a number at or below the last one is dropped as
a duplicate), and a record that fails validation is dead-lettered instead of processed. The
publisher keeps all three: it numbers each session's turns itself, validates every record with the
worker's own decoder before sending, and reports turns the broker never acknowledged.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from datetime import datetime
from types import TracebackType
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from pipeline.client.errors import PublishError, TopicUnavailable
from pipeline.settings import Settings, load_settings
from topics.records import InvalidRecord, Turn, decode_turn, parse_ts_ms

log = logging.getLogger(__name__)

Timestamp = datetime | int | float | str
"""When a turn was said: an aware ``datetime``, epoch milliseconds, or an RFC 3339 string."""

_RECORD_OVERHEAD = 64 * 1024  # JSON fields around the text, as topics.records allows


def ts_to_ms(ts: Timestamp) -> int:
    """Epoch milliseconds for any accepted timestamp; a naive ``datetime`` is refused (ambiguous)."""
    if isinstance(ts, datetime):
        if ts.tzinfo is None or ts.utcoffset() is None:
            raise InvalidRecord("invalid_ts", "ts is a naive datetime; give it a timezone (e.g. UTC)")
        return int(ts.timestamp() * 1000)
    return parse_ts_ms(ts)


class TurnPublisher:
    """Publish turns to the ``turns`` topic, keyed by session id, numbered 1, 2, 3… per session.

    ::

        async with TurnPublisher() as publisher:          # settings from VOLUNTEER_* variables
            await publisher.publish("s-1", "user", "Did Alice Chen sign the Acme deal?")
            await publisher.publish("s-1", "assistant", "Not yet.")

    ``publish`` returns once the record is queued (batched with ``linger_ms``), not once it is
    acknowledged; ``flush()`` (and leaving the ``async with`` block) waits for every queued turn and
    raises :class:`PublishError` listing any the broker refused. Numbering lives in this object:
    after a restart, call :meth:`resume` with the last number you sent, or later turns of a running
    session are ignored as duplicates.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        linger_ms: int = 5,
        max_batch_size: int = 256 * 1024,
        acks: int | str = "all",
        request_timeout_ms: int = 40_000,
        start_timeout: float = 30.0,
        **producer_overrides: Any,
    ) -> None:
        self.settings = settings if settings is not None else load_settings()
        self.topic = self.settings.topic_turns
        self._producer_options: dict[str, Any] = {
            "linger_ms": linger_ms,
            "max_batch_size": max_batch_size,
            "acks": acks,
            "request_timeout_ms": request_timeout_ms,
            "max_request_size": self.settings.max_text_bytes + _RECORD_OVERHEAD
            + 4 * self.settings.max_session_id_chars,
            **producer_overrides,
        }
        self._start_timeout = start_timeout
        self._producer: AIOKafkaProducer | None = None
        self._last: dict[str, int] = {}
        self._lock = asyncio.Lock()
        self._pending: set[asyncio.Future[Any]] = set()
        self._failed: list[Turn] = []
        self._first_error: BaseException | None = None

    # ------------------------------------------------------------------------- lifecycle

    async def start(self) -> TurnPublisher:
        """Connect and check that the topic exists; a clear error instead of a 40 s hang later."""
        if self._producer is not None:
            return self
        from topics.clients import make_producer  # imports the embedded-broker quirks lazily

        producer = make_producer(self.settings, **self._producer_options)
        try:
            await asyncio.wait_for(producer.start(), self._start_timeout)
            # Listing all topics never creates one; asking for this topic's metadata would make a
            # broker with auto-creation (the embedded one always) create it with *its* partition
            # count, which then fixes the session-to-partition mapping for good.
            cluster = await asyncio.wait_for(producer.client.fetch_all_metadata(), self._start_timeout)
            if self.topic not in cluster.topics():
                raise TopicUnavailable(
                    f"topic {self.topic!r} does not exist on {self.settings.broker}; start a worker "
                    "(it creates the topics) or create it with the partition count of the deployment"
                )
            await asyncio.wait_for(producer.partitions_for(self.topic), self._start_timeout)
        except (TimeoutError, KafkaError, OSError) as exc:
            await producer.stop()
            raise TopicUnavailable(
                f"cannot publish to topic {self.topic!r} on {self.settings.broker}: "
                f"{exc or type(exc).__name__} (is the broker up?)"
            ) from exc
        except BaseException:
            await producer.stop()
            raise
        self._producer = producer
        return self

    async def stop(self) -> None:
        """Flush what is queued, then disconnect. Raises :class:`PublishError` after disconnecting."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            await producer.flush()
            await self._settle()
        finally:
            await producer.stop()
        self._raise_failures()

    async def __aenter__(self) -> TurnPublisher:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if exc is None:
            await self.stop()
            return
        try:  # the block failed: still deliver what was queued, but keep the original error
            await self.stop()
        except PublishError as publish_error:
            log.error("%s", publish_error)

    # ------------------------------------------------------------------------- numbering

    def last_turn(self, session_id: str) -> int | None:
        """The highest turn number published (or resumed) for the session, if any."""
        return self._last.get(session_id)

    def next_turn(self, session_id: str) -> int:
        """The number the next un-numbered turn of the session will get."""
        return self._last.get(session_id, 0) + 1

    def resume(self, session_id: str, last_turn: int) -> None:
        """Continue a session after a restart: the next un-numbered turn gets ``last_turn + 1``."""
        if isinstance(last_turn, bool) or not isinstance(last_turn, int) or last_turn < 0:
            raise ValueError(f"last_turn must be an integer >= 0, got {last_turn!r}")
        self._last[session_id] = last_turn

    def resume_all(self, last_turns: Mapping[str, int]) -> None:
        for session_id, last_turn in last_turns.items():
            self.resume(session_id, last_turn)

    def forget(self, session_id: str) -> None:
        """Drop a finished session's counter (the publisher keeps one integer per session)."""
        self._last.pop(session_id, None)

    # ------------------------------------------------------------------------- publishing

    def build(
        self,
        session_id: str,
        role: str,
        text: str,
        *,
        turn: int | None = None,
        source_id: str | None = None,
        channel: str | None = None,
        ts: Timestamp | None = None,
    ) -> Turn | None:
        """The validated record :meth:`publish` would send (numbered, not counted), or ``None`` for
        blank text. Raises :class:`~topics.records.InvalidRecord` for anything the worker would
        dead-letter."""
        number = self.next_turn(session_id) if turn is None else turn
        draft = {
            "session_id": session_id,
            "role": role,
            "text": text,
            "turn": number,
            "source_id": source_id,
            "channel": channel,
        }
        if ts is not None:
            draft["ts"] = ts_to_ms(ts)
        try:
            raw = orjson.dumps({k: v for k, v in draft.items() if v is not None})
        except orjson.JSONEncodeError as exc:  # lone surrogates, non-JSON types
            raise InvalidRecord("invalid_value", f"turn cannot be encoded as JSON: {exc}") from None
        key = session_id.encode("utf-8") if isinstance(session_id, str) else None
        # The worker's own decoder: what passes here is never dead-lettered for its format.
        return decode_turn(raw, key, max_text_bytes=self.settings.max_text_bytes,
                           max_session_id_chars=self.settings.max_session_id_chars)

    async def publish(
        self,
        session_id: str,
        role: str,
        text: str,
        *,
        turn: int | None = None,
        source_id: str | None = None,
        channel: str | None = None,
        ts: Timestamp | None = None,
    ) -> Turn | None:
        """Queue one turn; returns the record sent (with its turn number), or ``None`` when the
        trimmed text is empty (not a turn: nothing sent, nothing counted).

        ``turn`` overrides the numbering; later un-numbered turns continue after the highest number
        seen. Raises :class:`~topics.records.InvalidRecord` (a ``ValueError``) for invalid input and
        :class:`PublishError` if earlier turns failed to deliver.
        """
        producer = self._producer
        if producer is None:
            raise RuntimeError("TurnPublisher is not started: use 'async with TurnPublisher(...)' or start()")
        self._raise_failures()
        async with self._lock:  # numbering order == send order, even across concurrent tasks
            record = self.build(session_id, role, text, turn=turn, source_id=source_id, channel=channel, ts=ts)
            if record is None:
                return None
            future = await producer.send(self.topic, record.to_json(), key=record.session_id.encode("utf-8"))
            assert record.turn is not None
            self._last[record.session_id] = max(self._last.get(record.session_id, 0), record.turn)
        self._pending.add(future)
        future.add_done_callback(functools.partial(self._on_delivered, record=record))
        return record

    async def flush(self) -> None:
        """Wait until every queued turn is acknowledged; raise :class:`PublishError` for those that
        were not (they are not retried: resend ``error.failed`` if you want them)."""
        producer = self._producer
        if producer is None:
            raise RuntimeError("TurnPublisher is not started")
        await producer.flush()
        await self._settle()
        self._raise_failures()

    @property
    def pending(self) -> int:
        """Turns queued but not yet acknowledged."""
        return len(self._pending)

    # ------------------------------------------------------------------------- delivery bookkeeping

    def _on_delivered(self, future: asyncio.Future[Any], record: Turn) -> None:
        self._pending.discard(future)
        if future.cancelled():
            error: BaseException | None = asyncio.CancelledError("send cancelled")
        else:
            error = future.exception()
        if error is not None:
            self._failed.append(record)
            if self._first_error is None:
                self._first_error = error

    async def _settle(self) -> None:
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
            await asyncio.sleep(0)  # let the done-callbacks run

    def _raise_failures(self) -> None:
        if not self._failed:
            return
        failed, self._failed = self._failed, []
        cause, self._first_error = self._first_error, None
        raise PublishError(failed, cause or RuntimeError("unknown error"), self.topic)
