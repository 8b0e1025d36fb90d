"""Hostile and broken input on the ``turns`` topic: a hypothesis fuzzer against a real worker.

Records come from :mod:`tests.reliability.fuzz_records` (3,000 by default, 20,000 more with
``--long``), each built as a known kind. The worker runs with ``VOLUNTEER_MAX_TEXT_BYTES=2048`` and a
brain with hostile pages. Afterwards:

- the worker is still running and stops cleanly;
- bad in == dead letters out, exactly: every bad record has one dead letter, found by its source
  partition and offset, carrying the original key and value and an allowed ``error`` code with a
  message; no good record is dead-lettered, and nothing is dead-lettered downstream by the sink;
- the good records, which share sessions and partitions with the bad ones, volunteer exactly what
  an in-process replay of the good records alone volunteers: same event ids and fields on the
  topic, and the same rows in the table, every string stored verbatim (parameters, not SQL text).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from pipeline.braindir import load_brain_dir
from pipeline.core.session import DecisionOptions
from pipeline.replay import replay_lines
from pipeline.settings import Settings
from tests.integration.stream.harness import CONFORMANCE_BRAIN, run
from tests.reliability.conftest import Workers
from tests.reliability.fuzz_records import MAX_TEXT_BYTES, FuzzRecord, generate, write_brain
from tests.reliability.verify import group_lag
from tests.services.broker import TestNames, settings_for
from topics.clients import make_producer
from topics.definitions import ensure_topics
from topics.io import read_all
from topics.records import DeadLetter, Volunteered, event_id_for

pytestmark = [pytest.mark.integration, pytest.mark.reliability]


async def produce(settings: Settings, records: list[FuzzRecord]) -> list[tuple[int, int]]:
    """Send in order; returns each record's (partition, offset)."""
    producer = make_producer(settings, max_request_size=4 * 1024 * 1024)
    await producer.start()
    try:
        futures = [await producer.send(settings.topic_turns, r.value, key=r.key) for r in records]
        metas = await asyncio.gather(*futures)
        return [(m.partition, m.offset) for m in metas]
    finally:
        await producer.stop()


def expected_pages(records: list[FuzzRecord], brain_dir: Path) -> dict[str, tuple[Any, ...]]:
    """``event_id -> fields`` volunteered by replaying the good records alone, in order.

    A record is good or bad by construction, except for one defect that depends on the records
    before it: an unnumbered turn after a session reached the highest turn number. Replay (the
    oracle) reports those as ``turn_overflow``; they are relabelled bad in ``records``, in place.
    """
    brain = load_brain_dir(brain_dir)
    current: list[dict[str, Any]] = [{}]
    out: dict[str, tuple[Any, ...]] = {}
    good = [i for i, r in enumerate(records) if r.good]

    def lines() -> Iterator[bytes]:
        for index in good:
            value = records[index].value
            assert value is not None
            current[0] = orjson.loads(value)
            yield value

    def on_error(lineno: int, exc: Any) -> None:
        index = good[lineno - 1]
        assert exc.code == "turn_overflow", f"a record built as good is bad for replay: {exc}"
        records[index] = FuzzRecord("turn_overflow", records[index].key, records[index].value,
                                    frozenset({"turn_overflow"}))

    def on_page(session_id: str, turn: int, page: Any) -> None:
        channel = current[0].get("channel") or "stream"
        event_id = event_id_for(session_id, turn, page.source_id, page.slug, channel)
        out[event_id] = (session_id, turn, page.slug, page.source_id, page.display, page.confidence, page.arm,
                         page.rationale, page.synopsis, channel)

    replay_lines(lines(), brain, options=DecisionOptions(), max_text_bytes=MAX_TEXT_BYTES, on_page=on_page,
                 on_error=on_error)
    return out


def summarize(problems: list[str], per_kind: int = 6) -> str:
    """Problems grouped by what went wrong, a few of each."""
    groups: dict[str, list[str]] = {}
    for problem in problems:
        groups.setdefault(problem.split(":", 1)[0][:60], []).append(problem)
    return "\n".join(f"{len(items)} x {kind}:\n  " + "\n  ".join(p[:400] for p in items[:per_kind])
                     for kind, items in groups.items())


@pytest.mark.parametrize(("count", "seed"), [(3000, 0), pytest.param(20_000, 20_260, marks=pytest.mark.long)])
def test_fuzzed_turns_are_dead_lettered_exactly_and_good_ones_unaffected(
        count: int, seed: int, module_broker_url: str, names: TestNames, migrated_database_url: str,
        workers: Workers, tmp_path: Path) -> None:
    records = generate(count, seed=seed)
    brain_dir = write_brain(CONFORMANCE_BRAIN, tmp_path / "brain")
    settings = settings_for(module_broker_url, names, database_url=migrated_database_url, topic_partitions=4,
                            max_text_bytes=MAX_TEXT_BYTES)
    run(ensure_topics(settings))
    worker = workers.start(settings, brain=brain_dir, VOLUNTEER_MAX_TEXT_BYTES=MAX_TEXT_BYTES)
    worker.wait_ready()
    positions = run(produce(settings, records), timeout=300)
    expected = expected_pages(records, brain_dir)

    deadline_lag = 0
    for _ in range(600):
        deadline_lag = group_lag(settings)
        if deadline_lag == 0:
            break
        run(asyncio.sleep(0.25))
    assert deadline_lag == 0, "the worker did not get through the fuzzed records:\n" + worker.log()[-3000:]
    assert worker.proc is not None and worker.proc.poll() is None, worker.log()[-3000:]

    # --- dead letters: exactly the bad records, each once, with an allowed reason
    by_position = dict(zip(positions, records, strict=True))
    letters = [DeadLetter(**orjson.loads(r.value or b"{}")) for r in
               run(read_all(settings, settings.topic_dlq, idle_s=1.0, timeout_s=120), timeout=180)]
    problems: list[str] = []
    seen: Counter[tuple[int, int]] = Counter()
    for letter in letters:
        if letter.topic != settings.topic_turns:
            problems.append(f"dead letter from {letter.topic}: {letter.error} {letter.message}")
            continue
        position = (letter.partition, letter.offset)
        seen[position] += 1
        record = by_position.get(position)
        if record is None:
            problems.append(f"dead letter for an unknown position {position}")
            continue
        if record.good:
            problems.append(f"good record dead-lettered ({letter.error}: {letter.message}): {record.value!r:.300}")
        elif letter.error not in record.codes:
            problems.append(f"{record.kind}: error {letter.error!r} not in {sorted(record.codes)} "
                            f"({letter.message}): {record.value!r:.200}")
        if not letter.message:
            problems.append(f"{record.kind}: dead letter without a message")
        if letter.original_value() != record.value:
            problems.append(f"{record.kind}: dead letter does not carry the original value")
    bad = [(pos, r) for pos, r in zip(positions, records, strict=True) if not r.good]
    missing = [r for pos, r in bad if pos not in seen]
    problems += [f"bad record not dead-lettered ({r.kind}): {r.value!r:.200}" for r in missing[:10]]
    problems += [f"dead-lettered {n} times: {pos}" for pos, n in seen.items() if n > 1]

    # --- the good records: topic and table equal the replay of the good records alone
    events = [Volunteered.from_json(r.value) for r in
              run(read_all(settings, settings.topic_volunteered, idle_s=1.0, timeout_s=120), timeout=180)
              if r.value is not None]
    got: dict[str, tuple[Any, ...]] = {}
    for event in events:
        fields = (event.session_id, event.turn, event.slug, event.source_id, event.display, event.confidence,
                  event.arm, event.rationale, event.synopsis, event.channel)
        if got.setdefault(event.event_id, fields) != fields:
            problems.append(f"two different records share event_id {event.event_id}")
    for eid in set(expected) - set(got):
        problems.append(f"missing from the topic: {expected[eid]}")
    for eid in set(got) - set(expected):
        problems.append(f"unexpected on the topic: {got[eid]}")
    for eid in set(got) & set(expected):
        if got[eid] != expected[eid]:
            problems.append(f"differs on the topic: {got[eid]} != {expected[eid]}")

    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT session_id, turn, slug, source_id, confidence, match_arm, rationale, channel "
                            "FROM context_volunteer_events").fetchall()
    want_rows = Counter((e[0], e[1], e[2], e[3], e[5], e[6], e[7], e[9]) for e in expected.values())
    have_rows = Counter(tuple(r) for r in rows)
    problems += [f"row missing: {r}" for r in list(want_rows - have_rows)[:10]]
    problems += [f"row unexpected: {r}" for r in list(have_rows - want_rows)[:10]]

    kinds = Counter(r.kind for r in records)
    hostile_rows = sum(1 for r in rows if any(c in f"{r[0]}{r[2]}{r[7]}" for c in "'\"%$*[<{\u202e"))
    print(f"\nfuzz: {len(records)} records ({kinds['good']} good, {len(bad)} bad in {len(kinds) - 1} kinds); "
          f"dead letters {len(letters)}; events expected {len(expected)}, on topic {len(events)} "
          f"({len(got)} distinct); rows {len(rows)} ({hostile_rows} with quotes or markup in session, slug or channel); problems {len(problems)}")
    assert not problems, summarize(problems)
    assert len(letters) == len(bad) > 0 and len(expected) > 0 and hostile_rows > 0
    assert worker.stop() == 0
