"""The one-pass recovery apply gives what the newest-state rule and Faust's own memory-store apply
give together: the same values and key partitions, the same records left out for the same reason,
the same coverage — on seeded random batches of states, late writes, tombstones and several
batches per read."""

from __future__ import annotations

import functools
import random
import types
from dataclasses import dataclass
from typing import Any

import pytest
from faust.stores.memory import Store as MemoryStore

from pipeline.agents.session_table import (
    NO_OFFSET,
    ChangelogCoverage,
    LeftOut,
    SessionRecord,
    apply_newest,
    newest_states,
    read_header,
)
from pipeline.core.session import SessionState


@dataclass
class _Message:
    key: bytes
    value: bytes | None
    partition: int
    offset: int
    timestamp: float


@dataclass
class _Event:
    key: bytes
    value: bytes | None
    message: _Message


def _state(source_offset: int) -> bytes:
    state = SessionState()
    state.last_turn = source_offset
    return SessionRecord(state=state, partition=0, offset=source_offset).to_bytes()


def _batches(seed: int) -> list[list[_Event]]:
    """A read of 1-4 batches over two changelog partitions: each session's states mostly in order,
    some written late (an older source offset after a newer one), some tombstones."""
    rng = random.Random(seed)
    keys = [f"s{i}".encode() for i in range(rng.randint(1, 12))]
    source = {key: rng.randint(0, 50) for key in keys}
    offsets = {0: 0, 1: 0}
    events = []
    for _ in range(rng.randint(1, 80)):
        key = rng.choice(keys)
        partition = int(key[1:]) % 2
        kind = rng.random()
        if kind < 0.1:
            value = None
        elif kind < 0.3:
            value = _state(max(0, source[key] - rng.randint(1, 10)))  # late: older than the newest
        else:
            source[key] += rng.randint(0, 5)  # 0: the same source offset again (a redelivered save)
            value = _state(source[key])
        offsets[partition] += 1
        events.append(_Event(key, value, _Message(key, value, partition, offsets[partition], rng.random())))
    cuts = sorted(rng.sample(range(1, len(events)), min(len(events) - 1, rng.randint(0, 3)))) if len(events) > 1 else []
    return [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True)]


def _faust_store(data: dict[bytes, bytes]) -> Any:
    """Faust's memory store's own apply, on plain dicts."""
    store = types.SimpleNamespace(data=data, _key_partition={})
    store._create_batch_iterator = functools.partial(MemoryStore._create_batch_iterator, store)
    return store


def _stock(batches: list[list[_Event]], before: dict[bytes, bytes]) -> tuple[Any, ...]:
    store = _faust_store(dict(before))
    read: set[Any] = set()
    left_out = LeftOut()
    coverage = ChangelogCoverage()

    def stored_offset(key: Any) -> int:
        raw = store.data.get(key)
        return read_header(raw)[1] if raw else NO_OFFSET

    for batch in batches:
        for event in batch:
            coverage.applied(event.message.partition, event.message.offset)
        kept, out = newest_states(batch, stored_offset, read)
        left_out.add(out)
        MemoryStore.apply_changelog_batch(store, kept, lambda k: k, lambda v: v)
    return store.data, store._key_partition, left_out, {p: coverage.through(p) for p in (0, 1)}, read


def _fused(batches: list[list[_Event]], before: dict[bytes, bytes]) -> tuple[Any, ...]:
    values, tracked = dict(before), {}
    read: set[Any] = set()
    left_out = LeftOut()
    coverage = ChangelogCoverage()
    for batch in batches:
        apply_newest(batch, values, tracked, read, left_out, coverage)
    return values, tracked, left_out, {p: coverage.through(p) for p in (0, 1)}, read


@pytest.mark.parametrize("seed", range(300))
def test_one_pass_gives_what_the_rule_and_fausts_apply_give(seed: int) -> None:
    batches = _batches(seed)
    rng = random.Random(-seed)
    before = {f"s{i}".encode(): _state(rng.randint(0, 60)) for i in range(rng.randint(0, 6))}  # a kept partition
    stock, fused = _stock(batches, before), _fused(batches, before)
    assert fused[0] == stock[0] and fused[1] == stock[1]
    assert (fused[2].late, fused[2].superseded, fused[2].examples) == (stock[2].late, stock[2].superseded,
                                                                       stock[2].examples)
    assert fused[3:] == stock[3:]


def test_the_batches_do_leave_states_out() -> None:
    """The seeds above are not all trivial: late and superseded records occur among them."""
    late = superseded = 0
    for seed in range(300):
        _, _, left_out, _, _ = _stock(_batches(seed), {b"s0": _state(55)})
        late += left_out.late
        superseded += left_out.superseded
    assert late > 50 and superseded > 50
