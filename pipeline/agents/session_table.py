"""What the window agent keeps per session in its changelog-backed table, and that table.

A table value is a fixed 19-byte header followed by the core's ``SessionState.to_bytes()``,
sealed with AES-GCM (:mod:`pipeline.agents.statecrypt`) in version 2; version 1 values (the
state in clear, written before states were sealed) are still read, and rewritten sealed the next
time their session changes. The header stays readable:

- the source partition and offset of the last ``turns`` record applied to the state, so a record
  redelivered after the state was saved is recognised even when it carries no turn number (the
  agent saves state only after that record's outputs were delivered, so skipping it loses nothing);
- the last activity time (ms), so the idle-session sweep reads 19 bytes, not the whole state.

:class:`SessionTable` is a Faust table whose writes name their partition explicitly: the window
agent writes a whole batch at once (one write per session), outside Faust's per-event context,
and the idle sweep deletes from a timer, where Faust cannot know the partition.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import faust

from pipeline.agents.bulk_send import send_all
from pipeline.agents.statecrypt import SealedStateError, StateCipher
from pipeline.core.session import SessionState
from pipeline.internals import internals

_HEADER = struct.Struct(">BHqq")  # version, partition, offset, last activity ms
HEADER_SIZE = _HEADER.size
PLAIN_VERSION = 1
SEALED_VERSION = 2
_VERSIONS = (PLAIN_VERSION, SEALED_VERSION)
NO_OFFSET = -1

log = logging.getLogger(__name__)


class CorruptState(ValueError):
    """A table value that cannot be decoded."""


@dataclass(slots=True)
class SessionRecord:
    """A session's table value, decoded."""

    state: SessionState = field(default_factory=SessionState)
    partition: int = 0
    offset: int = NO_OFFSET
    last_activity_ms: int = 0

    def to_bytes(self, cipher: StateCipher | None = None, key: bytes = b"") -> bytes:
        """The table value; sealed (version 2) with ``cipher``, bound to the session ``key``."""
        if cipher is None:
            return _HEADER.pack(PLAIN_VERSION, self.partition, self.offset, self.last_activity_ms) + self.state.to_bytes()
        header = _HEADER.pack(SEALED_VERSION, self.partition, self.offset, self.last_activity_ms)
        return header + cipher.seal(self.state.to_bytes(), key + header)

    @classmethod
    def from_bytes(cls, data: bytes, cipher: StateCipher | None = None, key: bytes = b"") -> SessionRecord:
        """Decode a value of either version; a sealed one needs the ``cipher`` and its session ``key``."""
        partition, offset, activity = read_header(data)
        body = data[HEADER_SIZE:]
        if data[0] == SEALED_VERSION:
            if cipher is None:
                raise CorruptState("the state is sealed and no state key is configured")
            try:
                body = cipher.open(body, key + data[:HEADER_SIZE])
            except SealedStateError as exc:
                raise CorruptState(str(exc)) from None
        try:
            state = SessionState.from_bytes(body)
        except ValueError as exc:
            raise CorruptState(str(exc)) from None
        return cls(state, partition, offset, activity)

    def already_applied(self, partition: int, offset: int) -> bool:
        """True for a record at or before the last one applied from the same partition."""
        return partition == self.partition and offset <= self.offset


def read_header(data: bytes) -> tuple[int, int, int]:
    """``(partition, offset, last_activity_ms)`` without decoding the state."""
    if len(data) < HEADER_SIZE:
        raise CorruptState(f"session value of {len(data)} bytes is shorter than its header")
    version, partition, offset, activity = _HEADER.unpack_from(data)
    if version not in _VERSIONS:
        raise CorruptState(f"unknown session value version {version}")
    return int(partition), int(offset), int(activity)


@dataclass(slots=True)
class LeftOut:
    """The changelog records one table recovery left out, by why they were older."""

    superseded: int = 0
    """Older than the state the table already held when the read began: a partition this worker kept
    across the rebalance is read again from its start (the rebalance revokes every partition, and
    Faust then reads each newly active changelog from its earliest offset) while the memory store
    still holds that partition's newest states. Nothing was written out of order."""
    late: int = 0
    """Older than a state read before it in the same read: the record reached the changelog after a
    newer state of its session, i.e. a write that arrived late. A fenced worker's held produce
    request does that (see :func:`newest_states`); so can a produce request the worker gave up on
    after its request timeout and sent again, if the broker still appends the first attempt after
    the newer states that followed the retry (the producer is not idempotent on the embedded
    broker, quirk 5)."""

    examples: list[str] = field(default_factory=list, compare=False)
    """The first few late records, told by where they sit and how much earlier than the newer state
    before them the producer made them (record timestamps): the evidence of which writer was late."""

    def add(self, other: LeftOut) -> None:
        self.superseded += other.superseded
        self.late += other.late
        self.examples.extend(other.examples[:MAX_LATE_EXAMPLES - len(self.examples)])

    def __bool__(self) -> bool:
        return bool(self.superseded or self.late)


def newest_states(events: Iterable[Any], stored_offset: Callable[[Any], int],
                  read: set[Any] | None = None) -> tuple[list[Any], LeftOut]:
    """The changelog events to apply, leaving out every state older than one already kept.

    A worker cut off from the broker mid-batch can be fenced out of the group while its produce
    requests are held; after the heal those requests go through and write the session states it
    decided *after* the new owner of the partition has saved newer ones (found by the multi-host
    run: a session set back one turn, three rows lost and three invented). The embedded broker has
    no producer fencing, so the table itself keeps, per session, the state with the highest source
    offset (the ``turns`` offset in the readable header) instead of the last one written. Offsets of
    ``turns`` only grow, so an older offset is always a stale write. A tombstone (idle expiry) is
    always applied and forgets the offset. ``stored_offset(key)`` is the offset of the value already
    in the store (``NO_OFFSET`` when none).

    ``read`` holds the sessions of which this read (one recovery, over several calls) has already
    applied a state; kept sessions are added to it. A record left out for a session in it was written
    late (:attr:`LeftOut.late`); one left out for a session not in it is older than the value the
    store held before the read began (:attr:`LeftOut.superseded`). Returns the events to apply and
    what was left out.
    """
    seen: set[Any] = set() if read is None else read
    newest: dict[Any, int] = {}
    made: dict[Any, tuple[float | None, int | None]] = {}  # the kept record's (timestamp, changelog offset)
    kept: list[Any] = []
    left_out = LeftOut()
    for event in events:
        key = event.key
        raw = event.message.value
        if raw is None:
            newest[key] = NO_OFFSET
            seen.add(key)
            kept.append(event)
            continue
        try:
            _, offset, _ = read_header(raw)
        except CorruptState:
            kept.append(event)  # the window agent reports and replaces it when the session is next used
            continue
        current = newest[key] if key in newest else stored_offset(key)
        message = event.message
        if offset < current:
            if key in seen:
                left_out.late += 1
                if len(left_out.examples) < MAX_LATE_EXAMPLES:
                    left_out.examples.append(_late_example(message, offset, current, made.get(key)))
            else:
                left_out.superseded += 1
            continue
        newest[key] = offset
        made[key] = (getattr(message, "timestamp", None), getattr(message, "offset", None))
        seen.add(key)
        kept.append(event)
    return kept, left_out


MAX_LATE_EXAMPLES = 3


def apply_newest(events: Iterable[Any], values: MutableMapping[Any, Any], tracked: MutableMapping[Any, int],
                 read: set[Any], left_out: LeftOut, coverage: ChangelogCoverage) -> None:
    """:func:`newest_states` and Faust's memory-store apply in one pass over a recovery batch.

    A fresh worker taking over a million sessions applies two million changelog records (the
    embedded broker keeps every state), and the three passes per batch (the coverage, the rule,
    Faust's store update with its ``to_key``/``to_value`` calls and a generator) were most of the
    recovery's own CPU after the changelog feed (docs/performance.md, "A million sessions"). The
    outcome is the same as those passes: the store's values and key partitions (a tombstone deletes
    the key and its partition, a later value in the same batch sets it again), what is left out and
    why (``late`` when this read already kept a state of the session, else ``superseded``), and the
    highest offset applied per changelog partition. Applying in order makes "the state already
    kept" simply the store's value, so one comparison with its header replaces the rule's
    bookkeeping. One difference, for corrupt values only: a record after a corrupt value of its
    session compares with no offset (the corrupt value is replaced) where the rule compared with
    the value before the batch."""
    unpack = _HEADER.unpack_from
    versions = _VERSIONS
    through: dict[int, int] = {}
    made: dict[Any, Any] = {}  # the message of the state kept for a session: a late example says when it was made
    for event in events:
        message = event.message
        partition = message.partition
        offset = message.offset
        if offset > through.get(partition, -1):
            through[partition] = offset
        key = event.key
        raw = message.value
        if raw is None:
            values.pop(key, None)
            tracked.pop(key, None)
            read.add(key)
            continue
        if len(raw) >= HEADER_SIZE:
            version, _, source, _ = unpack(raw)
            if version in versions:
                current = values.get(key)
                if current is not None and len(current) >= HEADER_SIZE:
                    held, _, held_source, _ = unpack(current)
                    if held in versions and source < held_source:
                        if key in read:
                            left_out.late += 1
                            if len(left_out.examples) < MAX_LATE_EXAMPLES:
                                newer = made.get(key)
                                left_out.examples.append(_late_example(
                                    message, source, held_source,
                                    None if newer is None else (getattr(newer, "timestamp", None),
                                                                getattr(newer, "offset", None))))
                        else:
                            left_out.superseded += 1
                        continue
                made[key] = message
                read.add(key)
        values[key] = event.value
        tracked[key] = partition
    for partition, offset in through.items():
        coverage.applied(partition, offset)


def _late_example(message: Any, offset: int, kept: int, newer: tuple[float | None, int | None] | None) -> str:
    """``partition 2 offset 1180 (turns offset 5120 < 5133 kept at 1174, made 640 ms before it)``."""
    where = f"partition {getattr(message, 'partition', '?')} offset {getattr(message, 'offset', '?')}"
    detail = f"turns offset {offset} < {kept} kept"
    if newer is not None:
        newer_ts, newer_at = newer
        if newer_at is not None:
            detail += f" at {newer_at}"
        made = _seconds(getattr(message, "timestamp", None))
        newer_s = _seconds(newer_ts)
        if made is not None and newer_s is not None:
            detail += f", made {(newer_s - made) * 1000:.0f} ms before it"
    return f"{where} ({detail})"


def _seconds(timestamp: Any) -> float | None:
    """A record's timestamp in seconds: Faust's messages carry seconds (a float), the aiokafka
    records the changelog feed applies carry milliseconds (an int)."""
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)):
        return None
    return timestamp / 1000.0 if isinstance(timestamp, int) else timestamp


class ChangelogCoverage:
    """Per changelog partition, the offset through which the table in memory holds every record of it.

    Faust reads a changelog partition from its start whenever the partition is newly assigned to
    the worker, even when the worker held it before a rebalance and still holds its sessions in
    memory (a worker that lost its partitions for a moment: a zombie woken from a pause, an
    unsynced generation): the memory store has no persisted offset. Under load that re-read was most
    of the time a worker needed to serve a moved partition again (issue 27's campaign: 5,094 records
    read again in 3 s by the woken worker, the row wait 13.2 s against a bound of 13). With this the
    recovery starts where the memory's copy ends (``SessionTable.persisted_offset``).

    What counts as held, and why it is safe with writers that are late:

    - every record a recovery applied (or left out as older, which is the same outcome): a recovery
      reads a partition in offset order from where it was sought, and it is sought at or below
      what is held;
    - a batch of the worker's own writes whose first offset follows the held offset at once: nobody
      wrote in between, so reading it would give the states the memory already has. A batch that
      does not follow (another writer's record in between: a fenced worker's late produce request,
      the worker's own tombstones sent through Faust's path, a batch acknowledged before an earlier
      one) ends the advance until a recovery has read past the gap, so a late write is always read;
    - nothing, for a partition whose sessions the memory store forgot (a recovery completed without
      it); the next recovery of it reads it whole, as before.
    """

    __slots__ = ("_through",)

    def __init__(self) -> None:
        self._through: dict[int, int] = {}

    def through(self, partition: int) -> int | None:
        """The last offset held for ``partition`` (None: nothing known, read it whole)."""
        return self._through.get(partition)

    def applied(self, partition: int, offset: int) -> None:
        """A recovery applied (or left out) the record at ``offset``."""
        if offset > self._through.get(partition, -1):
            self._through[partition] = offset

    def wrote(self, partition: int, first: int, count: int) -> None:
        """The broker stored ``count`` of the worker's own records at ``first`` onwards."""
        held = self._through.get(partition)
        if held is not None and first == held + 1 and count > 0:
            self._through[partition] = first + count - 1

    def read_to(self, partition: int, offset: int) -> None:
        """A recovery read ``partition`` to its end, ``offset`` (-1: it was empty)."""
        if offset > self._through.get(partition, -2):
            self._through[partition] = offset

    def keep_only(self, partitions: Iterable[int]) -> None:
        """Forget every partition but ``partitions`` (the memory store forgot their sessions)."""
        kept = set(partitions)
        for partition in [p for p in self._through if p not in kept]:
            del self._through[partition]


SESSION_TABLE = "sessions"
"""The table's name: its changelog topic and the key router (``app.router.key_store``) use it."""


class SessionTable(faust.Table[bytes, bytes]):
    """A Faust table of raw bytes whose writes go to an explicitly named changelog partition."""

    _explicit_partition: int | None = None
    _read: set[Any] | None = None  # sessions applied by the current recovery's read (newest_states)
    _left_out: LeftOut | None = None  # what the current recovery left out, logged once at its end
    _coverage: ChangelogCoverage | None = None  # made on first use (Faust's Table takes no new arguments)

    def apply_changelog_batch(self, batch: Iterable[Any]) -> None:
        """Recovery apply: keep each session's newest state (see :func:`newest_states`).

        On the memory store, in one pass over the batch (:func:`apply_newest`); another store kind
        gets the rule's kept events through Faust's own apply."""
        if self._read is None:
            self._read, self._left_out = set(), LeftOut()
        assert self._left_out is not None
        store = self.data
        values = internals().store_values(store)
        tracked = internals().key_partitions(store)
        if values is not None and tracked is not None:
            apply_newest(batch, values, tracked, self._read, self._left_out, self.coverage)
            return

        def stored_offset(key: Any) -> int:
            raw = store.get(key)
            if not raw:
                return NO_OFFSET
            try:
                return read_header(raw)[1]
            except CorruptState:
                return NO_OFFSET

        batch = list(batch)
        coverage = self.coverage
        for event in batch:
            message = event.message
            coverage.applied(message.partition, message.offset)
        kept, left_out = newest_states(batch, stored_offset, self._read)
        self._left_out.add(left_out)
        super().apply_changelog_batch(kept)

    async def on_rebalance(self, assigned: Any, revoked: Any, newly_assigned: Any, generation_id: int = 0) -> None:
        self._end_read()  # a rebalance starts a new recovery, whose read starts afresh
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)

    async def on_recovery_completed(self, active_tps: Any, standby_tps: Any) -> None:
        self._end_read()
        # the memory store now forgets the sessions of every partition not active (Faust's memory Store)
        coverage = self.coverage
        coverage.keep_only(tp.partition for tp in active_tps)
        read = getattr(getattr(self.app.tables, "recovery", None), "active_offsets", {})
        for tp in active_tps:  # read to the end: an empty partition is held too, so own writes count
            offset = read.get(tp)
            if offset is not None:
                coverage.read_to(tp.partition, offset)
        await super().on_recovery_completed(active_tps, standby_tps)

    @property
    def coverage(self) -> ChangelogCoverage:
        """What of the changelog the memory holds (:class:`ChangelogCoverage`)."""
        found = self._coverage
        if found is None:
            found = self._coverage = ChangelogCoverage()
        return found

    def persisted_offset(self, tp: Any) -> int | None:
        """Where Faust's recovery starts reading ``tp`` (it seeks to this offset and skips the record
        there): the end of what the memory holds of it, or None to read it from its start."""
        if tp.topic != self.changelog_topic.get_topic_name():
            return None
        return self.coverage.through(tp.partition)

    def _end_read(self) -> None:
        """Report what the finished (or abandoned) read left out, and forget its sessions."""
        left_out, self._read, self._left_out = self._left_out, None, None
        if left_out is None:
            return
        if left_out.late:
            log.warning("table recovery left out %d session state(s) that reached the changelog after a newer "
                        "state of the same session (a late write: a fenced worker's held produce request, or a "
                        "produce request retried after its timeout); each session keeps its newest state; "
                        "first: %s", left_out.late, "; ".join(left_out.examples))
        if left_out.superseded:
            log.debug("table recovery read %d older state(s) of sessions whose newest state the table already "
                      "held (a partition kept across the rebalance, read again from its start)", left_out.superseded)

    def reader(self) -> Callable[[bytes], bytes | None]:
        """``self.get`` for the window agent's decide phase: the memory store's own ``dict.get``.

        ``table.get(key)`` goes through ``Mapping.get``, the table's ``__getitem__``, its sensors'
        ``on_table_get`` (Faust's web statistics count reads) and the store's own ``__contains__``
        and ``__getitem__``: about eight Python calls per session of a batch, where the memory
        store holds the very values in a dict. What a read returns is the same; only Faust's read
        counter no longer counts them. Another store kind keeps ``self.get``. Taken per batch: the
        store is the table's for its whole life (a rebalance clears it in place).
        """
        values = internals().store_values(self.data)
        return self.get if values is None else values.get

    def partition_for_key(self, key: Any) -> int | None:
        if self._explicit_partition is not None:
            return self._explicit_partition
        result: int | None = super().partition_for_key(key)
        return result

    def set_in_partition(self, key: bytes, value: bytes, partition: int) -> None:
        """``table[key] = value`` with the changelog record going to ``partition``."""
        self._explicit_partition = partition
        try:
            self[key] = value
        finally:
            self._explicit_partition = None
        self._track(key, partition)

    async def save_many(self, items: Sequence[tuple[bytes, bytes, int]]) -> None:
        """``table[key] = value`` for many ``(key, value, partition)`` at once; returns once the
        broker has every changelog record.

        The same store update and the same raw changelog record as ``set_in_partition``, but the
        records go straight to the producer and are awaited together: one produce request per
        batch instead of one Faust buffer entry, future and callback per session. The profile had
        Faust's per-record changelog path filling its producer buffer under load, which then
        held back the delivery of incoming records one at a time. Awaiting the delivery also means
        offsets are only acknowledged after the states they depend on are in the changelog.
        """
        if not items:
            return
        store = self.data
        tracked = internals().key_partitions(store)
        for key, value, partition in items:
            store[key] = value
            if tracked is not None:
                tracked[key] = partition
        topic = self.changelog_topic.get_topic_name()
        placed = await send_all(self.app.producer, [(topic, key, value, partition) for key, value, partition in items])
        coverage = self.coverage
        for _, partition, first, count in placed:
            if first >= 0:
                coverage.wrote(partition, first, count)

    def delete_in_partition(self, key: bytes, partition: int) -> None:
        self._explicit_partition = partition
        try:
            del self[key]
        finally:
            self._explicit_partition = None
        tracked = internals().key_partitions(self.data)
        if tracked is not None:
            tracked.pop(key, None)

    def _track(self, key: bytes, partition: int) -> None:
        # The memory store forgets keys of revoked partitions after a rebalance only if it knows
        # their partition; it learns that from recovery, so tell it about locally written keys too
        # (the store's private map, read through pipeline.internals).
        tracked = internals().key_partitions(self.data)
        if tracked is not None:
            tracked[key] = partition
