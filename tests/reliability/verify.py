"""The independent verifier: what the pipeline must have produced, rebuilt from the input alone.

The expected events come from :func:`pipeline.replay.replay_lines` over exactly the records
that were produced (in-process, no broker, no table, no crash), with the event identity and
``volunteered_at`` derived from the workload's own bookkeeping, not from anything the worker wrote.
Then:

- the table must hold every expected row exactly once, with the expected values, and nothing else;
- the ``volunteered`` topic must hold every expected event at least once, every copy identical to
  the expected record; copies beyond the first (redeliveries after a crash) are counted, not failed;
- the dead-letter topic must be empty (the workload has no bad records).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from aiokafka import TopicPartition

from pipeline.core.brain import BrainIndex
from pipeline.core.session import DecisionOptions
from pipeline.replay import replay_lines
from pipeline.settings import Settings
from tests.integration.stream.harness import run
from tests.reliability.workload import Workload
from topics.clients import make_admin, make_consumer
from topics.io import read_all
from topics.records import Volunteered, event_id_for, rfc3339_ms
from topics.tansu_client import committed_offsets, end_offsets

Identity = tuple[str, str, str, int, str]  # source_id, channel, session_id, turn, slug


@dataclass(frozen=True, slots=True)
class ExpectedEvent:
    event_id: str
    session_id: str
    turn: int
    slug: str
    source_id: str
    display: str
    confidence: float
    arm: str
    rationale: str
    synopsis: str
    channel: str
    volunteered_at: str | None  # None: the turn had no ts, so processing time is used

    @property
    def identity(self) -> Identity:
        return (self.source_id, self.channel, self.session_id, self.turn, self.slug)

    def matches(self, event: Volunteered) -> bool:
        same = (event.session_id, event.turn, event.slug, event.source_id, event.display, event.confidence,
                event.arm, event.rationale, event.synopsis, event.channel) == (
            self.session_id, self.turn, self.slug, self.source_id, self.display, self.confidence, self.arm,
            self.rationale, self.synopsis, self.channel)
        return same and (self.volunteered_at is None or event.volunteered_at == self.volunteered_at)


def expected_events(workload: Workload, brain: BrainIndex, *, options: DecisionOptions | None = None,
                    default_channel: str = "stream", default_source: str = "default") -> dict[str, ExpectedEvent]:
    """``event_id -> ExpectedEvent`` for everything the workload must volunteer."""
    out: dict[str, ExpectedEvent] = {}

    def on_page(session_id: str, turn: int, page: Any) -> None:
        meta = workload.meta[(session_id, turn)]
        channel = meta.channel or default_channel
        event_id = event_id_for(session_id, turn, page.source_id, page.slug, channel)
        assert event_id not in out, f"replay volunteered {page.slug} twice at {session_id}#{turn}"
        out[event_id] = ExpectedEvent(event_id, session_id, turn, page.slug, page.source_id, page.display,
                                      page.confidence, page.arm, page.rationale, page.synopsis, channel,
                                      rfc3339_ms(meta.ts_ms) if meta.ts_ms is not None else None)

    summary = replay_lines(workload.lines(), brain, options=options or DecisionOptions(),
                           default_source=default_source, on_page=on_page)
    assert summary.bad == 0 and summary.turns == len(workload.turns), summary.render()
    return out


# ----------------------------------------------------------------------------- what came out


ROW_SQL = ("SELECT source_id, channel, session_id, turn, slug, confidence, match_arm, rationale, "
           "volunteered_at FROM context_volunteer_events")


def table_rows(database_url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as conn:
        return conn.execute(ROW_SQL).fetchall()


def row_count(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SELECT count(*) FROM context_volunteer_events").fetchone()
        return int(row[0]) if row else 0


async def _lag(settings: Settings, topics: Iterable[str]) -> int:
    """Records of ``topics`` not yet committed by the workers' group (its app id)."""
    consumer = make_consumer(settings)
    admin = make_admin(settings)
    await consumer.start()
    await admin.start()
    try:
        tps: list[TopicPartition] = []
        for topic in topics:
            parts = consumer.partitions_for_topic(topic) or set()
            if not parts:
                await consumer.topics()
                parts = consumer.partitions_for_topic(topic) or set()
            tps.extend(TopicPartition(topic, p) for p in sorted(parts))
        ends = await end_offsets(consumer, tps, settings.broker_is_embedded)
        done = await committed_offsets(admin, settings.app_id, tps)
        lag = 0
        for tp in tps:
            lag += max(0, ends[tp] - max(done.get(tp, -1), 0))
        return lag
    finally:
        await admin.close()
        await consumer.stop()


def group_lag(settings: Settings) -> int:
    return run(_lag(settings, (settings.topic_turns, settings.topic_volunteered)), timeout=60)


def wait_until_quiet(settings: Settings, expected_rows: int, *, timeout: float = 300) -> float:
    """Block until the table has at least ``expected_rows`` rows and the group has committed every
    record of ``turns`` and ``volunteered`` (so nothing more is on its way); returns seconds waited.
    On timeout it returns anyway: the verifier then reports what is missing."""
    started = time.monotonic()
    deadline = started + timeout
    while time.monotonic() < deadline:
        if row_count(settings.database_url) >= expected_rows and group_lag(settings) == 0:
            break
        time.sleep(0.5)
    return time.monotonic() - started


@dataclass
class Verdict:
    """The comparison, with the figures the long runs print."""

    rows_expected: int
    rows_found: int
    lost_rows: list[Identity] = field(default_factory=list)
    extra_rows: list[tuple[Any, ...]] = field(default_factory=list)
    duplicate_rows: int = 0
    wrong_rows: list[tuple[Any, ...]] = field(default_factory=list)
    topic_records: int = 0
    topic_duplicates: int = 0
    topic_missing: list[str] = field(default_factory=list)
    topic_unexpected: list[Volunteered] = field(default_factory=list)
    topic_wrong: list[Volunteered] = field(default_factory=list)
    dead_letters: int = 0

    @property
    def exact(self) -> bool:
        return not (self.lost_rows or self.extra_rows or self.duplicate_rows or self.wrong_rows
                    or self.topic_missing or self.topic_unexpected or self.topic_wrong or self.dead_letters)

    def figures(self) -> str:
        return (f"rows expected {self.rows_expected}, rows found {self.rows_found}, lost {len(self.lost_rows)}, "
                f"extra {len(self.extra_rows)}, duplicate rows {self.duplicate_rows}, wrong rows "
                f"{len(self.wrong_rows)}; topic records {self.topic_records}, duplicates in topic "
                f"{self.topic_duplicates}, missing from topic {len(self.topic_missing)}, unexpected in topic "
                f"{len(self.topic_unexpected)}, differing {len(self.topic_wrong)}; dead letters {self.dead_letters}")

    def problems(self) -> str:
        return (f"{self.figures()}\nlost rows: {self.lost_rows[:5]}\nextra rows: {self.extra_rows[:5]}\n"
                f"wrong rows: {self.wrong_rows[:5]}\nmissing from topic: {self.topic_missing[:5]}\n"
                f"unexpected in topic: {self.topic_unexpected[:3]}\ndiffering in topic: {self.topic_wrong[:3]}")


def verify(settings: Settings, expected: dict[str, ExpectedEvent], *, skip_sessions: tuple[str, ...] = ()) -> Verdict:
    """Judge table and topic against ``expected``; sessions whose id starts with one of
    ``skip_sessions`` (e.g. hook calls made alongside the workload) are left to their own checks."""
    by_identity = {e.identity: e for e in expected.values()}
    rows = [r for r in table_rows(settings.database_url) if not str(r[2]).startswith(skip_sessions)]
    verdict = Verdict(rows_expected=len(expected), rows_found=len(rows))

    seen = Counter((r[0], r[1], r[2], r[3], r[4]) for r in rows)
    verdict.duplicate_rows = sum(n - 1 for n in seen.values() if n > 1)
    for row in rows:
        want = by_identity.get((row[0], row[1], row[2], row[3], row[4]))
        if want is None:
            verdict.extra_rows.append(row)
            continue
        at_ok = want.volunteered_at is None or rfc3339_ms(int(row[8].timestamp() * 1000)) == want.volunteered_at
        if (row[5], row[6], row[7]) != (want.confidence, want.arm, want.rationale) or not at_ok:
            verdict.wrong_rows.append(row)
    verdict.lost_rows = [identity for identity in by_identity if identity not in seen]

    records = run(read_all(settings, settings.topic_volunteered, idle_s=1.5, timeout_s=240), timeout=300)
    copies: Counter[str] = Counter()
    for rec in records:
        assert rec.value is not None
        event = Volunteered.from_json(rec.value)
        if skip_sessions and event.session_id.startswith(skip_sessions):
            continue
        want_event = expected.get(event.event_id)
        if want_event is None:
            verdict.topic_unexpected.append(event)
        elif not want_event.matches(event):
            verdict.topic_wrong.append(event)
        copies[event.event_id] += 1
    verdict.topic_records = sum(copies.values())
    verdict.topic_duplicates = sum(n - 1 for n in copies.values())
    verdict.topic_missing = [eid for eid in expected if eid not in copies]
    verdict.dead_letters = len(run(read_all(settings, settings.topic_dlq, idle_s=0.3, timeout_s=30), timeout=60))
    return verdict
