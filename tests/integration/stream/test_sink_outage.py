"""The sink never commits offsets past events that are not in the table: a database outage (and a
worker crash during it) loses nothing and stores nothing twice."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from aiokafka import TopicPartition

from pipeline.braindir import load_brain_dir
from pipeline.core.session import DecisionOptions
from pipeline.embedded.postgres import EmbeddedPostgres
from pipeline.replay import replay_lines
from pipeline.settings import Settings
from sinks.schema import migrate
from tests.integration.stream.conftest import WorkerFactory
from tests.integration.stream.harness import ROOT, count_rows, run, table_rows, volunteered_on_topic
from tests.services.broker import TestNames, settings_for
from topics.clients import make_admin
from topics.definitions import ensure_topics
from topics.io import produce_turns
from topics.records import Turn, decode_turn
from topics.tansu_client import committed_offsets

pytestmark = pytest.mark.integration

SAMPLES = ROOT / "pipeline" / "samples"


@pytest.fixture
def own_postgres() -> Iterator[EmbeddedPostgres]:
    """A (throwaway) server of this test's own, so stopping it does not disturb other tests."""
    pg = EmbeddedPostgres()
    pg.start()
    try:
        migrate(pg.url)
        yield pg
    finally:
        pg.close()


async def group_offsets(settings: Settings, topic: str) -> dict[TopicPartition, int]:
    admin = make_admin(settings)
    await admin.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(settings.topic_partitions)]
        return await committed_offsets(admin, settings.app_id, tps)
    finally:
        await admin.close()


def test_database_outage_and_crash_lose_nothing(module_broker_url: str, names: TestNames,
                                                own_postgres: EmbeddedPostgres, start_worker: WorkerFactory) -> None:
    settings = settings_for(module_broker_url, names, database_url=own_postgres.url, topic_partitions=4)
    run(ensure_topics(settings))
    turns = [t for t in (decode_turn(raw) for raw in (SAMPLES / "transcript.jsonl").read_bytes().splitlines())
             if t is not None]
    pages: list[tuple[str, int, str]] = []
    replay_lines((t.to_json() for t in turns), load_brain_dir(SAMPLES / "brain"), options=DecisionOptions(),
                 on_page=lambda sid, turn, page: pages.append((sid, turn, page.slug)))
    assert len(pages) >= 10

    worker = start_worker("--brain", str(SAMPLES / "brain"), settings=settings)
    worker.wait_ready()
    own_postgres.stop()
    run(produce_turns(settings, [Turn(t.session_id, t.role, t.text, t.turn, None, t.source_id, t.channel)
                                 for t in turns]))
    assert len(volunteered_on_topic(settings, len(pages))) == len(pages)  # the window agent carries on
    worker.wait_for_log("cannot write events", timeout=30)
    time.sleep(4)  # longer than Faust's commit interval (2.8 s)

    turns_committed = run(group_offsets(settings, settings.topic_turns))
    volunteered_committed = run(group_offsets(settings, settings.topic_volunteered))
    assert sum(max(o, 0) for o in turns_committed.values()) == len(turns)  # commits do happen...
    assert all(o <= 0 for o in volunteered_committed.values()), volunteered_committed  # ...but not past unstored events

    worker.kill()  # crash while the database is still down
    own_postgres.start()
    again = start_worker("--brain", str(SAMPLES / "brain"), settings=settings)
    deadline = time.monotonic() + 60
    while count_rows(own_postgres.url) < len(pages) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    rows = table_rows(own_postgres.url)
    assert sorted((r[0], r[1], r[2]) for r in rows) == sorted(pages)
    assert again.stop() == 0
