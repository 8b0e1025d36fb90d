"""Shutdown, session limits and broker connection loss, on real services.

- **SIGTERM** mid-stream: the worker finishes its in-flight batch, commits and exits 0; after a
  restart nothing is reprocessed (no redelivered duplicate on ``volunteered``) and nothing is lost.
- **Many sessions**: 20,000 concurrent sessions by default (100,000 with ``--long``), one turn each;
  the worker's memory per session stays small, and with a short ``VOLUNTEER_SESSION_IDLE_SECONDS``
  the table shrinks back to nothing: every session gets a tombstone in the changelog.
- **Broker connection loss**: the embedded broker is frozen (SIGSTOP) for longer than the group
  session timeout, mid-stream, then resumed (SIGCONT). The broker is memory-only, so a restart would
  lose everything; freezing cuts every connection's traffic the way a network partition does. The
  worker survives and the result is exact.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from pipeline.core.brain import BrainIndex
from pipeline.embedded.tansu import EmbeddedBroker
from pipeline.settings import Settings
from tests.integration.stream.harness import run
from tests.reliability.conftest import Workers
from tests.reliability.crash import start_live_run, wait_for_rows
from tests.reliability.procstat import rss_bytes
from tests.reliability.verify import verify, wait_until_quiet
from tests.services.broker import TestNames, settings_for
from topics.definitions import ensure_topics
from topics.io import produce_turns, read_all
from topics.records import Turn

pytestmark = [pytest.mark.integration, pytest.mark.reliability]


def test_sigterm_drains_commits_and_reprocesses_nothing(reliability_settings: Settings,
                                                        conformance_brain: BrainIndex, workers: Workers) -> None:
    settings = reliability_settings
    expected, first, producer = start_live_run(settings, conformance_brain, lambda: workers.start(settings),
                                               turns=3000, seed=51, rate=500)
    wait_for_rows(settings, len(expected) // 3, timeout=120)
    assert first.stop(signal.SIGTERM, timeout=60) == 0, first.log()[-3000:]
    second = workers.start(settings)
    producer.finish()
    wait_until_quiet(settings, len(expected), timeout=180)
    verdict = verify(settings, expected)
    print(f"\nSIGTERM mid-stream and restart: {verdict.figures()}")
    assert verdict.exact, verdict.problems()
    assert verdict.topic_duplicates == 0  # nothing before the SIGTERM was processed twice
    assert second.stop() == 0


def changelog_live_keys(settings: Settings) -> tuple[int, int]:
    """``(live keys, tombstones)`` of the session table's changelog: the table as recovery would see it."""
    last: dict[bytes | None, bytes | None] = {}
    for rec in run(read_all(settings, f"{settings.app_id}-sessions-changelog", idle_s=1.5, timeout_s=300),
                   timeout=400):
        last[rec.key] = rec.value
    live = sum(1 for v in last.values() if v is not None)
    return live, len(last) - live


@pytest.mark.parametrize(("sessions", "idle_s"), [(20_000, 20.0), pytest.param(100_000, 60.0, marks=pytest.mark.long)])
def test_many_concurrent_sessions_stay_small_and_expire(sessions: int, idle_s: float, module_broker_url: str,
                                                       names: TestNames, migrated_database_url: str,
                                                       workers: Workers) -> None:
    settings = settings_for(module_broker_url, names, database_url=migrated_database_url, topic_partitions=4)
    run(ensure_topics(settings))
    worker = workers.start(settings, VOLUNTEER_SESSION_IDLE_SECONDS=idle_s)
    worker.wait_ready()
    assert worker.proc is not None
    baseline = rss_bytes(worker.proc.pid)
    started = time.monotonic()
    turns = [Turn(f"many-{i:06d}", "user", f"Quick sync with Ruth Merckx about item {i} of the plan", turn=1)
             for i in range(sessions)]
    run(produce_turns(settings, turns), timeout=300)
    # every session has its state saved (one changelog record each) before any is idle
    deadline = time.monotonic() + 300
    live = 0
    while time.monotonic() < deadline:
        live, _ = changelog_live_keys(settings)
        if live >= sessions:
            break
        time.sleep(1.0)
    in_table_after = time.monotonic() - started
    grown = rss_bytes(worker.proc.pid) - baseline
    assert live == sessions, f"only {live} of {sessions} sessions reached the table"
    assert in_table_after < idle_s, "too slow to have all sessions live at once; raise idle_s"
    # then they all expire: a tombstone for every key, the table (as recovered) is empty
    deadline = time.monotonic() + idle_s + 120
    tombstones = 0
    while time.monotonic() < deadline:
        live, tombstones = changelog_live_keys(settings)
        if live == 0:
            break
        time.sleep(2.0)
    print(f"\n{sessions} concurrent sessions: worker RSS +{grown / 2**20:.0f} MiB "
          f"({grown / sessions:.0f} bytes per session); after {idle_s:.0f} s idle: {live} live, {tombstones} expired")
    assert live == 0 and tombstones == sessions
    # a fixed allowance plus 2 KiB a session: far below what keeping every decoded state (~4 KiB
    # each, the window agent's cache is capped at 20,000) or any per-turn data would take
    assert grown < 64 * 2**20 + 2048 * sessions, f"{grown / sessions:.0f} bytes per session"
    assert "expired" in worker.log()
    assert worker.proc.poll() is None
    assert worker.stop() == 0


def test_broker_frozen_longer_than_the_session_timeout(names: TestNames, migrated_database_url: str,
                                                       embedded_broker: EmbeddedBroker, conformance_brain: BrainIndex,
                                                       workers: Workers) -> None:
    settings = settings_for(embedded_broker.url, names, database_url=migrated_database_url, topic_partitions=4)
    run(ensure_topics(settings))
    expected, worker, producer = start_live_run(settings, conformance_brain, lambda: workers.start(settings),
                                                turns=3000, seed=61, rate=400)
    wait_for_rows(settings, len(expected) // 4, timeout=120)
    pid = embedded_broker.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(10.0)  # > the 3 s group session timeout: the coordinator would expire the member
    finally:
        os.kill(pid, signal.SIGCONT)
    producer.finish()
    wait_until_quiet(settings, len(expected), timeout=240)
    verdict = verify(settings, expected)
    print(f"\nbroker frozen 10 s mid-stream: {verdict.figures()}")
    assert worker.proc is not None and worker.proc.poll() is None, worker.log()[-3000:]
    assert verdict.exact, verdict.problems()
    assert worker.stop() == 0
