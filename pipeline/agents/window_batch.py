"""The window agent's decisions: ``turns`` records -> per-session ``step`` -> Volunteered / dead letters.

Kept apart from Faust so it can be read (and reasoned about) on its own. This is the *decide*
phase of the window agent's commit protocol; publishing the outputs, saving the states and
acknowledging the records, in that order, are :class:`pipeline.agents.commit_protocol.WindowCommit`,
whose module docstring explains why that order makes a crash at any point safe
(docs/contracts.md, "Crash consistency"). Deciding writes nothing: every record is decoded and
stepped against its session's saved state (loaded once per batch), and the new states are
returned for the save phase. Records never crash the agent: anything that cannot be processed
becomes a dead letter with a reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import islice

from pipeline.agents.batch_types import BatchOutput, InRecord
from pipeline.agents.hooklane import apply_delivery, is_hook_channel, propose, volunteered_event
from pipeline.agents.session_table import CorruptState, SessionRecord
from pipeline.agents.statecrypt import StateCipher
from pipeline.core.brain import BrainIndex
from pipeline.core.session import DecisionOptions, step
from pipeline.settings import Settings
from topics.delivery import decode_delivery, is_delivery
from topics.records import (
    DeadLetter,
    InvalidRecord,
    check_turn_number,
    decode_turn_fields,
    rfc3339_ms,
)

log = logging.getLogger(__name__)

WINDOW_BATCH_MAX = 1000
"""Most turns the window agent takes at once (it takes what arrived within ``sink_flush_seconds``)."""

DECODED_CACHE_MAX = 20_000
"""Decoded session states kept between batches (LRU), so an active session is not re-decoded
from its table bytes on every batch; about 100 MB at most for long windows."""

DECODED_CACHE_EVICT = DECODED_CACHE_MAX // 16
"""How many of the oldest decoded states go at once when the cache is over its size. Not one per
save: a dict keeps the slots of deleted entries until it resizes, and a session's entry leaves the
front of the cache while a batch uses it, so finding the oldest entry walked over every slot
deleted before it. With more active sessions than the cache holds, that was ~11 us a save (7.5 %
of a worker's CPU in a 240,000-turn burst of ~30,000 sessions), and 0.2 us in sixteenths."""


def decision_options(settings: Settings) -> DecisionOptions:
    return DecisionOptions(
        window_turns=settings.window_turns,
        max_pages=settings.max_pages,
        min_confidence=settings.min_confidence,
        lexical_arms=settings.lexical_arms,
        exclude_slug_prefixes=tuple(settings.exclude_slug_prefixes),
    )


class WindowProcessor:
    """Turns a batch of ``turns`` records into outputs; holds no state between batches."""

    def __init__(self, settings: Settings, options: DecisionOptions | None = None, *,
                 cipher: StateCipher | None = None) -> None:
        self.cipher = cipher  # opens (and seals) the table values (agents/statecrypt.py); None: plain (unit tests)
        # state_seal off: write plain values an older release can read, during a rolling upgrade from it
        self.seal_with = cipher if settings.state_seal else None
        self.topic = settings.topic_turns
        self.default_source = settings.source
        self.default_channel = settings.channel
        self.max_text_bytes = settings.max_text_bytes
        self.max_session_id_chars = settings.max_session_id_chars
        self.options = options if options is not None else decision_options(settings)
        # Harness turns get the turn context (reflex pointers, then pages) unless VOLUNTEER_REFLEX=off;
        # ordinary turns only when VOLUNTEER_REFLEX_STREAM is on (agents/hooklane.py, docs/hooks.md).
        # Harness sessions keep the reference hook's window (its last 4 transcript turns plus the
        # prompt: hook_window_turns, 5), whatever the stream channels' window_turns says.
        reflexed = replace(self.options, reflex=True, reflex_max_pointers=settings.reflex_max_pointers)
        hook_window = replace(self.options, window_turns=settings.hook_window_turns)
        self.hook_options = (replace(reflexed, window_turns=settings.hook_window_turns)
                             if settings.reflex else hook_window)
        self.stream_options = reflexed if settings.reflex and settings.reflex_stream else self.options
        # key -> (the exact table value saved for it, that value decoded). Entries are taken out
        # while a batch uses them and put back only by :meth:`saved`, so a batch that fails or is
        # not saved can never leave a mutated state behind.
        self._decoded: dict[bytes, tuple[bytes, SessionRecord]] = {}

    def encode(self, key: bytes, record: SessionRecord) -> bytes:
        """The table value for ``record`` of session ``key`` (sealed when there is a cipher and sealing is on)."""
        return record.to_bytes(self.seal_with, key)

    def saved(self, key: bytes, value: bytes, record: SessionRecord) -> None:
        """Tell the processor that ``value`` (= ``record.to_bytes()``) is now the table's value."""
        cache = self._decoded
        cache[key] = (value, record)
        if len(cache) > DECODED_CACHE_MAX:
            for oldest in list(islice(cache, len(cache) - DECODED_CACHE_MAX + DECODED_CACHE_EVICT)):
                del cache[oldest]

    def forget(self, key: bytes) -> None:
        """Drop the decoded state of a session that left the table (idle expiry). Never needed for
        correctness (a cached state is used only while its exact bytes are the table's value), but
        without it an expired session's decoded state stayed in the cache until evicted: up to
        ``DECODED_CACHE_MAX`` states of sessions that are gone (``bench.expiry_churn``)."""
        self._decoded.pop(key, None)

    def _dead(self, out: BatchOutput, rec: InRecord, code: str, message: str, now_ms: int) -> None:
        letter = DeadLetter.build(key=rec.key, value=rec.value, topic=self.topic, partition=rec.partition,
                                  offset=rec.offset, error=code, message=message, now_ms=now_ms)
        out.dead.append((rec.key, letter.to_json()))

    def process(self, records: Sequence[InRecord], brain: BrainIndex, load: Callable[[bytes], bytes | None],
                now_ms: int) -> BatchOutput:
        """Decide a batch (step 1 of the commit protocol). ``load(key)`` returns the saved table value of a session, or None."""
        out = BatchOutput()
        states = out.states
        for rec in records:
            if rec.key is None:
                self._dead(out, rec, "missing_key", "record has no key; the key must be the session id", now_ms)
                continue
            if rec.value is not None and is_delivery(rec.value):  # a hook reports what it printed
                self._deliver(out, rec, rec.key, rec.value, load, now_ms)
                continue
            try:
                # the fields without the frozen Turn, whose __init__ was a third of decoding (topics/records.py)
                fields = decode_turn_fields(rec.value, rec.key, max_text_bytes=self.max_text_bytes,
                                            max_session_id_chars=self.max_session_id_chars)
            except InvalidRecord as exc:
                self._dead(out, rec, exc.code, exc.message, now_ms)
                continue
            if fields is None:  # blank text: not a turn, nothing to do
                out.skipped += 1
                continue
            session_id, role, text, turn_no, ts_ms, source_id, turn_channel = fields
            session = states.get(rec.key)
            if session is None:
                session = self._load(rec.key, load)
                states[rec.key] = session
            if session.already_applied(rec.partition, rec.offset):
                out.skipped += 1
                continue
            try:
                check_turn_number(session.state.last_turn, turn_no)
            except InvalidRecord as exc:
                self._dead(out, rec, exc.code, exc.message, now_ms)
                continue
            source = source_id or self.default_source
            channel = turn_channel or self.default_channel
            hook_turn = is_hook_channel(channel)
            try:
                result = step(session.state, role, text, brain, source_id=source,
                              options=self.hook_options if hook_turn else self.stream_options,
                              turn_no=turn_no, now_ms=now_ms, tally=out.tally)
            except Exception as exc:  # a bug in the core must not stop the stream: dead-letter the turn
                log.exception("processing failed for a turn of session %r", session_id,
                              extra={"session_id": session_id})
                self._dead(out, rec, "processing_error", f"{type(exc).__name__}: {exc}"[:500], now_ms)
                continue
            session.partition = rec.partition
            session.offset = rec.offset
            session.last_activity_ms = now_ms
            if result.skipped:
                out.skipped += 1
                continue
            if result.duplicate and not hook_turn:
                # A repeated turn number is ignored (docs/contracts.md). Its pages were published before the state
                # that counts it was saved; re-emitting them under this record's channel would store rows
                # (other event ids) that the turn's first processing never produced.
                out.skipped += 1
                continue
            out.turns += 1
            if hook_turn:  # items count once the hook prints them (agents/hooklane.py)
                out.proposals.append(propose(session.state, session_id, result))
                continue
            if not result.pages and not result.pointers:
                continue
            at = rfc3339_ms(ts_ms if ts_ms is not None else now_ms)
            for kind, items in (("pointer", result.pointers), ("page", result.pages)):
                for page in items:
                    event = volunteered_event(session_id, result.turn, page, channel, at, kind)
                    out.volunteered.append((rec.key, event.to_json()))
        return out

    def _deliver(self, out: BatchOutput, rec: InRecord, key: bytes, value: bytes,
                 load: Callable[[bytes], bytes | None], now_ms: int) -> None:
        """Apply a hook's delivery record: the printed pages become surfaced and Volunteered."""
        try:
            delivery = decode_delivery(value, key)
        except InvalidRecord as exc:
            self._dead(out, rec, exc.code, exc.message, now_ms)
            return
        session = out.states.get(key)
        if session is None:
            session = out.states[key] = self._load(key, load)
        if session.already_applied(rec.partition, rec.offset):
            out.skipped += 1
            return
        out.volunteered.extend((key, event.to_json()) for event in apply_delivery(session.state, delivery))
        session.partition, session.offset, session.last_activity_ms = rec.partition, rec.offset, now_ms

    def _load(self, key: bytes, load: Callable[[bytes], bytes | None]) -> SessionRecord:
        raw = load(key)
        cached = self._decoded.pop(key, None)
        if cached is not None and raw is not None and cached[0] is raw:
            return cached[1]
        if raw is None:
            return SessionRecord()
        try:
            return SessionRecord.from_bytes(raw, self.cipher, key)
        except CorruptState as exc:
            log.error("session %r has an unreadable saved state (%s); starting it afresh", key[:80], exc)
            return SessionRecord()
