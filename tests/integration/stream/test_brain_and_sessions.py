"""A worker on a PostgreSQL brain picks up a page added while it runs; idle sessions expire."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pipeline.braindir import iter_brain_dir
from pipeline.core.pages import Page
from pipeline.settings import Settings
from sinks.brain_import import import_brain
from tests.integration.stream.conftest import WorkerFactory
from tests.integration.stream.harness import ROOT, run, volunteered_on_topic
from topics.io import produce_turns, read_all
from topics.records import Turn, Volunteered

pytestmark = pytest.mark.integration

SAMPLE_BRAIN = ROOT / "pipeline" / "samples" / "brain"


def pages_of(events: list[Volunteered], session: str) -> list[tuple[int, str]]:
    return [(e.turn, e.slug) for e in events if e.session_id == session]


def import_sample_brain(database_url: str, brain_dir: Path = SAMPLE_BRAIN) -> None:
    pages, aliases = iter_brain_dir(brain_dir)
    import_brain(database_url, pages, aliases)


def test_page_added_while_the_worker_runs_is_volunteered_afterwards(
        pipeline_settings: Settings, start_worker: WorkerFactory) -> None:
    settings = pipeline_settings
    import_sample_brain(settings.database_url)
    worker = start_worker(VOLUNTEER_BRAIN_REFRESH_SECONDS="0.3")  # brain from PostgreSQL
    worker.wait_ready()
    run(produce_turns(settings, [
        Turn("s", "user", "Has Zephyrine Quarkwell signed with Alice Example yet?", turn=1),
    ]))
    events = volunteered_on_topic(settings, 1)
    assert pages_of(events, "s") == [(1, "people/alice-example")]  # the new name is unknown so far

    import_brain(settings.database_url, [Page(id=0, slug="people/zephyrine-quarkwell", title="Zephyrine Quarkwell",
                                              compiled_truth="Zephyrine Quarkwell runs procurement at Kiteline.")])
    worker.wait_for_log("brain reloaded", timeout=30)
    run(produce_turns(settings, [Turn("s", "user", "Zephyrine Quarkwell said yes this morning.", turn=2)]))
    events = volunteered_on_topic(settings, 2)
    assert pages_of(events, "s") == [(1, "people/alice-example"), (2, "people/zephyrine-quarkwell")]
    assert events[-1].synopsis == "Zephyrine Quarkwell runs procurement at Kiteline."
    assert worker.stop() == 0


def test_idle_sessions_expire_from_the_table(pipeline_settings: Settings, start_worker: WorkerFactory) -> None:
    settings = pipeline_settings
    worker = start_worker("--brain", str(SAMPLE_BRAIN), VOLUNTEER_SESSION_IDLE_SECONDS="1")
    worker.wait_ready()
    run(produce_turns(settings, [Turn("idle", "user", "Alice Example called.", turn=1),
                                 Turn("idle", "user", "Alice Example again.", turn=2)]))
    events = volunteered_on_topic(settings, 1)
    assert pages_of(events, "idle") == [(1, "people/alice-example")]  # turn 2: deduped within the session

    worker.wait_for_log("expired 1 idle sessions", timeout=30)
    time.sleep(0.2)
    # Without its saved state the session's dedupe is gone: the page is volunteered again
    # (had the session been kept, turn 3 would have been suppressed like turn 2).
    run(produce_turns(settings, [Turn("idle", "user", "Alice Example is back.", turn=3)]))
    events = volunteered_on_topic(settings, 2)
    assert pages_of(events, "idle") == [(1, "people/alice-example"), (3, "people/alice-example")]
    assert worker.stop() == 0


def test_an_expired_session_stays_expired_across_a_restart(
        pipeline_settings: Settings, start_worker: WorkerFactory, tmp_path: Path) -> None:
    """Expiry must reach the changelog as a tombstone: a worker that rebuilds the table from the
    changelog (a restart, or another worker taking the partition) would otherwise bring the
    session, and its page dedupe, back to life."""
    settings = pipeline_settings
    worker = start_worker("--brain", str(SAMPLE_BRAIN), VOLUNTEER_SESSION_IDLE_SECONDS="1")
    worker.wait_ready()
    run(produce_turns(settings, [Turn("gone", "user", "Alice Example called.", turn=1),
                                 Turn("kept", "user", "Alice Example called.", turn=1)]))
    assert len(volunteered_on_topic(settings, 2)) == 2
    worker.wait_for_log("expired 2 idle sessions", timeout=30)
    assert worker.stop() == 0

    changelog = f"{settings.app_id}-sessions-changelog"
    records = run(read_all(settings, changelog, idle_s=0.5, timeout_s=60))
    last: dict[bytes, bytes | None] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        assert record.key is not None
        last[record.key] = record.value
    assert len(last) == 2 and all(value is None for value in last.values()), last  # a tombstone each

    # A fresh worker (its own data folder) recovers the table from the changelog with the session
    # idle limit back at its default: the sessions are not there, so the page comes again.
    fresh = start_worker("--brain", str(SAMPLE_BRAIN), data_dir=tmp_path / "fresh")
    fresh.wait_ready()
    run(produce_turns(settings, [Turn("gone", "user", "Alice Example is back.", turn=2)]))
    events = volunteered_on_topic(settings, 3)
    assert pages_of(events, "gone") == [(1, "people/alice-example"), (2, "people/alice-example")]
    assert fresh.stop() == 0
