"""PostgreSQL faults under a live stream: an outage, a crash-restart, and a slow database.

- **Outage**: the server is stopped mid-stream (at least 15 s by default, 30 s with ``--long``) and
  started again. The worker keeps deciding turns, the sink retries with backoff and acknowledges nothing,
  the worker neither dies nor spins (its CPU time over the idle part of the outage stays a small
  fraction of the wall time), and afterwards the backlog drains to exactly the expected rows. The
  brain comes from the same database, so its refresh fails during the outage too.
- **Crash-restart**: ``pg_ctl stop -m immediate`` (no shutdown checkpoint, WAL recovery on start)
  with the data directory kept, twice mid-stream: exact rows again.
- **Slow database**: every INSERT statement sleeps (a ``pg_sleep`` trigger) while far more events
  arrive than the sink can write; the worker applies back-pressure (its consumer stops fetching)
  instead of buffering, so its memory grows by much less than the volume waiting on the topic.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from pipeline.braindir import iter_brain_dir
from pipeline.core.brain import BrainIndex
from pipeline.core.types import VolunteeredPage
from pipeline.embedded.postgres import EmbeddedPostgres
from pipeline.settings import Settings
from sinks.brain_import import import_brain
from sinks.schema import migrate
from tests.integration.stream.harness import CONFORMANCE_BRAIN, run
from tests.reliability.conftest import Workers
from tests.reliability.crash import start_live_run
from tests.reliability.procstat import cpu_seconds, peak_rss_bytes, rss_bytes
from tests.reliability.verify import group_lag, row_count, verify, wait_until_quiet
from tests.services.broker import TestNames, settings_for
from topics.clients import make_producer
from topics.definitions import ensure_topics
from topics.io import send_records
from topics.records import Volunteered, event_id_for, rfc3339_ms

pytestmark = [pytest.mark.integration, pytest.mark.reliability]


@pytest.fixture
def own_postgres() -> Iterator[EmbeddedPostgres]:
    """A server of this test's own (stopping it must not disturb the session's shared server)."""
    pg = EmbeddedPostgres()
    pg.start()
    try:
        migrate(pg.url)
        yield pg
    finally:
        pg.close()


def settings_on(broker_url: str, names: TestNames, pg: EmbeddedPostgres) -> Settings:
    settings = settings_for(broker_url, names, database_url=pg.url, topic_partitions=4)
    run(ensure_topics(settings))
    return settings


def wait_turns_decided(settings: Settings, timeout: float = 120) -> None:
    """Until the group has committed every ``turns`` record (the window agent is done)."""
    from tests.reliability.verify import _lag

    deadline = time.monotonic() + timeout
    while run(_lag(settings, (settings.topic_turns,))) > 0:
        assert time.monotonic() < deadline, "the window agent did not get through the turns"
        time.sleep(0.25)


@pytest.mark.parametrize("outage_s", [15.0, pytest.param(30.0, marks=pytest.mark.long)])
def test_database_outage_mid_stream(outage_s: float, module_broker_url: str, names: TestNames,
                                    own_postgres: EmbeddedPostgres, conformance_brain: BrainIndex,
                                    workers: Workers) -> None:
    settings = settings_on(module_broker_url, names, own_postgres)
    pages, aliases = iter_brain_dir(CONFORMANCE_BRAIN)
    import_brain(own_postgres.url, pages, aliases)  # the worker's brain comes from this database
    expected, worker, producer = start_live_run(settings, conformance_brain,
                                                lambda: workers.start(settings, brain=None),
                                                turns=2000, seed=31, rate=500)
    assert worker.proc is not None
    time.sleep(1.0)  # some rows in, some turns still coming
    before_outage = row_count(settings.database_url)
    own_postgres.stop()
    down_at = time.monotonic()
    producer.finish()
    wait_turns_decided(settings)  # turns keep being decided while the database is down
    idle_from, cpu_from = time.monotonic(), cpu_seconds(worker.proc.pid)
    time.sleep(max(8.0, outage_s - (idle_from - down_at)))  # at least 8 s with nothing to do but wait
    idle_s, cpu_s = time.monotonic() - idle_from, cpu_seconds(worker.proc.pid) - cpu_from
    assert worker.proc.poll() is None, "the worker died during the outage:\n" + worker.log()[-3000:]
    assert group_lag(settings) > 0  # the sink acknowledged nothing it could not store
    own_postgres.start()

    wait_until_quiet(settings, len(expected), timeout=180)
    verdict = verify(settings, expected)
    print(f"\noutage {time.monotonic() - down_at:.1f} s; rows before {before_outage}; worker CPU {cpu_s:.2f} s "
          f"over {idle_s:.1f} s of idle outage; {verdict.figures()}")
    assert verdict.exact, verdict.problems()
    assert before_outage < len(expected)  # the outage really was mid-stream
    assert idle_s >= 8.0
    assert cpu_s < 0.15 * idle_s, f"the worker spun during the outage: {cpu_s:.2f} s CPU in {idle_s:.1f} s"
    log = worker.log()
    assert "cannot write events" in log and "brain refresh failed" in log
    assert worker.proc.poll() is None
    assert worker.stop() == 0


def test_database_crash_restart_with_data_kept(module_broker_url: str, names: TestNames,
                                               own_postgres: EmbeddedPostgres, conformance_brain: BrainIndex,
                                               workers: Workers) -> None:
    settings = settings_on(module_broker_url, names, own_postgres)
    expected, worker, producer = start_live_run(settings, conformance_brain, lambda: workers.start(settings),
                                                turns=2500, seed=32, rate=300)
    restarts = 0
    for fraction in (0.25, 0.6):
        deadline = time.monotonic() + 120
        while row_count(settings.database_url) < fraction * len(expected):
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.05)
        own_postgres.stop(mode="immediate")  # like a crash: WAL recovery at the next start
        time.sleep(1.0)
        own_postgres.start()
        restarts += 1
    producer.finish()
    wait_until_quiet(settings, len(expected), timeout=180)
    verdict = verify(settings, expected)
    print(f"\n{restarts} immediate restarts of PostgreSQL; {verdict.figures()}")
    assert verdict.exact, verdict.problems()
    assert worker.stop() == 0


# ----------------------------------------------------------------------------- slow database

SLOW_SQL = """
CREATE FUNCTION reliability_slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(%s); RETURN NULL; END $$;
CREATE TRIGGER reliability_slow AFTER INSERT ON context_volunteer_events
  FOR EACH STATEMENT EXECUTE FUNCTION reliability_slow_insert();
"""


def synthetic_events(count: int, synopsis_chars: int) -> list[tuple[bytes, bytes]]:
    """Valid Volunteered records, ~``synopsis_chars`` bytes each, 40 per session."""
    out = []
    filler = ("The quick brown fox jumps over the lazy dog. " * (synopsis_chars // 45 + 1))[:synopsis_chars]
    for i in range(count):
        sid, turn, slug = f"slow-{i // 40:06d}", i % 40 + 1, f"people/person-{i % 997}"
        event = Volunteered(event_id_for(sid, turn, "default", slug, "stream"), sid, turn,
                            VolunteeredPage(slug, "default", "Person", 0.85, "title",
                                            'exact title match "Person"; mentioned in the newest turn', filler),
                            "stream", rfc3339_ms(1_790_000_000_000 + i))
        out.append((sid.encode(), event.to_json()))
    return out


async def produce_raw(settings: Settings, topic: str, items: list[tuple[bytes, bytes]]) -> None:
    producer = make_producer(settings)
    await producer.start()
    try:
        await send_records(producer, topic, items)
    finally:
        await producer.stop()


@pytest.mark.parametrize("events", [60_000, pytest.param(200_000, marks=pytest.mark.long)])
def test_slow_database_applies_back_pressure(events: int, module_broker_url: str, names: TestNames,
                                             own_postgres: EmbeddedPostgres, workers: Workers) -> None:
    settings = settings_on(module_broker_url, names, own_postgres)
    with psycopg.connect(own_postgres.url, autocommit=True) as conn:
        conn.execute(SLOW_SQL.replace("%s", "2"))  # every INSERT statement takes 2 s or more
    worker = workers.start(settings)
    worker.wait_ready()
    assert worker.proc is not None
    pid = worker.proc.pid
    baseline = rss_bytes(pid)
    items = synthetic_events(events, 1000)
    volume = sum(len(k) + len(v) for k, v in items)
    run(produce_raw(settings, settings.topic_volunteered, items), timeout=300)
    time.sleep(8.0)  # the consumer fetches all it is going to fetch
    grown = peak_rss_bytes(pid) - baseline
    stored_while_slow = row_count(settings.database_url)
    print(f"\nslow database: {events} events ({volume / 2**20:.0f} MiB) waiting, {stored_while_slow} stored "
          f"while slow; worker RSS {baseline / 2**20:.0f} MiB -> peak +{grown / 2**20:.0f} MiB")
    assert worker.proc.poll() is None, worker.log()[-3000:]
    assert stored_while_slow < events // 2  # it really was slow: most events were still waiting
    assert grown < 0.5 * volume, f"worker memory grew by {grown / 2**20:.0f} MiB for {volume / 2**20:.0f} MiB waiting"

    with psycopg.connect(own_postgres.url, autocommit=True) as conn:  # the database recovers
        conn.execute("DROP TRIGGER reliability_slow ON context_volunteer_events")
    deadline = time.monotonic() + 300
    while row_count(settings.database_url) < events and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(1.0)
    with psycopg.connect(own_postgres.url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*), count(DISTINCT (session_id, turn, slug)) FROM "
                           "context_volunteer_events").fetchone()
    assert row == (events, events)
    assert worker.stop() == 0
